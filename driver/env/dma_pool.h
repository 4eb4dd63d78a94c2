// Fixed-size DMA buffers for I/O: a shared lock-free pool, and a per-thread cache in front
// of it so that get/put are O(1) and touch no shared cache line in the common case.
//
// Under AddressSanitizer, pools made after poison_free_dma_buffers(true) keep their free
// buffers poisoned (in the pool or in a cache): a read or write of a buffer nobody holds is
// reported where it happens. Fuzz targets turn it on; other builds compile it away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "driver/env/dma_memory.h"
#include "driver/env/mpmc_queue.h"

namespace pollux::env {

#if defined(__SANITIZE_ADDRESS__)
#define POLLUX_DMA_POISON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POLLUX_DMA_POISON 1
#endif
#endif

// Pools created from now on poison their free buffers (AddressSanitizer builds only).
void poison_free_dma_buffers(bool on);

class DmaBufferPool {
 public:
  // `buffer_size` is rounded up to a multiple of 4 KiB so every buffer is page-aligned.
  static Result<std::unique_ptr<DmaBufferPool>> create(MemoryRegistry& registry,
                                                       std::size_t buffer_size, std::size_t count,
                                                       DmaOptions options = {});

  std::size_t buffer_size() const { return buffer_size_; }
  std::size_t capacity() const { return count_; }
  Backing backing() const { return region_->backing(); }
  const DmaRegion& region() const { return *region_; }

  // Lock-free, any thread. Return how many buffers were moved (get: may be fewer than n).
  std::size_t get_bulk(void** out, std::size_t n);
  void put_bulk(void* const* bufs, std::size_t n);

  // O(1): buffers live in one region.
  uint64_t iova(const void* buf) const {
    return region_->iova() + (static_cast<const char*>(buf) - static_cast<char*>(region_->data()));
  }
  bool owns(const void* buf) const;
  std::size_t available_approx() const { return free_.size_approx(); }

  ~DmaBufferPool();
  // A buffer becomes free (poisoned) or held (usable); no-ops unless this pool poisons.
  void mark_free(void* buf) const;
  void mark_held(void* buf) const;

 private:
  DmaBufferPool(std::unique_ptr<DmaRegion> region, std::size_t buffer_size, std::size_t count);
  std::unique_ptr<DmaRegion> region_;
  std::size_t buffer_size_;
  std::size_t count_;
  MpmcQueue<void*> free_;
  bool poison_ = false;
};

// One per thread (not thread-safe by design: its owner is the only user).
class DmaBufferCache {
 public:
  static constexpr std::size_t kMaxCache = 256;

  explicit DmaBufferCache(DmaBufferPool& pool, std::size_t cache_size = 64);
  ~DmaBufferCache();  // returns cached buffers to the pool
  DmaBufferCache(const DmaBufferCache&) = delete;
  DmaBufferCache& operator=(const DmaBufferCache&) = delete;

  // nullptr when the pool is exhausted (counted in exhausted()).
  void* get() {
    if (count_ == 0 && refill() == 0) {
      ++exhausted_;
      return nullptr;
    }
    void* b = local_[--count_];
#ifdef POLLUX_DMA_POISON
    pool_.mark_held(b);
#endif
    return b;
  }
  void put(void* buf) {
    if (count_ == size_) flush(size_ / 2);
#ifdef POLLUX_DMA_POISON
    pool_.mark_free(buf);
#endif
    local_[count_++] = buf;
  }

  DmaBufferPool& pool() const { return pool_; }
  uint64_t exhausted() const { return exhausted_; }
  std::size_t cached() const { return count_; }

 private:
  std::size_t refill();
  void flush(std::size_t n);

  DmaBufferPool& pool_;
  std::size_t size_;
  std::size_t count_ = 0;
  uint64_t exhausted_ = 0;
  void* local_[kMaxCache];
};

}  // namespace pollux::env
