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
  // Gauges (a count of things open now) go down too; owner thread only.
  OwnerCounter& operator-=(uint64_t n) {
    v_.store(load() - n, std::memory_order_relaxed);
    return *this;
  }
  OwnerCounter& operator--() { return *this -= 1; }
  uint64_t operator++(int) {
    const uint64_t old = load();
    v_.store(old + 1, std::memory_order_relaxed);
    return old;
  }

 private:
  std::atomic<uint64_t> v_;
};

}  // namespace pollux::env

namespace pollux::env {

// A histogram of one owner thread's values (latencies in ns) in power-of-two buckets —
// bucket i holds values below 2^i and at least 2^(i-1) — readable from any thread. Recording
// is two OwnerCounter increments; no locked instruction. The count is the buckets' sum.
class OwnerHistogram {
 public:
  static constexpr int kBuckets = 48;  // the last one also holds everything larger
  static constexpr int bucket_of(uint64_t v) {
    const int b = v == 0 ? 0 : 64 - __builtin_clzll(v);
    return b < kBuckets ? b : kBuckets - 1;
  }
  // Exclusive upper bound of bucket i (the last bucket's is open).
  static constexpr uint64_t bucket_limit(int i) { return uint64_t{1} << i; }

  void record(uint64_t v) {  // owner thread only
    ++buckets_[bucket_of(v)];
    sum_ += v;
  }
  // Not concurrently with record() on `to` (e.g. under the lock that retires a queue pair).
  void add_to(OwnerHistogram& to) const {
    for (int i = 0; i < kBuckets; ++i) to.buckets_[i] += buckets_[i].load();
    to.sum_ += sum_.load();
  }
  uint64_t bucket(int i) const { return buckets_[i].load(); }
  uint64_t sum() const { return sum_.load(); }

 private:
  OwnerCounter buckets_[kBuckets];
  OwnerCounter sum_;
};

}  // namespace pollux::env
