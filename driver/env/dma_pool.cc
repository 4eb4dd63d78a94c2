#include "driver/env/dma_pool.h"

#include <algorithm>

namespace pollux::env {

Result<std::unique_ptr<DmaBufferPool>> DmaBufferPool::create(MemoryRegistry& registry,
                                                             std::size_t buffer_size,
                                                             std::size_t count,
                                                             DmaOptions options) {
  if (buffer_size == 0 || count == 0) return make_error(EINVAL, "empty DMA buffer pool");
  const std::size_t size = (buffer_size + 4095) / 4096 * 4096;
  auto region = DmaRegion::create(registry, size * count, options);
  if (!region) return region.error();
  return std::unique_ptr<DmaBufferPool>(
      new DmaBufferPool(std::move(region).value(), size, count));
}

DmaBufferPool::DmaBufferPool(std::unique_ptr<DmaRegion> region, std::size_t buffer_size,
                             std::size_t count)
    : region_(std::move(region)), buffer_size_(buffer_size), count_(count), free_(count) {
  char* base = static_cast<char*>(region_->data());
  for (std::size_t i = 0; i < count; ++i) free_.try_push(base + i * buffer_size_);
}

std::size_t DmaBufferPool::get_bulk(void** out, std::size_t n) {
  std::size_t got = 0;
  while (got < n && free_.try_pop(out[got])) ++got;
  return got;
}

void DmaBufferPool::put_bulk(void* const* bufs, std::size_t n) {
  // Cannot fail: the queue holds every buffer the pool owns.
  for (std::size_t i = 0; i < n; ++i) free_.try_push(bufs[i]);
}

bool DmaBufferPool::owns(const void* buf) const {
  const auto off = static_cast<const char*>(buf) - static_cast<char*>(region_->data());
  return off >= 0 && static_cast<std::size_t>(off) < buffer_size_ * count_ &&
         static_cast<std::size_t>(off) % buffer_size_ == 0;
}

DmaBufferCache::DmaBufferCache(DmaBufferPool& pool, std::size_t cache_size)
    : pool_(pool), size_(std::clamp<std::size_t>(cache_size, 2, kMaxCache)) {}

DmaBufferCache::~DmaBufferCache() { flush(count_); }

std::size_t DmaBufferCache::refill() {
  count_ = pool_.get_bulk(local_, size_ / 2);
  return count_;
}

void DmaBufferCache::flush(std::size_t n) {
  n = std::min(n, count_);
  count_ -= n;
  pool_.put_bulk(local_ + count_, n);
}

}  // namespace pollux::env
