// The fast-forward (emulator/timing/simulation.h) is an optimisation and nothing else: with it
// on, the simulation runs the devices' events itself, without the SystemC kernel, and a queue
// engine runs the clock edges nothing can come between inside one activation; with it off,
// every edge is a kernel event and every lockstep step a kernel run. The same seed must give the
// same run both ways: the same trace (every doorbell, fetch and completion at the same instant),
// the same I/O count and latencies, the same device counters. The workloads cover what the engine's
// edges meet: deep and shallow queues, reads, writes and mixes, NAND with its cache and FTL,
// 3D XPoint, the verilated engine, several drives on one host core, a random seed.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>

#include "emulator/timing/profile.h"
#include "scenarios/sim/run.h"

namespace pollux::sim {
namespace {

struct Case {
  const char* profile;
  uint32_t devices, qd, read_percent, io_bytes;
  Pattern pattern;
  double ms;
  bool rtl = false;
};

RunReport run(const Case& c, uint64_t seed, bool fast_forward) {
  auto p = emu::timing::load_profile(c.profile);
  EXPECT_TRUE(p.ok()) << p.error();
  RunSpec s;
  s.profile = p.value();
  if (c.rtl) s.profile.fidelity = emu::timing::Fidelity::kRtl;
  s.devices = c.devices;
  s.seed = seed;
  s.job.queue_depth = c.qd;
  s.job.read_percent = c.read_percent;
  s.job.io_bytes = c.io_bytes;
  s.job.pattern = c.pattern;
  s.job.warmup_ns = 200'000;
  s.job.duration_ns = static_cast<uint64_t>(c.ms * 1e6);
  s.fast_forward = fast_forward;
  RunReport r = run_perf(s);
  EXPECT_EQ(r.error, "");
  return r;
}

void expect_same_run(const Case& c, uint64_t seed) {
  const RunReport fast = run(c, seed, true), slow = run(c, seed, false);
  std::printf("%s x%u QD%u %u%% reads %u B%s seed %" PRIu64 ": %" PRIu64
              " I/Os, trace %016" PRIx64 " / %016" PRIx64 ", %.2f / %.2f M sim I/O per s\n",
              c.profile, c.devices, c.qd, c.read_percent, c.io_bytes, c.rtl ? " rtl" : "", seed,
              fast.total_ios, fast.trace_hash, slow.trace_hash,
              double(fast.total_ios) / fast.wall_seconds / 1e6,
              double(slow.total_ios) / slow.wall_seconds / 1e6);
  ASSERT_GT(fast.total_ios, 0u);
  EXPECT_EQ(fast.trace_hash, slow.trace_hash);
  EXPECT_EQ(fast.trace_records, slow.trace_records);
  EXPECT_EQ(fast.total_ios, slow.total_ios);
  EXPECT_EQ(fast.simulated_ns, slow.simulated_ns);
  EXPECT_EQ(fast.host_busy_ns, slow.host_busy_ns);
  EXPECT_EQ(fast.steps, slow.steps);
  ASSERT_EQ(fast.devices.size(), slow.devices.size());
  uint64_t ahead = 0;
  for (size_t i = 0; i < fast.devices.size(); ++i) {
    const DeviceReport &f = fast.devices[i], &s = slow.devices[i];
    EXPECT_EQ(f.job.ios, s.job.ios) << "device " << i;
    EXPECT_EQ(f.job.errors, 0u) << "device " << i;
    EXPECT_EQ(f.job.latency_ns.mean(), s.job.latency_ns.mean()) << "device " << i;
    EXPECT_EQ(f.job.latency_ns.quantile(0.99), s.job.latency_ns.quantile(0.99)) << "device " << i;
    EXPECT_EQ(f.device.commands, s.device.commands) << "device " << i;
    EXPECT_EQ(f.device.engine_cycles, s.device.engine_cycles) << "device " << i;
    EXPECT_EQ(f.device.nand_reads, s.device.nand_reads) << "device " << i;
    EXPECT_EQ(f.device.nand_programs, s.device.nand_programs) << "device " << i;
    EXPECT_EQ(f.device.engine_mismatches, 0u) << "device " << i;
    EXPECT_EQ(s.device.engine_run_ahead, 0u) << "device " << i << ": no fast-forward asked";
    ahead += f.device.engine_run_ahead;
  }
  EXPECT_GT(ahead, 0u) << "the fast-forward never ran an edge ahead";
}

TEST(FastForward, DeepRandomReadsOnEachMedium) {
  expect_same_run({"p4800x", 1, 128, 100, 4096, Pattern::kRandom, 2}, 1);
  expect_same_run({"p3700", 1, 128, 100, 4096, Pattern::kRandom, 2}, 1);
  expect_same_run({"gen4-tlc", 1, 128, 100, 4096, Pattern::kRandom, 2}, 1);
  expect_same_run({"null", 1, 32, 100, 4096, Pattern::kRandom, 0.5}, 1);
}

TEST(FastForward, WritesMixesAndShallowQueues) {
  expect_same_run({"p4800x", 1, 1, 100, 4096, Pattern::kRandom, 1}, 2);
  expect_same_run({"p4800x", 1, 16, 70, 4096, Pattern::kRandom, 2}, 3);
  expect_same_run({"p3700", 1, 32, 0, 4096, Pattern::kRandom, 2}, 4);
  expect_same_run({"gen4-tlc", 1, 64, 50, 131072, Pattern::kSequential, 2}, 5);
}

TEST(FastForward, VerilatedEngine) {
  expect_same_run({"p4800x", 1, 64, 50, 4096, Pattern::kRandom, 1, /*rtl=*/true}, 6);
}

// Several drives: their simultaneous events run in whatever order SystemC's event heap gives,
// which the fast-forward changes; the trace folds each instant as a set (trace.h).
TEST(FastForward, SeveralDrivesOnOneHostCore) {
  expect_same_run({"p3700", 4, 128, 100, 4096, Pattern::kRandom, 1}, 7);
  expect_same_run({"p4800x", 3, 8, 70, 4096, Pattern::kRandom, 1}, 8);
}

TEST(FastForward, RandomSeed) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %" PRIu64 " (a failure replays with it)\n", seed);
  std::mt19937_64 pick(seed);
  const char* profiles[] = {"p4800x", "p3700", "gen4-tlc"};
  Case c{profiles[pick() % 3], static_cast<uint32_t>(1 + pick() % 3),
         static_cast<uint32_t>(1u << (pick() % 8)), static_cast<uint32_t>(pick() % 101), 4096,
         Pattern::kRandom, 1};
  expect_same_run(c, seed);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
