// What a report says about a run: every expectation with its measured value, limit and verdict
// (report.json, report.html, the terminal table), fault windows and the re-insertion drawn on
// the charts, axes with round ticks and readable numbers, and what ran (devices, workloads).
#include "scenarios/runner/report.h"

#include <gtest/gtest.h>

#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

RunResult run(const std::string& yaml) {
  auto s = parse_scenario(yaml);
  EXPECT_TRUE(s) << s.error();
  return run_scenario(s.value(), RunOptions{});
}

const char* kPull = R"(name: pull
seed: 5
topology:
  devices: [{name: nvme0, profile: p4800x}]
host: {io_timeout_us: 2000}
workloads:
  - {name: w, bdev: nvme0n1, queue_depth: 8, duration: 6ms, range: 2MiB}
faults:
  - {at: 2ms, action: hot_remove, reinsert_after: 1ms, window: 2ms, label: pull}
expect:
  recovery_within: 3ms
  max_errors: 0
  devices_at_end: 1
)";

// A target on two cores: its busy share is the cores' average; the JSON has each core's.
TEST(Report, ATargetsBusyShareIsItsCoresAverage) {
  RunResult r;
  r.simulated_ns = 10'000'000;
  r.target_cores = 2;
  r.target_core_busy_ns = {4'000'000, 1'000'000};
  r.target_busy_ns = 5'000'000;
  r.target_commands = 10'000;
  const std::string text = result_table(r);
  EXPECT_NE(text.find("target CPU: 2 cores busy 25.0% (10000 commands, 500 ns each)"),
            std::string::npos)
      << text;
  const std::string json = report_json(r);
  EXPECT_NE(json.find("\"target_cores\": 2,"), std::string::npos) << json;
  const size_t busy = json.find("\"target_core_busy_ns\": [");
  ASSERT_NE(busy, std::string::npos) << json;
  EXPECT_LT(json.find("4000000", busy), json.find("1000000", busy)) << json;
  r.target_cores = 1;
  EXPECT_NE(result_table(r).find("target CPU: core busy 50.0%"), std::string::npos);
}

TEST(Report, EveryExpectationIsListedWithWhatWasMeasured) {
  const RunResult r = run(kPull);
  auto find = [&](const std::string& name) -> const ExpectationOutcome* {
    for (const ExpectationOutcome& x : r.expectations)
      if (x.name == name) return &x;
    return nullptr;
  };
  const ExpectationOutcome* rec = find("recovery after fault 'pull' (line 9)");
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->passed);
  EXPECT_EQ(rec->limit, "<= 3ms");
  const ExpectationOutcome* errs = find("I/O errors");
  ASSERT_NE(errs, nullptr);  // max_errors 0 against a pulled drive: not met
  EXPECT_FALSE(errs->passed);
  EXPECT_EQ(errs->limit, "<= 0");
  EXPECT_NE(errs->measured, "0");
  ASSERT_NE(find("data integrity: oracle violations"), nullptr);
  ASSERT_NE(find("devices attached at the end"), nullptr);
  EXPECT_FALSE(r.passed);

  const std::string json = report_json(r);
  EXPECT_NE(json.find("\"expectations\""), std::string::npos);
  EXPECT_NE(json.find("\"window_from_ns\""), std::string::npos);
  EXPECT_NE(json.find("random, 50% reads, 4 KiB, QD 8"), std::string::npos);
  const std::string text = result_table(r);
  EXPECT_NE(text.find("expect NOT  I/O errors"), std::string::npos) << text;
}

TEST(Report, ChartsShowFaultWindowsTheReinsertionAndRoundTicks) {
  const RunResult r = run(kPull);
  ASSERT_EQ(r.faults.size(), 1u);
  EXPECT_EQ(r.faults[0].window_from_ns, r.faults[0].fired_ns);
  EXPECT_GT(r.faults[0].window_to_ns, r.faults[0].recovery_from_ns);  // to after the re-insertion
  const std::string html = report_html(r);
  EXPECT_NE(html.find("class='window'"), std::string::npos);
  EXPECT_NE(html.find("class='back'"), std::string::npos);  // where the drive came back
  EXPECT_NE(html.find("<h2>Expectations</h2>"), std::string::npos);
  EXPECT_NE(html.find("NOT MET"), std::string::npos);
  EXPECT_NE(html.find("<h2>Set-up</h2>"), std::string::npos);
  EXPECT_NE(html.find("profile p4800x"), std::string::npos);
  EXPECT_NE(html.find("<h2>Latency</h2>"), std::string::npos);
  EXPECT_NE(html.find("Latency over time"), std::string::npos);  // mean and p99 per bucket
  // The distribution: bars of both series whose shares add up to 100% each.
  const auto dist = html.find("Latency distribution");
  ASSERT_NE(dist, std::string::npos);
  double all = 0, outside = 0;
  for (auto at = html.find("class='bar'>", dist); at != std::string::npos;
       at = html.find("class='bar'>", at + 1)) {
    const auto fill = html.rfind("fill='", at);
    const double share = std::stod(html.substr(html.find("<title>", at) + 7));
    (html.compare(fill + 6, 4, "#06c") == 0 ? all : outside) += share;
  }
  EXPECT_NEAR(all, 100, 0.1);
  EXPECT_NEAR(outside, 100, 0.1);
  EXPECT_NE(html.find(">1us</text>", dist), std::string::npos) << "a decade tick";
  uint64_t with_p99 = 0;
  for (const Bucket& b : r.series) with_p99 += b.latency_p99_ns > 0;
  EXPECT_GT(with_p99, r.series.size() / 2);
  EXPECT_NE(report_json(r).find("\"p99_latency_ns\""), std::string::npos);
  EXPECT_EQ(html.find("e+0"), std::string::npos);          // no 5.833e+05 on an axis
  EXPECT_NE(html.find("K</text>"), std::string::npos);     // IOPS in thousands
  EXPECT_NE(html.find(">2ms</text>"), std::string::npos);  // a time tick
}

}  // namespace
}  // namespace pollux::scenarios

// Its own main: SystemC's library (linked through the emulated target) has one too.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
