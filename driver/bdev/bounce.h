// The manager's DMA bounce buffers (internal).
#pragma once

#include <memory>

#include "driver/bdev/bdev.h"
#include "driver/env/dma_pool.h"

namespace pollux::bdev {

struct Manager::Bounce {
  std::unique_ptr<env::DmaBufferPool> pool;
};

}  // namespace pollux::bdev
