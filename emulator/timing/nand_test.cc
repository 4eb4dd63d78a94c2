// NandArray: the reservation arithmetic, operation by operation.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pollux::emu::timing
