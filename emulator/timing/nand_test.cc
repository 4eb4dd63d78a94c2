// NandArray: the reservation arithmetic, operation by operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "emulator/timing/nand.h"

namespace pollux::emu::timing {
namespace {

NandGeometry Geometry() {
  NandGeometry g;
  g.channels = 2;
  g.dies_per_channel = 2;
  g.planes_per_die = 2;
  g.blocks_per_plane = 8;
  g.pages_per_block = 4;
  g.page_bytes = 16384;
  return g;
}

NandTiming Timing() {
  NandTiming t;
  t.t_read = 50 * kUs;
  t.t_prog = 600 * kUs;
  t.t_erase = 3 * kMs;
  t.channel_bytes_per_second = 400'000'000;  // 4 KiB = 10.24 us, 16 KiB = 40.96 us
  t.command_overhead = 0;
  return t;
}

constexpr SimTime kX4k = 10'240 * kNs;
constexpr SimTime kX16k = 40'960 * kNs;

TEST(NandArray, TransferTimeIsExactForTheseRates) {
  EXPECT_EQ(transfer_time(4096, 400'000'000), kX4k);
  EXPECT_EQ(transfer_time(16384, 400'000'000), kX16k);
}

TEST(NandArray, ReadIsTrThenTransfer) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.read(0, {0, 0, 0, 0, 0}, 4096), 50 * kUs + kX4k);
  EXPECT_EQ(a.die_free_at(0, 0), 50 * kUs);  // the die is free after tR
  EXPECT_EQ(a.channel_free_at(0), 50 * kUs + kX4k);
  // A read that starts after everything is idle is not delayed.
  EXPECT_EQ(a.read(1 * kMs, {0, 0, 1, 3, 2}, 16384), 1 * kMs + 50 * kUs + kX16k);
  EXPECT_EQ(a.reads(), 2u);
}

TEST(NandArray, CommandOverheadIsPaidOnTheChannel) {
  NandTiming t = Timing();
  t.command_overhead = 1 * kUs;
  NandArray a(Geometry(), t);
  EXPECT_EQ(a.read(0, {0, 0, 0, 0, 0}, 4096), 50 * kUs + 1 * kUs + kX4k);
  EXPECT_EQ(a.program(0, {1, 0, 0, 0, 0}), 1 * kUs + kX16k + 600 * kUs);
  // Erase: the command cycles occupy the bus, then the die erases.
  EXPECT_EQ(a.erase(0, 1, 1, 0, 0), 1 * kUs + kX16k + 1 * kUs + 3 * kMs);
  EXPECT_EQ(a.channel_free_at(1), 1 * kUs + kX16k + 1 * kUs);
}

TEST(NandArray, TwoDiesOnOneChannelShareTheBus) {
  NandArray a(Geometry(), Timing());
  const SimTime first = a.read(0, {0, 0, 0, 0, 0}, 4096);
  const SimTime second = a.read(0, {0, 1, 0, 0, 0}, 4096);  // other die, same channel
  EXPECT_EQ(first, 50 * kUs + kX4k);
  // Both tR overlap; the second transfer waits for the first.
  EXPECT_EQ(second, 50 * kUs + 2 * kX4k);
}

TEST(NandArray, DiesOnDifferentChannelsDoNotInteract) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.read(0, {0, 0, 0, 0, 0}, 4096), 50 * kUs + kX4k);
  EXPECT_EQ(a.read(0, {1, 0, 0, 0, 0}, 4096), 50 * kUs + kX4k);
}

TEST(NandArray, OneDieSerialisesItsOperations) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.read(0, {0, 0, 0, 0, 0}, 4096), 50 * kUs + kX4k);
  // Another plane of the same die: planes share the die's busy time.
  EXPECT_EQ(a.read(0, {0, 0, 1, 0, 1}, 4096), 100 * kUs + kX4k);
  EXPECT_EQ(a.die_free_at(0, 0), 100 * kUs);
}

TEST(NandArray, ProgramIsTransferThenTprog) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.program(0, {0, 0, 0, 0, 0}), kX16k + 600 * kUs);
  EXPECT_EQ(a.channel_free_at(0), kX16k);
  // Multi-plane: both pages cross the bus, one tPROG.
  EXPECT_EQ(a.program(0, {1, 0, 0, 0, 0}, 2), 2 * kX16k + 600 * kUs);
  EXPECT_EQ(a.die_free_at(1, 0), 2 * kX16k + 600 * kUs);
  EXPECT_EQ(a.programs(), 2u);
}

TEST(NandArray, ProgramLoadsWhileTheDieIsBusyThenWaitsForIt) {
  NandArray a(Geometry(), Timing());
  const SimTime first = a.program(0, {0, 0, 0, 0, 0});
  // Second program on the same die: its data crosses the bus right after the first's, then
  // tPROG starts when the die finishes the first.
  const SimTime second = a.program(0, {0, 0, 0, 0, 1});
  EXPECT_EQ(first, kX16k + 600 * kUs);
  EXPECT_EQ(second, first + 600 * kUs);
  EXPECT_EQ(a.channel_free_at(0), 2 * kX16k);
  // A program on the other die of that channel only waits for the bus.
  EXPECT_EQ(a.program(0, {0, 1, 0, 0, 0}), 3 * kX16k + 600 * kUs);
}

TEST(NandArray, EraseOccupiesTheDieOnly) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.erase(10 * kUs, 0, 0, 0, 3), 10 * kUs + 3 * kMs);
  EXPECT_EQ(a.channel_free_at(0), 0u);  // no command overhead: the bus is untouched
  // A read on the other die of the channel is not delayed; one on the erasing die waits.
  EXPECT_EQ(a.read(0, {0, 1, 0, 0, 0}, 4096), 50 * kUs + kX4k);
  EXPECT_EQ(a.read(0, {0, 0, 0, 0, 0}, 4096), 10 * kUs + 3 * kMs + 50 * kUs + kX4k);
  // Multi-plane erase: one tBERS.
  EXPECT_EQ(a.erase(0, 1, 1, 0, 0, 2), 3 * kMs);
  EXPECT_EQ(a.erases(), 2u);
}

TEST(NandArray, ReservationsAreFifoPerResource) {
  NandArray a(Geometry(), Timing());
  a.erase(0, 0, 0, 0, 0);  // die (0,0) busy until 3 ms
  // An earlier start does not overtake what is already reserved.
  EXPECT_EQ(a.program(0, {0, 0, 0, 1, 0}), 3 * kMs + 600 * kUs);
  EXPECT_EQ(a.read(0, {0, 0, 0, 1, 0}, 4096), 3 * kMs + 600 * kUs + 50 * kUs + kX4k);
}

TEST(NandArray, BusyTimeIsBookedPerDieAndChannel) {
  NandTiming t = Timing();
  t.command_overhead = 1 * kUs;
  NandArray a(Geometry(), t);
  a.read(0, {0, 1, 0, 0, 0}, 4096);
  a.program(0, {0, 1, 0, 0, 0});
  a.erase(0, 1, 0, 0, 0);
  EXPECT_EQ(a.die_busy_time(0, 1), 50 * kUs + 600 * kUs);
  EXPECT_EQ(a.die_busy_time(1, 0), 3 * kMs);
  EXPECT_EQ(a.die_busy_time(0, 0), 0u);
  EXPECT_EQ(a.channel_busy_time(0), (1 * kUs + kX4k) + (1 * kUs + kX16k));
  EXPECT_EQ(a.channel_busy_time(1), 1 * kUs);  // an erase uses the bus for its command only
}


// ---- the read model, register hits, suspend, SLC-mode programs (all off by default above) ----

TEST(NandArray, RegisterHitCostsOnlyTheTransfer) {
  NandTiming t = Timing();
  t.register_hits = true;
  NandArray a(Geometry(), t);
  EXPECT_EQ(a.read(0, {0, 0, 0, 5, 1}, 4096), 50 * kUs + kX4k);
  // Another unit of the same page group (any plane): no tR, the transfer queues on the bus.
  EXPECT_EQ(a.read(0, {0, 0, 1, 5, 1}, 4096), 50 * kUs + 2 * kX4k);
  EXPECT_EQ(a.die_free_at(0, 0), 50 * kUs);  // the die did not sense again
  EXPECT_EQ(a.register_hits(), 1u);
  // A hit issued after the data is there starts at once.
  EXPECT_EQ(a.read(1 * kMs, {0, 0, 0, 5, 1}, 4096), 1 * kMs + kX4k);
  // Another page replaces the register; a program invalidates it.
  EXPECT_EQ(a.read(2 * kMs, {0, 0, 0, 5, 2}, 4096), 2 * kMs + 50 * kUs + kX4k);
  a.program(3 * kMs, {0, 0, 0, 6, 0});
  const SimTime after = a.die_free_at(0, 0);
  EXPECT_EQ(a.read(after, {0, 0, 0, 5, 2}, 4096), after + 50 * kUs + kX4k);
  EXPECT_EQ(a.register_hits(), 2u);
}

TEST(NandArray, WithoutRegisterHitsEveryReadSenses) {
  NandArray a(Geometry(), Timing());
  a.read(0, {0, 0, 0, 5, 1}, 4096);
  EXPECT_EQ(a.read(0, {0, 0, 0, 5, 1}, 4096), 100 * kUs + kX4k);
  EXPECT_EQ(a.register_hits(), 0u);
}

TEST(NandArray, SenseAheadLeavesTheDataInTheRegister) {
  NandTiming t = Timing();
  t.register_hits = true;
  NandArray a(Geometry(), t);
  EXPECT_EQ(a.sense(0, {1, 1, 0, 2, 3}), 50 * kUs);
  EXPECT_EQ(a.channel_free_at(1), 0u);  // sensing moves no data
  EXPECT_EQ(a.sense(0, {1, 1, 0, 2, 3}), 50 * kUs);  // already there: free
  EXPECT_EQ(a.read(60 * kUs, {1, 1, 0, 2, 3}, 4096), 60 * kUs + kX4k);
  // Asked for before the sense ends, the data leaves when it is sensed.
  a.sense(100 * kUs, {1, 1, 0, 2, 4});
  EXPECT_EQ(a.read(110 * kUs, {1, 1, 0, 2, 4}, 4096), 150 * kUs + kX4k);
  EXPECT_EQ(a.reads(), 2u);
}

TEST(NandArray, DieSpreadIsFixedPerDieClippedAndSeeded) {
  NandTiming t = Timing();
  t.t_read_die_spread = 0.2;
  NandGeometry g = Geometry();
  g.channels = 8;
  g.dies_per_channel = 8;
  NandArray a(g, t), b(g, t);
  t.seed = 2;
  NandArray c(g, t);
  bool differ = false, other_seed_differs = false;
  double sum = 0;
  for (uint32_t ch = 0; ch < 8; ++ch) {
    for (uint32_t d = 0; d < 8; ++d) {
      const SimTime tr = a.die_t_read(ch, d);
      EXPECT_GE(tr, 25 * kUs);  // clipped at 0.5 and 1.5 x t_read
      EXPECT_LE(tr, 75 * kUs);
      EXPECT_EQ(tr, b.die_t_read(ch, d));  // same seed, same dies
      differ |= tr != a.die_t_read(0, 0);
      other_seed_differs |= tr != c.die_t_read(ch, d);
      sum += double(tr);
    }
  }
  EXPECT_TRUE(differ);
  EXPECT_TRUE(other_seed_differs);
  EXPECT_NEAR(sum / 64 / double(kUs), 50.0, 50.0 * 0.2 * 3 / 8);  // mean within 3 sigma/sqrt(64)
  // Each read on a die takes that die's tR (no jitter configured).
  EXPECT_EQ(a.read(0, {3, 5, 0, 0, 0}, 4096), a.die_t_read(3, 5) + kX4k);
}

TEST(NandArray, JitterIsExponentialWithTheConfiguredMean) {
  NandTiming t = Timing();
  t.t_read_jitter = 6 * kUs;
  NandArray a(Geometry(), t);
  constexpr int kReads = 40000;
  std::vector<double> extra;
  SimTime at = 0;
  for (int i = 0; i < kReads; ++i) {
    at += 1 * kMs;  // idle die and channel: latency = tR + jitter + transfer
    extra.push_back(double(a.read(at, {0, 0, 0, 0, uint32_t(i % 4)}, 4096) - at - 50 * kUs - kX4k));
  }
  double sum = 0;
  for (double e : extra) {
    EXPECT_GE(e, 0.0);
    sum += e;
  }
  std::sort(extra.begin(), extra.end());
  const double mean = sum / kReads / double(kUs);
  EXPECT_NEAR(mean, 6.0, 6.0 * 0.03);                                   // E = mean
  EXPECT_NEAR(extra[kReads / 2] / double(kUs), 6.0 * std::log(2.0), 0.2);  // median = mean ln 2
  EXPECT_NEAR(extra[kReads * 99 / 100] / double(kUs), 6.0 * std::log(100.0), 1.5);  // p99
}

TEST(NandArray, ReadRetryAddsWholeSensesAtTheConfiguredRate) {
  NandTiming t = Timing();
  t.read_retry_rate = 0.1;
  t.read_retry_steps = 2;
  NandArray a(Geometry(), t);
  constexpr int kReads = 20000;
  int retried = 0;
  SimTime at = 0;
  for (int i = 0; i < kReads; ++i) {
    at += 1 * kMs;
    const SimTime lat = a.read(at, {1, 0, 0, 0, uint32_t(i % 4)}, 4096) - at;
    if (lat == 3 * 50 * kUs + kX4k) {
      ++retried;  // sensed three times: the read and two retry steps
    } else {
      EXPECT_EQ(lat, 50 * kUs + kX4k);
    }
  }
  EXPECT_EQ(uint64_t(retried), a.read_retries());
  EXPECT_NEAR(double(retried) / kReads, 0.1, 0.01);
}

TEST(NandArray, SuspendLetsAReadInterruptAProgramOrErase) {
  NandTiming t = Timing();
  t.suspend = true;
  t.t_suspend = 20 * kUs;
  t.t_resume = 10 * kUs;
  NandArray a(Geometry(), t);
  const SimTime programmed = a.program(0, {0, 0, 0, 0, 0});  // kX16k + 600 us
  EXPECT_EQ(programmed, kX16k + 600 * kUs);
  // A read 100 us into the program: suspend, sense, transfer.
  EXPECT_EQ(a.read(kX16k + 100 * kUs, {0, 0, 0, 1, 0}, 4096),
            kX16k + 100 * kUs + 20 * kUs + 50 * kUs + kX4k);
  // The program ends later by the suspension, the read and the resume.
  EXPECT_EQ(a.die_free_at(0, 0), programmed + 20 * kUs + 50 * kUs + 10 * kUs);
  // A second read during the same busy period goes after the first one's sense.
  EXPECT_EQ(a.read(kX16k + 100 * kUs, {0, 0, 0, 2, 0}, 4096),
            kX16k + 100 * kUs + 20 * kUs + 50 * kUs + 20 * kUs + 50 * kUs + kX4k);
  EXPECT_EQ(a.suspends(), 2u);
  // Erase: same.
  const SimTime erased = a.erase(0, 1, 0, 0, 3);
  EXPECT_EQ(a.read(1 * kMs, {1, 0, 0, 1, 0}, 4096), 1 * kMs + 20 * kUs + 50 * kUs + kX4k);
  EXPECT_EQ(a.die_free_at(1, 0), erased + 20 * kUs + 50 * kUs + 10 * kUs);
}

TEST(NandArray, WithoutSuspendAReadWaitsForTheProgram) {
  NandArray a(Geometry(), Timing());
  const SimTime programmed = a.program(0, {0, 0, 0, 0, 0});
  EXPECT_EQ(a.read(kX16k + 100 * kUs, {0, 0, 0, 1, 0}, 4096), programmed + 50 * kUs + kX4k);
  EXPECT_EQ(a.suspends(), 0u);
}

TEST(NandArray, ProgramCanTakeAnSlcProgramTime) {
  NandArray a(Geometry(), Timing());
  EXPECT_EQ(a.program(0, {0, 0, 0, 0, 0}, 1, 150 * kUs), kX16k + 150 * kUs);
  EXPECT_EQ(a.program(0, {1, 0, 0, 0, 0}, 1, 0), kX16k + 600 * kUs);  // 0: the timing's tPROG
}

TEST(SlcCache, AdmitsUntilFullThenTlc) {
  SlcCache c(3 * 65536, 1'000'000'000, 1 * kMs);
  EXPECT_TRUE(c.enabled());
  EXPECT_TRUE(c.admit(0, 65536));
  EXPECT_TRUE(c.admit(0, 65536));
  EXPECT_TRUE(c.admit(0, 65536));
  EXPECT_FALSE(c.admit(0, 65536));  // full: a TLC program
  EXPECT_EQ(c.used(), 3u * 65536);
  EXPECT_EQ(c.slc_programs(), 3u);
  EXPECT_EQ(c.tlc_programs(), 1u);
  EXPECT_FALSE(SlcCache().enabled());
  EXPECT_FALSE(SlcCache().admit(0, 4096));
}

TEST(SlcCache, IdleTimeBeyondTheThresholdFoldsAtTheFoldRate) {
  SlcCache c(10'000'000, 1'000'000'000, 1 * kMs);  // folds 1 GB/s = 1000 bytes a microsecond
  ASSERT_TRUE(c.admit(0, 8'000'000));
  c.programmed(100 * kUs);
  // Idle 0.9 ms since the program ended: under the threshold, nothing folded.
  EXPECT_TRUE(c.admit(1 * kMs, 1'000'000));
  EXPECT_EQ(c.used(), 9'000'000u);
  c.programmed(1 * kMs + 100 * kUs);
  // Idle 2 ms: 1 ms past the threshold folds 1,000,000 bytes; then this group is taken.
  EXPECT_TRUE(c.admit(3 * kMs + 100 * kUs, 2'000'000));
  EXPECT_EQ(c.folded_bytes(), 1'000'000u);
  EXPECT_EQ(c.used(), 10'000'000u);
  c.programmed(3 * kMs + 200 * kUs);
  // A long idle empties the cache, and no more than what was in it is folded.
  EXPECT_TRUE(c.admit(1 * kSec, 4096));
  EXPECT_EQ(c.folded_bytes(), 11'000'000u);
  EXPECT_EQ(c.used(), 4096u);
}

}  // namespace
}  // namespace pollux::emu::timing
