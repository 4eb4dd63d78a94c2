// bdev_passthru: the example virtual bdev. Claims its base, forwards every I/O unchanged and
// counts what went through (SPDK's vbdev_passthru).
#pragma once

#include <atomic>

#include "driver/bdev/modules/vbdev.h"

namespace pollux::bdev {

struct PassthruOptions {
  std::string name;       // the passthru bdev
  std::string base_name;  // the bdev it sits on (may appear later)
};

// Counted I/O of one passthru bdev (summed over its channels when read).
struct PassthruCounters {
  std::array<uint64_t, kIoTypes> submitted{};
  std::array<uint64_t, kIoTypes> completed{};
  std::array<uint64_t, kIoTypes> failed{};
};

class PassthruModule final : public VbdevModule {
 public:
  explicit PassthruModule(Manager& mgr) : VbdevModule(mgr, "passthru") {}
  // Stores the configuration; builds the bdev now if the base exists (true) or when it
  // appears (false). Errors: empty names, -EEXIST (name configured), base claimed (-EPERM).
  Result<bool> create(const PassthruOptions& o);
  // Forgets the configuration and unregisters the bdev; done(ctx) once it is gone.
  int remove(const std::string& name, event::MsgFn done = nullptr, void* ctx = nullptr);
  // -ENODEV if no such live passthru bdev.
  Result<PassthruCounters> counters(const std::string& name);
};

}  // namespace pollux::bdev
