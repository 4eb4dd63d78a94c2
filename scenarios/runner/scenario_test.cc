// Scenario files: the qemu device type (what it takes, what it refuses) and the set-up
// refusals of the qemu target where no QEMU device is bound.
#include "scenarios/runner/scenario.h"

#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/runner.h"

namespace pollux::scenarios {
namespace {

std::string with(const std::string& devices, const std::string& faults,
                 const std::string& time = "realtime") {
  return "name: t\ntime: " + time + "\ntopology:\n  devices: " + devices +
         "\nworkloads:\n  - {bdev: nvme0n1, duration: 1s}\nfaults: " + faults + "\n";
}

std::string error_of(const std::string& yaml) {
  auto s = parse_scenario(yaml);
  return s ? "" : s.error();
}

TEST(QemuDevices, ParseWithTheirDefaults) {
  auto s = parse_scenario(with("[{name: nvme0, type: qemu}]", "[{at: 1s, action: hot_remove}]"));
  ASSERT_TRUE(s) << s.error();
  const DeviceSpec& d = s.value().devices[0];
  EXPECT_EQ(d.type, DeviceType::kQemu);
  EXPECT_EQ(d.traddr, "auto");
  EXPECT_EQ(d.qemu_id, "nvme0");
  EXPECT_EQ(d.monitor, "/dev/ttyS1");
  auto e = parse_scenario(with("[{name: nvme0}]", "[]", "virtual"));
  ASSERT_TRUE(e) << e.error();
  EXPECT_EQ(e.value().devices[0].type, DeviceType::kEmulated);
}

TEST(QemuDevices, TakeAnAddressAnIdAndAMonitor) {
  auto s = parse_scenario(with(
      "[{name: nvme0, type: qemu, traddr: '0000:01:00.0', qemu_id: ctrl1, monitor: /dev/ttyS2}]",
      "[{at: 1s, action: host_reset}]"));
  ASSERT_TRUE(s) << s.error();
  EXPECT_EQ(s.value().devices[0].traddr, "0000:01:00.0");
  EXPECT_EQ(s.value().devices[0].qemu_id, "ctrl1");
  EXPECT_EQ(s.value().devices[0].monitor, "/dev/ttyS2");
}

TEST(QemuDevices, RefuseWhatOnlyTheEmulatorHas) {
  // Device-side faults: QEMU's controller takes no fault rules.
  for (const char* f : {"{at: 1s, action: fatal}", "{at: 1s, action: power_loss}",
                        "{at: 1s, action: status, status: unrecovered_read_error}",
                        "{at: 1s, action: bad_blocks, count: 2}"}) {
    const std::string e = error_of(with("[{type: qemu}]", std::string("[") + f + "]"));
    EXPECT_NE(e.find("needs an emulated device"), std::string::npos) << f << ": " << e;
  }
  // State triggers watch the emulator's insides.
  EXPECT_NE(error_of(with("[{type: qemu}]", "[{on: controller_init, action: host_reset}]"))
                .find(".on: needs an emulated device"),
            std::string::npos);
  // Drive descriptions: unknown keys for a qemu device.
  EXPECT_NE(error_of(with("[{type: qemu, profile: p4800x}]", "[]")).find("profile: unknown key"),
            std::string::npos);
  // Virtual time: QEMU runs on the wall clock.
  EXPECT_NE(error_of(with("[{type: qemu}]", "[]", "virtual")).find("real time"),
            std::string::npos);
  // One run drives one kind of device.
  EXPECT_NE(error_of(with("[{name: nvme0, type: qemu}, {name: nvme1}]", "[]"))
                .find("different types"),
            std::string::npos);
  EXPECT_NE(error_of(with("[{type: qemu, traddr: ''}]", "[]")).find("must not be empty"),
            std::string::npos);
  EXPECT_NE(error_of(with("[{type: qemux}]", "[]")).find("expected emulated or qemu"),
            std::string::npos);
}

TEST(QemuTarget, SetUpSaysWhyWhenThereIsNoBoundFunction) {
  // This machine (or CI's) has no NVMe function bound to vfio-pci: the run does not start,
  // and says which device and address it could not use.
  auto s = parse_scenario(with("[{name: nvme0, type: qemu, traddr: '0000:7f:1f.7'}]", "[]"));
  ASSERT_TRUE(s) << s.error();
  RunResult r = run_scenario(s.value(), {});
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.error.find("device nvme0: 0000:7f:1f.7 is not bound to vfio-pci"),
            std::string::npos)
      << r.error;
  auto bad = parse_scenario(with("[{name: nvme0, type: qemu, traddr: 'not-a-bdf'}]", "[]"));
  ASSERT_TRUE(bad) << bad.error();
  r = run_scenario(bad.value(), {});
  EXPECT_NE(r.error.find("device nvme0: traddr:"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace pollux::scenarios

// Its own main: SystemC's library (linked through the emulated target) has one too.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
