// The vfio-pci backend's checks before it touches the kernel: PCI addresses, the IOMMU group
// from sysfs, and clear refusals. (Attaching to a real device runs in the QEMU guest:
// tests/hil.)
#include "driver/env/vfio_pci.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace pollux::env {
namespace {

TEST(VfioPci, PciAddressesAreNormalised) {
  EXPECT_EQ(normalise_bdf("0000:01:00.0").value(), "0000:01:00.0");
  EXPECT_EQ(normalise_bdf("01:00.0").value(), "0000:01:00.0");
  EXPECT_EQ(normalise_bdf("0000:0A:1f.7").value(), "0000:0a:1f.7");
  EXPECT_FALSE(normalise_bdf("0000:01:20.0"));  // device numbers stop at 0x1f
  EXPECT_FALSE(normalise_bdf("0000:01:00.8"));  // functions at 7
  EXPECT_FALSE(normalise_bdf("0000:01:00.0x"));
  EXPECT_FALSE(normalise_bdf("/tmp/emu.sock"));
  EXPECT_NE(normalise_bdf("nvme0").error().message.find("not a PCI address"), std::string::npos);
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pollux-sysfs.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root); }
  void add_device(const std::string& bdf, int group) {
    ASSERT_EQ(mkdir((root + "/" + bdf).c_str(), 0755), 0);
    if (group >= 0) {
      const std::string target = "../../../kernel/iommu_groups/" + std::to_string(group);
      ASSERT_EQ(symlink(target.c_str(), (root + "/" + bdf + "/iommu_group").c_str()), 0);
    }
  }
  std::string root;
};

TEST_F(FakeSysfs, GroupComesFromTheIommuGroupLink) {
  add_device("0000:01:00.0", 12);
  auto g = iommu_group_of("0000:01:00.0", root);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(*g, 12);
}

TEST_F(FakeSysfs, RefusesClearlyWithoutDeviceOrIommu) {
  add_device("0000:02:00.0", -1);
  auto none = iommu_group_of("0000:03:00.0", root);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, -ENODEV);
  EXPECT_NE(none.error().message.find("no PCI device 0000:03:00.0"), std::string::npos);
  auto no_iommu = iommu_group_of("0000:02:00.0", root);
  ASSERT_FALSE(no_iommu);
  EXPECT_NE(no_iommu.error().message.find("intel_iommu=on"), std::string::npos);
}

TEST_F(FakeSysfs, OpenNamesTheMissingVfioNode) {
  add_device("0000:01:00.0", 7);
  VfioPciOptions o;
  o.sysfs_root = root;
  o.vfio_root = root + "/no-vfio";
  auto d = VfioPciDevice::open("trtype:pcie traddr:0000:01:00.0", MemoryRegistry::global(), o);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("0000:01:00.0: " + root + "/no-vfio/vfio"), std::string::npos)
      << d.error().message;
  auto bad = VfioPciDevice::open("pcie:zz", MemoryRegistry::global(), o);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, -EINVAL);
}

}  // namespace
}  // namespace pollux::env
