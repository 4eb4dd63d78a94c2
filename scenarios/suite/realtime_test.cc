// Realtime mode: suite scenarios run with time paced to the wall clock (host and devices on
// one thread; the host's real CPU time counts). Correctness is judged as in virtual time —
// nothing acknowledged lost, errors only inside fault windows, devices back — but not speed:
// latency bounds and recovery bounds were written for virtual time, and in realtime this
// machine's speed (and its scheduler: a descheduled run jumps ahead in time) sets them, so
// they are dropped here and the fault windows widened; every fault must still recover.
#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

class Realtime : public ::testing::TestWithParam<std::string> {};

TEST_P(Realtime, NothingAcknowledgedLostAndEveryFaultRecovers) {
  const std::string file = "scenarios/suite/" + GetParam() + ".yaml";
  auto s = load_scenario(file);
  ASSERT_TRUE(s.ok()) << s.error();
  Scenario sc = s.value();
  sc.expect.latency_outside_faults.clear();
  sc.expect.recovery_within_ns = 0;
  for (FaultSpec& f : sc.faults) {
    ASSERT_NE(f.kind, FaultKind::kBadBlocks) << "its default window is the rest of the run";
    f.window_ns = 20 * (f.window_ns ? f.window_ns : 10'000'000);  // default: 10 ms
  }
  RunOptions o;
  o.time = "realtime";
  o.replay = "bazel run //scenarios/runner:pollux-scenario -- run $PWD/" + file +
             " --time realtime --seed " + std::to_string(sc.seed);
  const RunResult r = run_scenario(sc, o);
  std::printf("%s", result_table(r).c_str());
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.time, "realtime");
  EXPECT_TRUE(r.passed) << "replay: " << o.replay;
  EXPECT_EQ(r.violation_count, 0u);
  EXPECT_GE(r.simulated_ns, r.planned_ns);
  for (const FaultOutcome& f : r.faults) {
    EXPECT_TRUE(f.fired) << f.spec.label;
    EXPECT_TRUE(f.recovered) << f.spec.label;
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, Realtime,
                         ::testing::Values("hot-remove-reinsert", "power-loss-volatile-cache",
                                           "timeout-reset", "controller-fatal-status",
                                           "misbehaving-device",
                                           // Over the simulated network, paced (not real
                                           // sockets): a long partition, a hung target.
                                           "fabric-partition-long", "fabric-keepalive-expiry"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace pollux::scenarios

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
