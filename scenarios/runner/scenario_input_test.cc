// Scenario files that must be refused, with the field and line named — by `check` exactly as
// by `run` — and reports that survive any name.
#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/report.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

std::string error_of(const std::string& yaml) {
  auto s = parse_scenario(yaml);
  return s ? "" : s.error();
}

// A small valid scenario; each test changes one thing.
std::string base(const std::string& device = "{name: nvme0, profile: p4800x}",
                 const std::string& workload = "{name: w, bdev: nvme0n1, duration: 2ms, range: 1MiB}",
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
