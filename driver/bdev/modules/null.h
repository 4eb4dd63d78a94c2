// bdev_null: no data at all — reads return whatever the buffer held, writes go nowhere. For
// measuring the stack itself (SPDK's null bdev).
#pragma once

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

struct NullOptions {
  std::string name;
  uint64_t num_blocks = 0;
  uint32_t block_size = 512;
};
Result<Bdev*> create_null_bdev(Manager& mgr, const NullOptions& o);

}  // namespace pollux::bdev
