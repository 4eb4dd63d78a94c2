// A log-linear latency histogram: exact below 32, then 32 linear sub-buckets per power of
// two (≤ 3.1% relative error). record() is a shift, a count-leading-zeros and an increment:
// cheap enough for every I/O on the hot path. Single writer; merge copies for reporting.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace pollux::env {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 5;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSub;

  static constexpr int bucket_of(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    const int msb = 63 - __builtin_clzll(v);
    const int shift = msb - kSubBits;
    return (shift + 1) * kSub + static_cast<int>((v >> shift) & (kSub - 1));
  }
  // Smallest value that falls in bucket b.
  static constexpr uint64_t bucket_floor(int b) {
    if (b < kSub) return static_cast<uint64_t>(b);
    const int shift = b / kSub - 1;
    return (uint64_t{kSub} + static_cast<uint64_t>(b % kSub)) << shift;
  }

  void record(uint64_t v) {
    ++counts_[bucket_of(v)];
    ++count_;
    sum_ += v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }
  void merge(const LatencyHistogram& o) {
    if (o.count_ == 0) return;  // most channels' histograms of some kind (a dead one's, often)
    // Only the buckets between o's min and max can hold counts: a channel's latencies span a
    // few hundred of the 1,920 buckets (a stats walk merges one histogram per channel).
    for (int i = bucket_of(o.min_), last = bucket_of(o.max_); i <= last; ++i)
      counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }
  void reset() { *this = LatencyHistogram{}; }
  // What was recorded since `earlier`, a copy of this histogram taken before (interval
  // reports of a histogram that keeps growing). Min and max become the bounds of the lowest
  // and highest buckets that grew.
  LatencyHistogram since(const LatencyHistogram& earlier) const {
    LatencyHistogram d;
    for (int i = 0; i < kBuckets; ++i) {
      d.counts_[i] = counts_[i] - std::min(counts_[i], earlier.counts_[i]);
      if (d.counts_[i] == 0) continue;
      d.min_ = std::min(d.min_, std::max(min_, bucket_floor(i)));
      d.max_ = std::min(max_, i + 1 < kBuckets ? bucket_floor(i + 1) - 1 : max_);
    }
    d.count_ = count_ - std::min(count_, earlier.count_);
    d.sum_ = sum_ - std::min(sum_, earlier.sum_);
    return d;
  }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }
  // Value at quantile q in [0, 1]: the midpoint of the bucket holding it, clamped to [min, max].
  uint64_t quantile(double q) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) {
        const uint64_t lo = bucket_floor(b);
        const uint64_t hi = b + 1 < kBuckets ? bucket_floor(b + 1) : lo;
        return std::clamp(lo + (hi - lo) / 2, min(), max_);
      }
    }
    return max_;
  }
  uint64_t bucket_count(int b) const { return counts_[b]; }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = ~0ull;
  uint64_t max_ = 0;
};

}  // namespace pollux::env
