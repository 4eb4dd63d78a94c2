#include "driver/env/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

namespace pollux::env {
namespace {

TEST(LatencyHistogram, BucketsAreMonotonicAndCoverEverything) {
  int prev = -1;
  for (uint64_t v : {0ull, 1ull, 31ull, 32ull, 33ull, 63ull, 64ull, 1000ull, 1ull << 40, ~0ull}) {
    const int b = LatencyHistogram::bucket_of(v);
    EXPECT_GT(b, prev) << v;
    EXPECT_LT(b, LatencyHistogram::kBuckets);
    EXPECT_LE(LatencyHistogram::bucket_floor(b), v);
    if (b + 1 < LatencyHistogram::kBuckets) {
      EXPECT_GT(LatencyHistogram::bucket_floor(b + 1), v);
    }
    prev = b;
  }
}

TEST(LatencyHistogram, QuantilesWithinThreePercentOfExact) {
  const uint64_t seed = 20261122;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(9.0, 1.0);  // ~8000 ticks median, long tail
  LatencyHistogram h;
  std::vector<uint64_t> all;
  for (int i = 0; i < 100000; ++i) {
    const auto v = static_cast<uint64_t>(dist(rng));
    h.record(v);
    all.push_back(v);
  }
  std::sort(all.begin(), all.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double exact = static_cast<double>(all[static_cast<std::size_t>(q * (all.size() - 1))]);
    EXPECT_NEAR(static_cast<double>(h.quantile(q)), exact, exact * 0.032) << q;
  }
  EXPECT_EQ(h.min(), all.front());
  EXPECT_EQ(h.max(), all.back());
  EXPECT_EQ(h.count(), all.size());
}

TEST(LatencyHistogram, MergeAddsCounts) {
  LatencyHistogram a, b;
  a.record(10);
  b.record(1000);
  b.record(5);
  a.merge(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_EQ(a.min(), 5u);
  EXPECT_EQ(a.max(), 1000u);
  EXPECT_EQ(a.quantile(0.0), 5u);
  EXPECT_EQ(a.quantile(1.0), a.max());
  LatencyHistogram empty;
  EXPECT_EQ(empty.quantile(0.5), 0u);
}

}  // namespace
}  // namespace pollux::env

namespace pollux::env {
namespace {

// Merging adds every bucket, whatever the ranges of the two (merge visits only the source's
// min..max buckets), and so does merging an interval taken with since().
TEST(LatencyHistogram, MergeMatchesBucketByBucketSums) {
  const uint64_t seed = 20261130;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 200; ++round) {
    LatencyHistogram a, b;
    const int shift_a = static_cast<int>(rng() % 64), shift_b = static_cast<int>(rng() % 64);
    for (int i = static_cast<int>(rng() % 50); i > 0; --i) a.record(rng() >> shift_a);
    for (int i = static_cast<int>(rng() % 50); i > 0; --i) b.record(rng() >> shift_b);
    const LatencyHistogram earlier = b;
    for (int i = static_cast<int>(rng() % 20); i > 0; --i) b.record(rng() >> (rng() % 64));
    const LatencyHistogram interval = b.since(earlier);
    LatencyHistogram m = a;
    m.merge(b);
    m.merge(interval);
    for (int k = 0; k < LatencyHistogram::kBuckets; ++k) {
      ASSERT_EQ(m.bucket_count(k), a.bucket_count(k) + b.bucket_count(k) + interval.bucket_count(k))
          << "round " << round << " bucket " << k;
    }
    EXPECT_EQ(m.count(), a.count() + b.count() + interval.count());
  }
}

TEST(LatencyHistogram, SinceAnEarlierCopyIsWhatCameAfter) {
  LatencyHistogram h;
  for (uint64_t v = 1; v <= 1000; ++v) h.record(10);  // the first interval: all 10
  const LatencyHistogram earlier = h;
  for (uint64_t v = 0; v < 99; ++v) h.record(5000);  // the second: 99 x 5000, 1 x 100000
  h.record(100000);
  const LatencyHistogram d = h.since(earlier);
  EXPECT_EQ(d.count(), 100u);
  EXPECT_DOUBLE_EQ(d.mean(), (99.0 * 5000 + 100000) / 100);
  EXPECT_NEAR(static_cast<double>(d.quantile(0.5)), 5000, 5000 * 0.04);
  EXPECT_GE(d.min(), 4800u);  // nothing of the first interval
  EXPECT_LE(d.max(), 100000u);
  EXPECT_GE(d.max(), 96000u);
  EXPECT_EQ(h.since(h).count(), 0u);
}

}  // namespace
}  // namespace pollux::env
