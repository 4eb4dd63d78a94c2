// EventTimes keeps the minimum of its slots as they change: checked against a plain scan
// over random updates (seeded; the seed is printed).
#include "emulator/timing/event_times.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace pollux::emu::timing {
namespace {

TEST(EventTimes, NeverUntilASlotIsSet) {
  EventTimes t;
  t.reset(4);
  EXPECT_EQ(t.next(), EventTimes::kNever);
  t.set(2, 50);
  EXPECT_EQ(t.next(), 50u);
}

TEST(EventTimes, TheEarliestMovingLaterFindsTheNextOne) {
  EventTimes t;
  t.reset(3);
  t.set(0, 10);
  t.set(1, 20);
  t.set(2, 30);
  EXPECT_EQ(t.next(), 10u);
  t.set(0, EventTimes::kNever);  // the event ran
  EXPECT_EQ(t.next(), 20u);
  t.set(1, 25);  // later, still the earliest
  EXPECT_EQ(t.next(), 25u);
  t.set(2, 5);
  EXPECT_EQ(t.next(), 5u);
}

TEST(EventTimes, TwoSlotsAtTheMinimumAndOneLeaves) {
  EventTimes t;
  t.reset(2);
  t.set(0, 7);
  t.set(1, 7);
  t.set(0, 9);
  EXPECT_EQ(t.next(), 7u);
}

TEST(EventTimes, MatchesAScanOverRandomUpdates) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 20;
    EventTimes t;
    t.reset(n);
    std::vector<SimTime> plain(n, EventTimes::kNever);
    for (int i = 0; i < 500; ++i) {
      const size_t slot = rng() % n;
      const SimTime v = rng() % 8 == 0 ? EventTimes::kNever : rng() % 100;
      t.set(slot, v);
      plain[slot] = v;
      if (rng() % 3 == 0) {
        ASSERT_EQ(t.next(), *std::min_element(plain.begin(), plain.end()))
            << "seed " << seed << " round " << round << " update " << i;
      }
    }
  }
}

// The slot of the earliest event, the lowest one among equal times (a device's due completions
// before its engine's clock, devices in order: Simulation's direct dispatch).
TEST(EventTimes, EarliestIsTheLowestSlotAtTheMinimum) {
  EventTimes t;
  t.reset(6);
  t.set(4, 70);
  EXPECT_EQ(t.earliest(), 4u);
  t.set(3, 70);
  EXPECT_EQ(t.earliest(), 3u);
  t.set(5, 60);
  EXPECT_EQ(t.earliest(), 5u);
  t.set(5, EventTimes::kNever);
  EXPECT_EQ(t.earliest(), 3u);
}

// Between runs, a slot set for the current time is fresh (the kernel would run it only at the
// run after next); one set for later is not, nor one set while not marking.
TEST(EventTimes, SlotsSetForNowBetweenRunsAreFresh) {
  EventTimes t;
  t.reset(4);
  t.begin_fresh(100);
  t.set(0, 100);
  t.set(1, 101);
  EXPECT_TRUE(t.fresh(0));
  EXPECT_FALSE(t.fresh(1));
  t.end_fresh();
  t.set(2, 100);
  EXPECT_FALSE(t.fresh(2));
  t.clear_fresh();
  EXPECT_FALSE(t.fresh(0));
  EXPECT_EQ(t.at(0), 100u);
  EXPECT_EQ(t.size(), 4u);
}

}  // namespace
}  // namespace pollux::emu::timing
