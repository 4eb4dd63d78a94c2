// The host's CPU time in a scenario run (issue 20 item 5): in virtual time the lockstep's host
// cost model is the event framework's CPU clock, in realtime the TSC is, so the report and the
// metrics (pollux_poller_busy_seconds_total, pollux_reactor_{busy,idle}_seconds_total) carry
// real busy shares in both. (Exact charges per poller: tests/timing:lockstep_test.)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "driver/metrics/exporter.h"
#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

std::string scenario(const std::string& time, const std::string& fabric = "") {
  return "name: cpu-time\nseed: 11\ntime: " + time + R"(
topology:
)" + fabric + R"(
  devices: [{name: nvme0, profile: p4800x}]
workloads:
  - {name: w, bdev: nvme0n1, read_percent: 70, queue_depth: 8, duration: 4ms, range: 2MiB}
expect:
  max_errors: 0
)";
}

// The sum of a family's samples (0 if it is missing).
double total(const std::vector<prometheus::MetricFamily>& fams, const std::string& name) {
  double v = 0;
  for (const auto& f : fams)
    if (f.name == name)
      for (const auto& m : f.metric) v += m.counter.value;
  return v;
}

struct Observed {
  RunResult r;
  std::vector<prometheus::MetricFamily> metrics;
};

Observed run(const std::string& time, const std::string& fabric = "") {
  auto s = parse_scenario(scenario(time, fabric));
  EXPECT_TRUE(s.ok()) << s.error();
  metrics::Snapshot snap;
  RunOptions o;
  o.metrics = &snap;
  Observed out{run_scenario(s.value(), o), {}};
  metrics::Builder b;
  snap.source()(b);
  out.metrics = b.take();
  std::printf("%s", result_table(out.r).c_str());
  return out;
}

const PollerSeries* poller(const RunResult& r, const std::string& name) {
  for (const PollerSeries& p : r.pollers)
    if (p.name.ends_with("/" + name)) return &p;
  return nullptr;
}

TEST(ScenarioCpuTime, VirtualTimeChargesTheCostModelToTheBusyPollers) {
  const Observed x = run("virtual");
  const RunResult& r = x.r;
  ASSERT_TRUE(r.passed) << r.error;
  ASSERT_GT(r.ios, 1000u);
  // The reactor's clock ran through the whole run, busy for the modelled work and idle while
  // the drive worked (QD 8 on a ~10 us drive leaves the host mostly waiting).
  EXPECT_GT(r.host_busy_ns, 0u);
  EXPECT_GT(r.host_idle_ns, r.host_busy_ns);
  EXPECT_EQ(r.realtime_max_lag_ns, 0u);  // virtual time never lags
  const double cpu = double(r.host_busy_ns + r.host_idle_ns);
  EXPECT_NEAR(cpu, double(r.simulated_ns), 0.01 * double(r.simulated_ns));
  // The drive's channel poller reaps every completion; the workload's poller submits: between
  // them their time is at least what the model charges for that many completions and
  // submissions, and no more than the reactor's busy time.
  ASSERT_FALSE(r.pollers.empty());
  const PollerSeries* io = poller(r, "bdev_nvme_nvme0");
  const PollerSeries* wl = poller(r, "workload_w");
  ASSERT_NE(io, nullptr);
  ASSERT_NE(wl, nullptr);
  EXPECT_GT(io->busy_ns, 0u);
  EXPECT_GT(wl->busy_ns, 0u);
  EXPECT_GE(io->busy_ns + wl->busy_ns, r.ios * (18 + 20));  // complete_ns + submit_ns
  uint64_t all = 0;
  for (const PollerSeries& p : r.pollers) all += p.busy_ns;
  EXPECT_LT(all, r.host_busy_ns);  // the reactor adds its iterations' own cost
  double peak = 0;
  for (double s : io->busy_time_share) peak = std::max(peak, s);
  EXPECT_GT(peak, 0.0);
  EXPECT_LE(peak, 1.0);
  // What Prometheus scrapes says the same (it also holds the end-of-run sweep's reads).
  EXPECT_GE(total(x.metrics, "pollux_poller_busy_seconds_total"), double(all) * 1e-9);
  EXPECT_GT(total(x.metrics, "pollux_reactor_idle_seconds_total"), 0.0);
  EXPECT_GT(total(x.metrics, "pollux_reactor_busy_seconds_total"), 0.0);
  // The same seed, the same charges: the CPU time is part of the deterministic run.
  const Observed y = run("virtual");
  EXPECT_EQ(y.r.host_busy_ns, r.host_busy_ns);
  EXPECT_EQ(y.r.host_idle_ns, r.host_idle_ns);
  EXPECT_EQ(y.r.trace_hash, r.trace_hash);
}

// Behind an NVMe/TCP target the target's core is charged too: every I/O the host completed
// was a command the target completed, each costing at least its modelled 480 ns.
TEST(ScenarioCpuTime, AFabricTargetsCoreIsChargedPerCommand) {
  const Observed x = run("virtual", "  fabric: {transport: tcp, target_command_cost: 480ns}");
  const RunResult& r = x.r;
  ASSERT_TRUE(r.passed) << r.error;
  ASSERT_GT(r.ios, 500u);
  EXPECT_GE(r.target_commands, r.ios);
  EXPECT_GE(r.target_busy_ns, r.target_commands * 480);
  EXPECT_LT(r.target_busy_ns, r.simulated_ns);  // QD 8 does not saturate one core
  EXPECT_GT(r.host_busy_ns, 0u);
  // Off: the target takes no time.
  const Observed off = run("virtual", "  fabric: {transport: tcp, target_command_cost: 0}");
  ASSERT_TRUE(off.r.passed) << off.r.error;
  EXPECT_EQ(off.r.target_busy_ns, 0u);
  EXPECT_GE(off.r.target_commands, off.r.ios);
}

TEST(ScenarioCpuTime, RealtimeBusyPlusIdleIsTheWallTimeTheRunTook) {
  const Observed x = run("realtime");
  const RunResult& r = x.r;
  ASSERT_TRUE(r.passed) << r.error;
  // In realtime the virtual clock follows the wall clock and the reactor's CPU clock is the
  // TSC on the same scale: its busy + idle covers the run's span.
  const double cpu = double(r.host_busy_ns + r.host_idle_ns);
  EXPECT_GT(r.host_busy_ns, 0u);
  EXPECT_NEAR(cpu, double(r.simulated_ns), 0.05 * double(r.simulated_ns));
  // How far the devices' model fell behind the wall clock is measured (a step's span at
  // least) and reported, with a warning beyond 1 ms.
  EXPECT_GT(r.realtime_max_lag_ns, 0u);
  EXPECT_NE(result_table(r).find("realtime: the devices' model fell up to"), std::string::npos);
  const PollerSeries* io = poller(r, "bdev_nvme_nvme0");
  ASSERT_NE(io, nullptr);
  EXPECT_GT(io->busy_ns, 0u);
  EXPECT_GT(total(x.metrics, "pollux_poller_busy_seconds_total"), 0.0);
  EXPECT_GT(total(x.metrics, "pollux_reactor_idle_seconds_total") +
                total(x.metrics, "pollux_reactor_busy_seconds_total"),
            0.0);
}

}  // namespace
}  // namespace pollux::scenarios

// Its own main: SystemC's library (linked through the emulated target) has one too.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
