// The QPs' Fifo against std::deque over a random mix of its operations (seeded, printed).
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <random>

#include "emulator/rnic/resources.h"

namespace pollux::emu::rnic {
namespace {

TEST(Fifo, BehavesAsADequeThroughPushesPopsAndErasures) {
  const uint64_t seed = 5;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  Fifo<int> f;
  std::deque<int> ref;
  for (int i = 0; i < 100000; ++i) {
    const unsigned op = rng() % 10;
    if (op < 5) {
      f.push_back(i);
      ref.push_back(i);
    } else if (op < 8 && !ref.empty()) {
      ASSERT_EQ(f.front(), ref.front());
      f.pop_front();
      ref.pop_front();
    } else if (op == 8 && !ref.empty()) {
      const std::size_t k = rng() % ref.size();
      f.erase_at(k);
      ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (op == 9 && rng() % 100 == 0) {
      f.clear();
      ref.clear();
    }
    ASSERT_EQ(f.size(), ref.size());
    ASSERT_EQ(f.empty(), ref.empty());
    if (!ref.empty()) {
      const std::size_t k = rng() % ref.size();
      ASSERT_EQ(f[k], ref[k]) << "step " << i;
    }
  }
}

TEST(Fifo, AnEmptyOneOwnsNoMemory) {
  // A QP table is made and reset by copying an empty QP kMaxQp times.
  static_assert(sizeof(Fifo<SendOp>) <= 4 * sizeof(void*));
  Fifo<SendOp> f;
  f.push_back(SendOp{});
  f.pop_front();
  EXPECT_TRUE(f.empty());
  const Fifo<SendOp> copy = Fifo<SendOp>{};
  EXPECT_EQ(copy.size(), 0u);
}

}  // namespace
}  // namespace pollux::emu::rnic
