// bdev_split: fixed partitions of a base bdev (SPDK's vbdev_split). Part i of "<base>"
// is "<base>p<i>": blocks [i·part, (i+1)·part) of the base; I/O is shifted by i·part and
// sent to the base. The core refuses I/O beyond a part's end. Every part shares one claimed
// descriptor of the base; when the base goes, all parts are torn down, then it is closed.
#pragma once

#include "driver/bdev/modules/vbdev.h"

namespace pollux::bdev {

struct SplitOptions {
  std::string base_name;
  uint32_t split_count = 0;   // parts (required, >= 1)
  uint64_t split_size_mb = 0;   // size of each part in MiB (0: the base divided equally)
  uint64_t part_blocks = 0;     // or the size in blocks (wins over split_size_mb)
};

class SplitModule final : public VbdevModule {
 public:
  explicit SplitModule(Manager& mgr) : VbdevModule(mgr, "split") {}
  // Stores the configuration (its id is the base name); builds now if the base exists (true)
  // or when it appears (false). Errors: count 0, parts larger than the base, -EEXIST (the base
  // is already split), base claimed. A configuration that does not fit a base appearing
  // later stays unbuilt (configs()).
  Result<bool> create(const SplitOptions& o);
  // Forgets the configuration and removes every part; done(ctx) once they are all gone.
  int remove(const std::string& base_name, event::MsgFn done = nullptr, void* ctx = nullptr);
};

}  // namespace pollux::bdev
