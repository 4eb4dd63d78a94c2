#include "driver/env/rng.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace pollux::env {
namespace {

TEST(FastRng, SameSeedSameSequenceOtherSeedOther) {
  FastRng a(42), b(42), c(43);
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a());
    vb.push_back(b());
    vc.push_back(c());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  EXPECT_EQ(std::set<uint64_t>(va.begin(), va.end()).size(), va.size());
}

TEST(FastRng, KnownSplitMix64Values) {
  // Reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
  FastRng r(0);
  EXPECT_EQ(r(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(r(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(r(), 0x06c45d188009454full);
}

TEST(FastRng, BelowStaysInRangeAndCoversItEvenly) {
  FastRng r(7);
  constexpr uint64_t kN = 10;
  std::vector<int> counts(kN);
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t v = r.below(kN);
    ASSERT_LT(v, kN);
    ++counts[v];
  }
  for (int c : counts) {
    EXPECT_GT(c, kDraws / kN * 9 / 10);
    EXPECT_LT(c, kDraws / kN * 11 / 10);
  }
  EXPECT_EQ(r.below(1), 0u);
}

}  // namespace
}  // namespace pollux::env
