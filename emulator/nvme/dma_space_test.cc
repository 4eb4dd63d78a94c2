#include "emulator/nvme/dma_space.h"

#include <gtest/gtest.h>

#include <vector>

namespace pollux::emu::nvme {
namespace {

TEST(RegionDmaSpace, TranslatesWithinOneRegionOnly) {
  RegionDmaSpace d;
  std::vector<uint8_t> a(4096), b(8192);
  ASSERT_TRUE(d.add_region(0x10000, a.data(), a.size()));
  ASSERT_TRUE(d.add_region(0x11000, b.data(), b.size()));  // adjacent IOVA, different memory
  EXPECT_EQ(d.translate(0x10000, 4096), a.data());
  EXPECT_EQ(d.translate(0x10ff0, 16), a.data() + 0xff0);
  EXPECT_EQ(d.translate(0x11000 + 100, 8092), b.data() + 100);
  EXPECT_EQ(d.translate(0x10ff0, 32), nullptr);  // spans two regions
  EXPECT_EQ(d.translate(0xffff, 2), nullptr);
  EXPECT_EQ(d.translate(0x13000, 1), nullptr);
  EXPECT_EQ(d.translate(0x11000, 8193), nullptr);
  EXPECT_EQ(d.translate(~0ull - 4, 16), nullptr);  // wraps
  EXPECT_FALSE(d.add_region(0x10800, a.data(), 16));  // overlaps
  EXPECT_FALSE(d.add_region(0x0f000, a.data(), 0x1001));
  EXPECT_FALSE(d.add_region(0x20000, a.data(), 0));
  ASSERT_TRUE(d.remove_region(0x10000));
  EXPECT_FALSE(d.remove_region(0x10000));
  EXPECT_EQ(d.translate(0x10000, 1), nullptr);
  EXPECT_EQ(d.region_count(), 1u);
  ASSERT_TRUE(d.add_host_buffer(a.data(), a.size()));
  EXPECT_EQ(d.translate(reinterpret_cast<uintptr_t>(a.data()) + 5, 10), a.data() + 5);
  d.clear();
  EXPECT_EQ(d.translate(0x11000, 1), nullptr);
}

}  // namespace
}  // namespace pollux::emu::nvme
