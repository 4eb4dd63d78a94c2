// Fidelity of the timed emulator against published figures, in deterministic virtual time:
// the unchanged driver and a perf job on one host core, the device models behind the
// vfio-user boundary, time owned by the simulator. Sources of each figure: docs/FIDELITY.md.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>

#include "emulator/timing/profile.h"
#include "scenarios/sim/run.h"

namespace pollux::sim {
namespace {

using emu::timing::load_profile;
using emu::timing::Profile;

constexpr uint64_t kMs = 1'000'000;  // ns

Profile profile(const char* name) {
  auto p = load_profile(name);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.value();
}

// A kernel's I/O stack beyond the polled driver (tests/timing/ledger.yaml, hosts: kernel):
// what fio through Linux adds to every I/O.
constexpr uint64_t kKernelStackNs = 1'900;

RunReport run(const Profile& p, uint32_t qd, uint32_t read_percent, uint64_t measure_ms,
              uint32_t devices = 1, uint64_t seed = 1, uint64_t warmup_ms = 2,
              uint64_t stack_ns = 0) {
  RunSpec s;
  s.job.stack_ns = stack_ns;
  s.profile = p;
  s.devices = devices;
  s.seed = seed;
  s.job.queue_depth = qd;
  s.job.read_percent = read_percent;
  s.job.warmup_ns = warmup_ms * kMs;
  s.job.duration_ns = measure_ms * kMs;
  RunReport r = run_perf(s);
  EXPECT_EQ(r.error, "");
  for (const auto& d : r.devices) {
    EXPECT_EQ(d.job.errors, 0u);
    EXPECT_EQ(d.device.engine_mismatches, 0u);
  }
  std::printf("[figure] %s x%u qd%u %s: %.0f IOPS, mean %.2f us, p99 %.2f us (seed %" PRIu64
              ", %.2f s wall, %.0f simulated I/O per host second)\n",
              p.name.c_str(), devices, qd,
              read_percent == 100 ? "randread" : read_percent == 0 ? "randwrite" : "randrw",
              r.total_iops, r.devices.empty() ? 0.0 : r.devices[0].job.latency_ns.mean() / 1e3,
              r.devices.empty() ? 0.0 : r.devices[0].job.latency_ns.quantile(0.99) / 1e3, seed,
              r.wall_seconds, r.wall_seconds > 0 ? double(r.total_ios) / r.wall_seconds : 0.0);
  return r;
}

// Within ±3% of a published figure (the goal; MQSim reports 6-18%, FEMU 11%).
void expect_within_3pct(double measured, double published, const char* what) {
  EXPECT_GE(measured, published * 0.97) << what;
  EXPECT_LE(measured, published * 1.03) << what;
}

// AnandTech's fio through the kernel: 8.9 us; the SPDK paper's polled driver: 7 us (Figure 9's
// local part). One drive model, two hosts.
TEST(P4800x, Qd1RandomReadMeanLatencyIs8_9usThroughTheKernelAnd7usPolled) {
  const RunReport k = run(profile("p4800x"), 1, 100, 50, 1, 1, 2, kKernelStackNs);
  expect_within_3pct(k.devices[0].job.latency_ns.mean() / 1e3, 8.9, "kernel QD1 mean (us)");
  const RunReport p = run(profile("p4800x"), 1, 100, 50);
  expect_within_3pct(p.devices[0].job.latency_ns.mean() / 1e3, 7.0, "polled QD1 mean (us)");
}

TEST(P4800x, Qd16RandomReadIs550To585K) {
  const RunReport r = run(profile("p4800x"), 16, 100, 20);
  EXPECT_GE(r.total_iops, 550'000);
  EXPECT_LE(r.total_iops, 585'000);
}

TEST(P4800x, Qd16RandomWriteIs500K) {
  const RunReport r = run(profile("p4800x"), 16, 0, 20);
  expect_within_3pct(r.total_iops, 500'000, "4 KiB random write IOPS");
}

// SPDK paper, Figure 6: IOPS grow with queue depth and saturate around QD 8-16.
TEST(P4800x, IopsSaturateAroundQd8To16) {
  const Profile p = profile("p4800x");
  std::vector<double> iops;
  for (uint32_t qd : {1u, 2u, 4u, 8u, 16u, 32u}) iops.push_back(run(p, qd, 100, 10).total_iops);
  for (size_t i = 1; i < iops.size(); ++i) EXPECT_GE(iops[i], iops[i - 1] * 0.99) << "QD index " << i;
  EXPECT_LT(iops[0], 0.25 * iops[5]);   // QD1 is latency bound
  EXPECT_LT(iops[2], 0.95 * iops[5]);   // QD4 not yet saturated
  EXPECT_GE(iops[3], 0.95 * iops[5]);   // QD8: saturated
  EXPECT_GE(iops[4], 0.99 * iops[5]);
}

// The host stack's time lands in every I/O's latency and holds its slot as long: at QD1 the
// rate falls to one I/O per (device + stack); where the drive is the limit (p4800x at QD32)
// the rate stays.
TEST(HostStack, AddsItsTimeToEveryIoAndHoldsItsSlot) {
  const Profile p = profile("p4800x");
  const RunReport polled = run(p, 1, 100, 10);
  const RunReport kernel = run(p, 1, 100, 10, 1, 1, 2, 5'000);
  const double base = polled.devices[0].job.latency_ns.mean();
  const double with = kernel.devices[0].job.latency_ns.mean();
  EXPECT_NEAR(with - base, 5'000, 150);  // in the latency (the media's spread aside)
  EXPECT_NEAR(kernel.total_iops, 1e9 / with, 0.02 * kernel.total_iops);
  const double deep = run(p, 32, 100, 10).total_iops;
  const double deep_kernel = run(p, 32, 100, 10, 1, 1, 2, 5'000).total_iops;
  EXPECT_NEAR(deep_kernel, deep, 0.01 * deep);
}

TEST(P3700, Qd128RandomReadIs450K) {
  const RunReport r = run(profile("p3700"), 128, 100, 20);
  expect_within_3pct(r.total_iops, 450'000, "QD128 4 KiB random read IOPS");
}

TEST(P3700, Qd1RandomReadMeanLatencyIs78us) {  // AnandTech's, through the kernel
  const RunReport r = run(profile("p3700"), 1, 100, 50, 1, 1, 2, kKernelStackNs);
  expect_within_3pct(r.devices[0].job.latency_ns.mean() / 1e3, 78, "QD1 mean latency (us)");
}

// SPDK paper, Figure 4: one host core drives 1, 2 and 8 P3700s at QD128 each; IOPS scale
// linearly to 3.6 M.
TEST(P3700, OneCoreScalesLinearlyToEightDrives) {
  const Profile p = profile("p3700");
  const double one = run(p, 128, 100, 10, 1).total_iops;
  const double two = run(p, 128, 100, 10, 2).total_iops;
  const RunReport eight = run(p, 128, 100, 10, 8);
  expect_within_3pct(one, 450'000, "1 drive");
  expect_within_3pct(two, 900'000, "2 drives");
  expect_within_3pct(eight.total_iops, 3'600'000, "8 drives");
  EXPECT_LT(double(eight.host_busy_ns) / double(eight.simulated_ns), 0.9)
      << "the host core must not be the limit";
}

// A drive scaled to 4.8 GB raw (same channels, dies, timing, spare ratio) so filling it takes
// seconds, not hours.
Profile scaled_p3700(emu::timing::Precondition pre) {
  Profile p = profile("p3700");
  auto st = emu::timing::scale_capacity(p, 256, 8);
  EXPECT_TRUE(st.ok()) << st.error();
  p.ftl.precondition = pre;
  return p;
}

// Sustained random writes: fast while the over-provisioned space lasts, then garbage
// collection starts and IOPS fall (the write cliff) while write amplification climbs.
TEST(P3700, RandomWritesFallOffTheCliffWhenGcStarts) {
  RunSpec s;
  s.profile = scaled_p3700(emu::timing::Precondition::kSequential);
  s.job.queue_depth = 32;
  s.job.read_percent = 0;
  s.job.duration_ns = 600 * kMs;
  s.job.series_window_ns = 50 * kMs;
  const RunReport r = run_perf(s);
  ASSERT_EQ(r.error, "");
  const auto& series = r.devices[0].job.series;
  ASSERT_GE(series.size(), 12u);
  std::printf("[figure] p3700 (scaled) randwrite QD32 IOPS per 50 ms:");
  for (uint64_t c : series) std::printf(" %.0f", double(c) * 20);
  std::printf("  WA %.2f\n", r.devices[0].device.ftl.write_amplification());
  const double first = double(series[0]) * 20, last = double(series[11]) * 20;
  EXPECT_GE(first, 400'000) << "fresh: writes land in free blocks at the program rate";
  EXPECT_LE(last, 0.5 * first) << "after the cliff";
  EXPECT_GT(r.devices[0].device.ftl.write_amplification(), 1.5);
  EXPECT_GT(r.devices[0].device.ftl.gc_relocations, 0u);
  EXPECT_EQ(r.devices[0].device.engine_mismatches, 0u);
}

// Steady state (preconditioned to it): 90 K IOPS, the data sheet's sustained figure.
TEST(P3700, SteadyStateRandomWriteIs90KWithGreedyGcWriteAmplification) {
  const RunReport r = run(scaled_p3700(emu::timing::Precondition::kSteady), 32, 0, 200, 1, 1, 20);
  expect_within_3pct(r.total_iops, 90'000, "steady-state 4 KiB random write IOPS");
  const double wa = r.devices[0].device.ftl.write_amplification();
  EXPECT_GE(wa, 4.0);
  EXPECT_LE(wa, 5.0);
}

// Same seed and configuration: the same event trace, bit for bit. The RTL queue engine is
// cycle-equivalent to the C++ one, so it gives the same trace too.
TEST(Determinism, SameSeedSameTraceAndRtlMatchesTimed) {
  Profile p = profile("p4800x");
  const RunReport a = run(p, 8, 70, 2, 1, 42, 0);
  const RunReport b = run(p, 8, 70, 2, 1, 42, 0);
  const RunReport c = run(p, 8, 70, 2, 1, 43, 0);
  p.fidelity = emu::timing::Fidelity::kRtl;
  const RunReport d = run(p, 8, 70, 2, 1, 42, 0);
  std::printf("trace hashes: seed 42 %016" PRIx64 " / %016" PRIx64 ", seed 43 %016" PRIx64
              ", seed 42 rtl %016" PRIx64 "\n",
              a.trace_hash, b.trace_hash, c.trace_hash, d.trace_hash);
  EXPECT_GT(a.trace_records, 1000u);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_records, b.trace_records);
  EXPECT_EQ(a.total_iops, b.total_iops);
  EXPECT_NE(a.trace_hash, c.trace_hash);
  EXPECT_EQ(a.trace_hash, d.trace_hash);
}

}  // namespace
}  // namespace pollux::sim

// SystemC's library defines main() and calls sc_main(); this main() runs the tests instead.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
