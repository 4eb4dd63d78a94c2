// bdev_malloc: a RAM disk in DMA memory. An optional copy hook stands in for a copy-offload
// engine (it is handed every copy; by default memcpy).
#pragma once

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

using CopyFn = void (*)(void* dst, const void* src, std::size_t len, void* ctx);

struct MallocOptions {
  std::string name;
  uint64_t num_blocks = 0;
  uint32_t block_size = 512;
  CopyFn copy = nullptr;  // null: memcpy
  void* copy_ctx = nullptr;
};
Result<Bdev*> create_malloc_bdev(Manager& mgr, const MallocOptions& o);

}  // namespace pollux::bdev
