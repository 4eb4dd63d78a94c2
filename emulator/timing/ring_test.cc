// Ring against std::deque over a random mix of its operations (seeded, printed), from a ring
// that starts with no memory and from one that starts with room.
#include "emulator/timing/ring.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <random>

namespace pollux::emu::timing {
namespace {

void behaves_as_a_deque(Ring<int> r, uint64_t seed) {
  std::printf("seed %llu, capacity %zu\n", static_cast<unsigned long long>(seed), r.capacity());
  std::mt19937_64 rng(seed);
  std::deque<int> ref;
  for (int i = 0; i < 100000; ++i) {
    const unsigned op = rng() % 12;
    if (op < 5) {
      r.push_back(i);
      ref.push_back(i);
    } else if (op == 5) {
      r.push_front(i);
      ref.push_front(i);
    } else if (op < 9 && !ref.empty()) {
      ASSERT_EQ(r.front(), ref.front());
      r.pop_front();
      ref.pop_front();
    } else if (op < 11 && !ref.empty()) {
      const std::size_t k = rng() % ref.size();
      r.erase_at(k);
      ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (op == 11 && rng() % 100 == 0) {
      r.clear();
      ref.clear();
    }
    ASSERT_EQ(r.size(), ref.size());
    ASSERT_EQ(r.empty(), ref.empty());
    if (!ref.empty()) {
      const std::size_t k = rng() % ref.size();
      ASSERT_EQ(r[k], ref[k]) << "step " << i;
      ASSERT_EQ(static_cast<const Ring<int>&>(r)[k], ref[k]);
    }
  }
}

TEST(Ring, BehavesAsADequeThroughPushesPopsAndErasures) {
  behaves_as_a_deque(Ring<int>(0), 5);
  behaves_as_a_deque(Ring<int>(), 6);
  behaves_as_a_deque(Ring<int>(3), 7);  // rounded up to 4
}

TEST(Ring, AnEmptyOneOwnsNoMemoryUntilItsFirstPush) {
  // An RNIC's QP table is made and reset by copying an empty QP kMaxQp times.
  Ring<int> r(0);
  EXPECT_EQ(r.capacity(), 0u);
  const Ring<int> copy = r;
  EXPECT_EQ(copy.capacity(), 0u);
  r.push_back(1);
  EXPECT_EQ(r.capacity(), 1u);
  r.push_front(0);
  EXPECT_EQ(r.capacity(), 2u);
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(r[1], 1);
  EXPECT_EQ(Ring<int>().capacity(), 64u);
}

}  // namespace
}  // namespace pollux::emu::timing
