#include "driver/env/dma_pool.h"

#include <algorithm>
#include <atomic>

#ifdef POLLUX_DMA_POISON
#include <sanitizer/asan_interface.h>
#endif

namespace pollux::env {

namespace {
std::atomic<bool> g_poison{false};
}  // namespace

void poison_free_dma_buffers(bool on) {
  g_poison.store(on, std::memory_order_relaxed);
}

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
#ifdef POLLUX_DMA_POISON
  poison_ = g_poison.load(std::memory_order_relaxed);
#endif
  char* base = static_cast<char*>(region_->data());
  for (std::size_t i = 0; i < count; ++i) {
    mark_free(base + i * buffer_size_);
    free_.try_push(base + i * buffer_size_);
  }
}

DmaBufferPool::~DmaBufferPool() {
#ifdef POLLUX_DMA_POISON
  // The region is unmapped next: its addresses may be mapped again by anyone.
  if (poison_) ASAN_UNPOISON_MEMORY_REGION(region_->data(), buffer_size_ * count_);
#endif
}

void DmaBufferPool::mark_free([[maybe_unused]] void* buf) const {
#ifdef POLLUX_DMA_POISON
  if (poison_) ASAN_POISON_MEMORY_REGION(buf, buffer_size_);
#endif
}

void DmaBufferPool::mark_held([[maybe_unused]] void* buf) const {
#ifdef POLLUX_DMA_POISON
  if (poison_) ASAN_UNPOISON_MEMORY_REGION(buf, buffer_size_);
#endif
}

std::size_t DmaBufferPool::get_bulk(void** out, std::size_t n) {
  std::size_t got = 0;
  while (got < n && free_.try_pop(out[got])) mark_held(out[got++]);
  return got;
}

void DmaBufferPool::put_bulk(void* const* bufs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    mark_free(bufs[i]);
    free_.push_returned(bufs[i]);  // the queue holds every buffer the pool owns
  }
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
  for (std::size_t i = 0; i < count_; ++i) pool_.mark_free(local_[i]);  // free, in the cache
  return count_;
}

void DmaBufferCache::flush(std::size_t n) {
  n = std::min(n, count_);
  count_ -= n;
  pool_.put_bulk(local_ + count_, n);
}

}  // namespace pollux::env
