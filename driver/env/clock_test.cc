#include "driver/env/clock.h"

#include <gtest/gtest.h>

#include <ctime>

namespace pollux::env {
namespace {

TEST(VirtualClock, MovesOnlyWhenTold) {
  VirtualClock clock(1'000'000'000, 500);
  EXPECT_EQ(clock.now(), 500u);
  EXPECT_EQ(clock.now(), 500u);
  clock.advance(250);
  EXPECT_EQ(clock.now(), 750u);
  clock.advance_us(2);
  EXPECT_EQ(clock.now(), 2750u);
}

TEST(VirtualClock, NeverGoesBackwards) {
  VirtualClock clock;
  EXPECT_TRUE(clock.set(1000));
  EXPECT_FALSE(clock.set(999));
  EXPECT_EQ(clock.now(), 1000u);
  EXPECT_TRUE(clock.set(1000));
}

TEST(Clock, ConvertsUnits) {
  VirtualClock clock(2'500'000'000);  // 2.5 GHz
  EXPECT_EQ(clock.us_to_ticks(1), 2500u);
  EXPECT_EQ(clock.ns_to_ticks(10), 25u);
  EXPECT_DOUBLE_EQ(clock.ticks_to_seconds(2'500'000'000), 1.0);
  // No overflow for a day of microseconds at 2.5 GHz.
  EXPECT_EQ(clock.us_to_ticks(86'400'000'000ull), 86'400ull * 2'500'000'000ull);
}

TEST(TscClock, IsMonotonicAndCalibrated) {
  const TscClock& clock = TscClock::instance();
  // Between 100 MHz and 10 GHz whichever source was chosen.
  EXPECT_GE(clock.ticks_per_second(), 100'000'000u);
  EXPECT_LE(clock.ticks_per_second(), 10'000'000'000u);
  uint64_t prev = clock.now();
  for (int i = 0; i < 100000; ++i) {
    const uint64_t t = clock.now();
    ASSERT_GE(t, prev);
    prev = t;
  }
  std::printf("time source: %s, %.3f MHz\n", clock.source(), clock.ticks_per_second() / 1e6);
}

// now() is not virtual: the TSC is read inline, any other source through read().
TEST(Clock, NowThroughTheBaseReadsEachClocksOwnSource) {
  VirtualClock virt(1'000'000'000, 500);
  const Clock& v = virt;
  EXPECT_EQ(v.now(), 500u);
  virt.advance(7);
  EXPECT_EQ(v.now(), 507u);
  const Clock& m = MonotonicClock::instance();
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t mono = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
  EXPECT_GE(m.now(), mono);
  const TscClock& tsc = TscClock::instance();
  const Clock& t = tsc;
  if (tsc.uses_tsc()) {
    const uint64_t before = __rdtsc();
    const uint64_t got = t.now();
    EXPECT_GE(got, before);
    EXPECT_LE(got, __rdtsc());
  } else {
    EXPECT_GE(t.now(), mono);  // CLOCK_MONOTONIC in ns
  }
}

TEST(MonotonicClock, CountsNanosecondsOfClockMonotonic) {
  const MonotonicClock& clock = MonotonicClock::instance();
  EXPECT_EQ(clock.ticks_per_second(), 1'000'000'000u);
  timespec ts{};
  const uint64_t before = clock.now();
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t after = clock.now();
  const uint64_t mono = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
  EXPECT_LE(before, mono);
  EXPECT_GE(after, mono);
}

}  // namespace
}  // namespace pollux::env
