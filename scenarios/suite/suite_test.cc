// The scenario suite: every scenario in scenarios/suite, in virtual time, with several seeds
// (the scenario's own and two more); those written for realtime (kernel sockets) run in
// realtime_test. A failure prints the runner's table and the command
// that replays it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

std::vector<std::string> scenario_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("scenarios/suite")) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class Suite : public ::testing::TestWithParam<std::string> {};

TEST_P(Suite, PassesWithThreeSeeds) {
  auto s = load_scenario(GetParam());
  ASSERT_TRUE(s.ok()) << s.error();
  if (s.value().time == "realtime") {  // kernel sockets: on the wall clock, in realtime_test
    GTEST_SKIP() << GetParam() << " runs in realtime: realtime_test runs it";
  }
  for (uint64_t extra : {0, 100, 200}) {
    RunOptions o;
    o.seed = s.value().seed + extra;
    o.replay = "bazel run //scenarios/runner:pollux-scenario -- run $PWD/" + GetParam() +
               " --seed " + std::to_string(o.seed);
    const RunResult r = run_scenario(s.value(), o);
    std::printf("%s", result_table(r).c_str());
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_TRUE(r.passed) << GetParam() << " seed " << o.seed << " failed; replay: " << o.replay;
    EXPECT_GT(r.ios, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, Suite, ::testing::ValuesIn(scenario_files()),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param).stem().string();
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A drive pulled behind the fabric target: not only nothing lost — the host's bdev went with
// the namespace (the changed-namespace notice) and came back with it (the workload reopened
// it), while the host's controller kept its association (no reset: only the namespace went).
TEST(FabricHotPlug, TheHostsBdevGoesAndComesBackWithTheNamespace) {
  auto s = load_scenario("scenarios/suite/fabric-hot-remove-reinsert.yaml");
  ASSERT_TRUE(s.ok()) << s.error();
  RunOptions o;
  const RunResult r = run_scenario(s.value(), o);
  std::printf("%s", result_table(r).c_str());
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(r.passed);
  ASSERT_EQ(r.workloads.size(), 1u);
  EXPECT_GE(r.workloads[0].reopens, 1u) << "the host's bdev never went away";
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].host_resets, 0u);
  EXPECT_TRUE(r.devices[0].attached_at_end);
  EXPECT_GT(r.devices[0].swept_blocks, 0u);
}

TEST(SuiteFiles, AtLeastFifteenScenariosAndEveryFaultClass) {
  const auto files = scenario_files();
  EXPECT_GE(files.size(), 15u);
  std::vector<bool> seen(kFaultKinds, false);
  std::vector<std::string> actions;
  for (const auto& f : files) {
    auto s = load_scenario(f);
    ASSERT_TRUE(s.ok()) << s.error();
    for (const FaultSpec& x : s.value().faults) {
      seen[static_cast<size_t>(x.kind)] = true;
      if (x.kind == FaultKind::kCommand) {
        actions.push_back(x.command_json.substr(x.command_json.find("\"action\"")));
      }
    }
  }
  for (size_t k = 0; k < seen.size(); ++k) {
    if (static_cast<FaultKind>(k) == FaultKind::kClear) continue;  // a helper, not a fault
    EXPECT_TRUE(seen[k]) << "no scenario uses " << to_string(static_cast<FaultKind>(k));
  }
  for (const char* a : {"status", "never_complete", "delay", "duplicate_completion",
                        "unknown_cid", "stale_phase", "drop_data", "misdirect"}) {
    const bool any = std::any_of(actions.begin(), actions.end(), [&](const std::string& s) {
      return s.find(std::string("\"") + a + "\"") != std::string::npos;
    });
    EXPECT_TRUE(any) << "no scenario uses device fault " << a;
  }
}

}  // namespace
}  // namespace pollux::scenarios

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
