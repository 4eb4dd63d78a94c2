#include "emulator/device/pci_config.h"

#include <gtest/gtest.h>

namespace pollux::emu::device {
namespace {

uint32_t rd32(const PciConfigSpace& c, uint64_t off) {
  uint32_t v = 0;
  EXPECT_EQ(c.read(off, &v, 4), 0);
  return v;
}
void wr32(PciConfigSpace& c, uint64_t off, uint32_t v) { EXPECT_EQ(c.write(off, &v, 4), 0); }

TEST(PciConfigSpace, IdentifiesAnNvmeController) {
  PciConfigSpace c(0x1b36, 0x0010, 0x010802, 0x4000);
  EXPECT_EQ(rd32(c, 0x00), 0x00101b36u);
  EXPECT_EQ(rd32(c, 0x08) >> 8, 0x010802u);  // class code 01-08-02
  EXPECT_EQ(rd32(c, 0x10), 0x4u);             // 64-bit memory BAR
}

TEST(PciConfigSpace, Bar0SizingProtocol) {
  PciConfigSpace c(0x1b36, 0x0010, 0x010802, 0x4000);
  wr32(c, 0x10, 0xffffffff);
  wr32(c, 0x14, 0xffffffff);
  const uint64_t bar = rd32(c, 0x10) | uint64_t{rd32(c, 0x14)} << 32;
  EXPECT_EQ(~(bar & ~0xfull) + 1, 0x4000u);  // the size the host computes
  wr32(c, 0x10, 0xfebf0000);
  wr32(c, 0x14, 0);
  EXPECT_EQ(rd32(c, 0x10), 0xfebf0004u);
}

TEST(PciConfigSpace, OnlyWritableBitsChange) {
  PciConfigSpace c(0x1b36, 0x0010, 0x010802, 0x4000);
  wr32(c, 0x00, 0xdeadbeef);
  EXPECT_EQ(rd32(c, 0x00), 0x00101b36u);
  uint16_t cmd = 0xffff;
  EXPECT_EQ(c.write(0x04, &cmd, 2), 0);
  EXPECT_TRUE(c.bus_master());
  EXPECT_TRUE(c.memory_enabled());
  uint16_t back = 0;
  ASSERT_EQ(c.read(0x04, &back, 2), 0);
  EXPECT_EQ(back, 0x0447);
  EXPECT_EQ(c.read(4095, &back, 2), -EINVAL);
  EXPECT_EQ(c.write(4096, &back, 1), -EINVAL);
}

TEST(PciConfigSpace, CapabilityListAndFlr) {
  PciConfigSpace c(0x1b36, 0x0010, 0x010802, 0x4000);
  uint8_t ptr = 0;
  ASSERT_EQ(c.read(0x34, &ptr, 1), 0);
  int seen_exp = 0;
  for (int hops = 0; ptr != 0 && hops < 8; ++hops) {
    uint8_t id = 0, next = 0;
    c.read(ptr, &id, 1);
    c.read(ptr + 1u, &next, 1);
    if (id == 0x10) {
      seen_exp = ptr;
      EXPECT_TRUE(rd32(c, ptr + 4u) & (1u << 28)) << "FLR capable";
    }
    ptr = next;
  }
  ASSERT_NE(seen_exp, 0);
  EXPECT_FALSE(c.take_flr_request());
  uint16_t devctl = 0x8000;
  c.write(seen_exp + 8u, &devctl, 2);
  EXPECT_TRUE(c.take_flr_request());
  EXPECT_FALSE(c.take_flr_request());
}

}  // namespace
}  // namespace pollux::emu::device
