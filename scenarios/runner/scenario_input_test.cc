// Scenario files that must be refused, with the field and line named — by `check` exactly as
// by `run` — and reports that survive any name.
#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

std::string error_of(const std::string& yaml) {
  auto s = parse_scenario(yaml);
  return s ? "" : s.error();
}

// A small valid scenario; each test changes one thing.
constexpr const char* kWorkload = "{name: w, bdev: nvme0n1, duration: 2ms, range: 1MiB}";
std::string base(const std::string& device = "{name: nvme0, profile: p4800x}",
                 const std::string& workload = kWorkload,
                 const std::string& faults = "[{at: 1ms, action: clear, label: x}]") {
  return "name: t\nseed: 3\ntopology:\n  devices: [" + device + "]\nworkloads:\n  - " + workload +
         "\nfaults: " + faults + "\n";
}

TEST(ScenarioInput, TheBaseIsValid) { EXPECT_EQ(error_of(base()), ""); }

TEST(ScenarioInput, TextThatIsNotUtf8IsRefusedWithItsLine) {
  const std::string label = error_of(base("{name: nvme0}", "{bdev: nvme0n1}",
                                          "[{at: 1ms, action: clear, label: \"lab\xbd\"}]"));
  EXPECT_NE(label.find("line 7: byte 0xBD is not UTF-8"), std::string::npos) << label;
  const std::string name = error_of(base("{name: \"nv\xbd\"}", "{bdev: \"nv\xbdn1\"}"));
  EXPECT_NE(name.find("line 4: byte 0xBD is not UTF-8"), std::string::npos) << name;
}

TEST(ScenarioInput, WhatRunWouldRefuseCheckRefusesToo) {
  // An unknown profile failed only when the run built the device.
  EXPECT_NE(error_of(base("{name: nvme0, profile: p9999}")).find("profile 'p9999'"),
            std::string::npos);
  EXPECT_NE(error_of(base("{name: nvme0, profile: gen4-tlc, scale_blocks: 1}")).find("scale_blocks"),
            std::string::npos);
  // A range larger than the drive ran silently on the part that exists.
  const std::string range = error_of(base(
      "{name: nvme0}", "{name: w, bdev: nvme0n1, duration: 2ms, range: 1000000TiB}"));
  EXPECT_NE(range.find("workloads[0].range: 1024000000.0 GiB (1099511627776000000 bytes) is "
                       "larger than nvme0n1, 349.3 GiB (375083606016 bytes) (line 6)"),
            std::string::npos)
      << range;
  // Scaled down: the capacity is the scaled drive's.
  EXPECT_NE(error_of(base("{name: nvme0, profile: gen4-tlc, scale_blocks: 64}",
                          "{name: w, bdev: nvme0n1, duration: 2ms, range: 100GiB}"))
                .find("is larger than nvme0n1"),
            std::string::npos);
  EXPECT_NE(error_of(base("{name: nvme0}", "{bdev: nvme0n1, queue_depth: 8, range: 16KiB}"))
                .find("range: holds fewer I/Os of block_size than queue_depth"),
            std::string::npos);
}

TEST(ScenarioInput, SeedsBeyond64BitsOrNegativeAreRefused) {
  for (const char* seed : {"18446744073709551616", "99999999999999999999999", "-1"}) {
    std::string y = base();
    y.replace(y.find("seed: 3"), 7, std::string("seed: ") + seed);
    EXPECT_NE(error_of(y).find("seed: "), std::string::npos) << seed;
  }
  std::string max = base();
  max.replace(max.find("seed: 3"), 7, "seed: 18446744073709551615");
  EXPECT_EQ(error_of(max), "");
}

TEST(ScenarioInput, KeysGivenTwiceAreRefused) {
  std::string top = base();
  top.replace(top.find("seed: 3"), 7, "seed: 3\nseed: 4");
  EXPECT_NE(error_of(top).find("seed: given twice (line 3)"), std::string::npos) << error_of(top);
  const std::string nested =
      error_of(base("{name: nvme0}", "{bdev: nvme0n1, queue_depth: 2, queue_depth: 4}"));
  EXPECT_NE(nested.find("workloads[0].queue_depth: given twice (line 6)"), std::string::npos)
      << nested;
}

TEST(ScenarioInput, WorkloadNamesAreUnique) {
  const std::string e = error_of(base("{name: nvme0}", "{name: w, bdev: nvme0n1}\n  - {name: w, "
                                                       "bdev: nvme0n1}"));
  EXPECT_NE(e.find("workloads[1].name: duplicate name 'w' (line 7)"), std::string::npos) << e;
}

TEST(ScenarioInput, FaultLbasBeyondTheDriveAreRefused) {
  const std::string e = error_of(base(
      "{name: nvme0, profile: gen4-tlc, scale_blocks: 64}", kWorkload,
      "[{at: 1ms, action: status, status: unrecovered_read_error, lba: [0, 999999999999]}]"));
  EXPECT_NE(e.find("faults[0].lba: 999999999999 is beyond the device ("), std::string::npos) << e;
  EXPECT_EQ(error_of(base("{name: nvme0}", kWorkload,
                          "[{at: 1ms, action: status, status: write_fault, lba: [0, 100]}]")),
            "");
}

TEST(ScenarioInput, AHotInsertOfADriveTheTimelineLeftInIsRefused) {
  auto insert_error = [](const std::string& faults) {
    return error_of(base("{name: nvme0}", kWorkload, faults));
  };
  // Never removed.
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_insert}]")
                .find("faults[0]: hot_insert of nvme0, which is present then (no hot_remove of "
                      "it) (line 7)"),
            std::string::npos);
  EXPECT_NE(insert_error("[{after_ios: 10, action: hot_insert}]").find("no hot_remove of it"),
            std::string::npos);
  // Removed after the insert, or back by then.
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_insert}, {at: 2ms, action: hot_remove}]")
                .find("faults[0]: hot_insert of nvme0, which is present then"),
            std::string::npos);
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 100us}, "
                         "{at: 1500us, action: hot_insert}]")
                .find("faults[1]: hot_insert"),
            std::string::npos);
  // Out at the insert: fine. An order decided by I/O counts or equal instants: the run's.
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove}, {at: 2ms, action: hot_insert}]"), "");
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 1ms}, "
                         "{at: 1500us, action: hot_insert}]"),
            "");
  EXPECT_EQ(insert_error("[{after_ios: 10, action: hot_remove}, {at: 1ms, action: hot_insert}]"),
            "");
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 1ms}, "
                         "{at: 2ms, action: hot_insert}]"),
            "");
}

TEST(ScenarioInput, AHotInsertOfAPresentDriveFailsTheRun) {
  // The removal waits for I/Os the workload completes only after the insert's instant.
  auto s = parse_scenario(base("{name: nvme0}", "{bdev: nvme0n1, duration: 2ms, range: 1MiB}",
                               "[{after_ios: 1000000, action: hot_remove}, "
                               "{at: 500us, action: hot_insert, label: back}]"));
  ASSERT_TRUE(s) << s.error();
  const RunResult r = run_scenario(s.value(), {});
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.passed);
  bool named = false;
  for (const std::string& f : r.failures) {
    named |= f.find("fault 'back' (line 7): hot_insert of nvme0, which is present") !=
             std::string::npos;
  }
  EXPECT_TRUE(named) << testing::PrintToString(r.failures);
}

TEST(ScenarioInput, ReportsOfNamesThatAreNotUtf8AreWritten) {
  RunResult r;
  r.scenario = "t\xbd";
  FaultOutcome f;
  f.spec.label = "lab\xbd";
  r.faults.push_back(f);
  DeviceOutcome d;
  d.name = "nv\xbd";
  r.devices.push_back(d);
  std::string json;
  ASSERT_NO_THROW(json = report_json(r));
  EXPECT_NE(json.find("lab\xef\xbf\xbd"), std::string::npos);  // U+FFFD for the bad byte
}

}  // namespace
}  // namespace pollux::scenarios

// Its own main: SystemC's library (linked through the runner) has one too.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
