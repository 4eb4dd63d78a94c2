// A statistics counter written by one owner thread and read by any (a metrics scrape): a
// relaxed atomic whose increment is a plain load and store — no locked read-modify-write on
// the hot path (x86: two movs), and no data race for the readers.
#pragma once

#include <atomic>
#include <cstdint>

namespace pollux::env {

class OwnerCounter {
 public:
  OwnerCounter(uint64_t v = 0) : v_(v) {}  // NOLINT: used like the integer it counts
  OwnerCounter(const OwnerCounter& o) : v_(o.load()) {}
  OwnerCounter& operator=(const OwnerCounter& o) {
    v_.store(o.load(), std::memory_order_relaxed);
    return *this;
  }
  operator uint64_t() const { return load(); }  // NOLINT
  uint64_t load() const { return v_.load(std::memory_order_relaxed); }
  // Owner thread only.
  OwnerCounter& operator+=(uint64_t n) {
    v_.store(load() + n, std::memory_order_relaxed);
    return *this;
  }
  OwnerCounter& operator++() { return *this += 1; }
  uint64_t operator++(int) {
    const uint64_t old = load();
    v_.store(old + 1, std::memory_order_relaxed);
    return old;
  }

 private:
  std::atomic<uint64_t> v_;
};

}  // namespace pollux::env
