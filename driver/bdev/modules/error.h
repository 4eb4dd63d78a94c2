// bdev_error: a virtual bdev that injects errors (SPDK's vbdev_error). It claims its base,
// registers "<base>_err" (or a given name) and forwards I/O, except what an injection
// catches: I/O of a type (or of every type), overlapping an LBA range, the next N of them —
// failed with a status, or held "pending forever" until the injection is cleared, a reset
// arrives, or the bdev is removed (then completed as kAborted).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "driver/bdev/modules/vbdev.h"

namespace pollux::bdev {

struct ErrorOptions {
  std::string base_name;
  std::string name;  // empty: "<base_name>_err"
};

enum class ErrorMode : uint8_t {
  kFail,     // complete with `status` (and `nvme_status`)
  kPending,  // never complete: held until cleared / reset / removed, then kAborted
};

struct ErrorInjection {
  std::optional<IoType> type;  // nullopt: every I/O type
  uint32_t count = 1;          // how many matching I/Os it catches (0: every one, until cleared)
  // LBA range [lba_start, lba_end): an I/O overlapping it matches. I/O without blocks (reset,
  // NVMe passthru, flush of nothing) matches only an unrestricted range.
  uint64_t lba_start = 0;
  uint64_t lba_end = std::numeric_limits<uint64_t>::max();
  ErrorMode mode = ErrorMode::kFail;
  IoStatus status = IoStatus::kFailed;  // kFailed or kNvmeError (others are accepted too)
  // With kNvmeError: the status field as in CQE DW3[31:16] (SC in bits 8:1, SCT in 11:9,
  // DNR bit 15; the phase bit is ignored). Must be non-zero.
  uint16_t nvme_status = 0;
};

struct ErrorStats {
  uint64_t failed = 0;   // I/Os failed by an injection
  uint64_t held = 0;     // I/Os held now (pending mode)
  uint64_t aborted = 0;  // held I/Os released as kAborted
  uint64_t injections = 0;  // active injections
};

class ErrorModule final : public VbdevModule {
 public:
  explicit ErrorModule(Manager& mgr) : VbdevModule(mgr, "error") {}

  // Stores the configuration; builds now if the base exists (true) or when it appears
  // (false). Errors: empty base name, -EEXIST, base claimed (-EPERM).
  Result<bool> create(const ErrorOptions& o);
  // Forgets the configuration; held I/Os are aborted and the bdev unregistered; done(ctx) then.
  int remove(const std::string& name, event::MsgFn done = nullptr, void* ctx = nullptr);

  // Adds an injection (checked in the order added; the first match takes the I/O).
  // -ENODEV (no such error bdev), -EINVAL (bad range, kNvmeError with nvme_status 0, kPending
  // or kSuccess status).
  int inject(const std::string& name, const ErrorInjection& inj);
  // Drops the injections of `type` (nullopt: all) and aborts every held I/O on every channel;
  // done(ctx) on the calling thread once they are completed. -ENODEV.
  int clear(const std::string& name, std::optional<IoType> type = std::nullopt,
            event::MsgFn done = nullptr, void* ctx = nullptr);
  Result<ErrorStats> stats(const std::string& name);
};

}  // namespace pollux::bdev
