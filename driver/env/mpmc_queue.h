// A bounded lock-free multi-producer multi-consumer queue (sequence-numbered cells, after
// Dmitry Vyukov's design). Used as an MPSC message ring between reactors and as the shared
// free list of DMA buffer pools. No allocation after construction; push/pop never block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>

namespace pollux::env {

inline constexpr std::size_t kCacheLine = 64;

template <typename T>
class MpmcQueue {
 public:
  // capacity is rounded up to a power of two (minimum 2).
  explicit MpmcQueue(std::size_t capacity) {
    std::size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    mask_ = cap - 1;
    cells_ = std::make_unique<Cell[]>(cap);
    for (std::size_t i = 0; i < cap; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }
  MpmcQueue(const MpmcQueue&) = delete;
  MpmcQueue& operator=(const MpmcQueue&) = delete;

  std::size_t capacity() const { return mask_ + 1; }

  // Returns false when full.
  bool try_push(const T& value) {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const std::size_t seq = cell.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Gives back an element of a free list: a queue that holds every element there is, so it is
  // never full, yet a push can find its cell still held by a pop another thread claimed and has
  // not finished (preempted between its two steps) once the others have gone round the ring.
  // Waits for that pop rather than lose the element (dropping lost up to 222 of 256 buffers in
  // TSan's dma_pool_test). Rare: a yield only after 64 tries.
  void push_returned(const T& value) {
    for (unsigned tries = 1; !try_push(value); ++tries)
      if (tries >= 64) std::this_thread::yield();
  }

  // Returns false when empty.
  bool try_pop(T& out) {
    std::size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const std::size_t seq = cell.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          out = cell.value;
          cell.seq.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Approximate (racy by nature); exact when no push/pop runs concurrently.
  std::size_t size_approx() const {
    const std::size_t t = tail_.load(std::memory_order_acquire);
    const std::size_t h = head_.load(std::memory_order_acquire);
    return t >= h ? t - h : 0;
  }

 private:
  struct Cell {
    std::atomic<std::size_t> seq{0};
    T value{};
  };
  alignas(kCacheLine) std::atomic<std::size_t> tail_{0};
  alignas(kCacheLine) std::atomic<std::size_t> head_{0};
  alignas(kCacheLine) std::size_t mask_ = 0;
  std::unique_ptr<Cell[]> cells_;
};

}  // namespace pollux::env
