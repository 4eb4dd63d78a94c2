// Chaos over 50 seeds (every fault class drawn with intensities, full verification), and
// determinism: the same seed twice gives the same trace hash and the same outcome, another
// seed another trace.
#include "scenarios/runner/chaos.h"

#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

constexpr uint64_t kDurationNs = 8'000'000;

RunResult chaos(uint64_t seed) {
  const Scenario s = make_chaos_scenario({seed, kDurationNs, 6});
  RunOptions o;
  o.seed = seed;
  o.replay = "bazel run //scenarios/runner:pollux-scenario -- chaos --seed " +
             std::to_string(seed) + " --duration 8ms --faults 6";
  return run_scenario(s, o);
}

TEST(Chaos, FiftySeedsLoseNothingAcknowledged) {
  int failed = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const RunResult r = chaos(seed);
    ASSERT_TRUE(r.error.empty()) << "seed " << seed << ": " << r.error;
    if (!r.passed) {
      ++failed;
      std::printf("%s", result_table(r).c_str());
    }
    EXPECT_TRUE(r.passed) << "chaos seed " << seed << "; replay: " << r.replay;
    EXPECT_EQ(r.violation_count, 0u) << "seed " << seed;
  }
  std::printf("chaos: %d of 50 seeds failed\n", failed);
}

TEST(Chaos, SameSeedSameRun) {
  const RunResult a = chaos(7), b = chaos(7), c = chaos(8);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_records, b.trace_records);
  EXPECT_EQ(a.ios, b.ios);
  EXPECT_EQ(a.errors, b.errors);
  EXPECT_EQ(a.simulated_ns, b.simulated_ns);
  EXPECT_NE(a.trace_hash, c.trace_hash);
  std::printf("seed 7 twice: trace %016lx / %016lx; seed 8: %016lx\n",
              static_cast<unsigned long>(a.trace_hash), static_cast<unsigned long>(b.trace_hash),
              static_cast<unsigned long>(c.trace_hash));
}

RunResult fabric_chaos(uint64_t seed) {
  const Scenario s = make_chaos_scenario({seed, kDurationNs, 6, /*fabric=*/true});
  RunOptions o;
  o.seed = seed;
  o.replay = "bazel run //scenarios/runner:pollux-scenario -- chaos --seed " +
             std::to_string(seed) + " --duration 8ms --faults 6 --fabric";
  return run_scenario(s, o);
}

// The drives behind an NVMe/TCP target over the simulated network; fabric faults (drops,
// partitions, added latency, corruption with digests, a hung target, a restart) drawn with
// the device faults that apply behind a target.
TEST(Chaos, FiftySeedsOverAFabricLoseNothingAcknowledged) {
  int failed = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const RunResult r = fabric_chaos(seed);
    ASSERT_TRUE(r.error.empty()) << "seed " << seed << ": " << r.error;
    if (!r.passed) {
      ++failed;
      std::printf("%s", result_table(r).c_str());
    }
    EXPECT_TRUE(r.passed) << "fabric chaos seed " << seed << "; replay: " << r.replay;
    EXPECT_EQ(r.violation_count, 0u) << "seed " << seed;
  }
  std::printf("fabric chaos: %d of 50 seeds failed\n", failed);
}

TEST(Chaos, AFabricRunIsAFunctionOfItsSeed) {
  const RunResult a = fabric_chaos(11), b = fabric_chaos(11), c = fabric_chaos(12);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_records, b.trace_records);
  EXPECT_EQ(a.ios, b.ios);
  EXPECT_EQ(a.simulated_ns, b.simulated_ns);
  EXPECT_NE(a.trace_hash, c.trace_hash);
  const Scenario s = make_chaos_scenario({11, kDurationNs, 6, true});
  ASSERT_TRUE(s.fabric.has_value());
  EXPECT_TRUE(validate(s).ok()) << validate(s).error();
}

// A suite scenario with a fabric: the same seed replays the same run (device and network
// traces), another seed differs.
TEST(Chaos, AFabricSuiteScenarioReplaysFromItsSeed) {
  auto s = load_scenario("scenarios/suite/fabric-partition-long.yaml");
  ASSERT_TRUE(s.ok()) << s.error();
  RunOptions o;
  const RunResult a = run_scenario(s.value(), o), b = run_scenario(s.value(), o);
  o.seed = s.value().seed + 1;
  const RunResult c = run_scenario(s.value(), o);
  EXPECT_TRUE(a.passed);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_records, b.trace_records);
  EXPECT_EQ(a.ios, b.ios);
  EXPECT_EQ(a.simulated_ns, b.simulated_ns);
  EXPECT_NE(a.trace_hash, c.trace_hash);
  std::printf("fabric-partition-long seed %lu twice: trace %016lx / %016lx; seed %lu: %016lx\n",
              static_cast<unsigned long>(s.value().seed), static_cast<unsigned long>(a.trace_hash),
              static_cast<unsigned long>(b.trace_hash), static_cast<unsigned long>(o.seed),
              static_cast<unsigned long>(c.trace_hash));
}

TEST(Chaos, TheScenarioIsAFunctionOfTheSeed) {
  const Scenario a = make_chaos_scenario({42, kDurationNs, 6});
  const Scenario b = make_chaos_scenario({42, kDurationNs, 6});
  ASSERT_EQ(a.faults.size(), b.faults.size());
  for (size_t i = 0; i < a.faults.size(); ++i) {
    EXPECT_EQ(a.faults[i].at_ns, b.faults[i].at_ns);
    EXPECT_EQ(a.faults[i].command_json, b.faults[i].command_json);
  }
  EXPECT_TRUE(validate(a).ok()) << validate(a).error();
}

}  // namespace
}  // namespace pollux::scenarios

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
