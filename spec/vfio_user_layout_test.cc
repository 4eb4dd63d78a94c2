// spec/vfio_user.h against the vfio-user specification's tables and <linux/vfio.h>.
#include "spec/vfio_user.h"

#include <linux/vfio.h>

#include <gtest/gtest.h>

namespace pollux::spec::vfio_user {
namespace {

TEST(VfioUserSpec, StructSizesMatchTheSpecTables) {
  EXPECT_EQ(sizeof(Header), 16u);
  EXPECT_EQ(sizeof(Version), 4u);
  EXPECT_EQ(sizeof(DmaMap), 32u);
  EXPECT_EQ(sizeof(DmaUnmap), 24u);
  EXPECT_EQ(sizeof(DeviceInfo), 16u);
  EXPECT_EQ(sizeof(RegionInfo), 32u);
  EXPECT_EQ(sizeof(CapHeader), 8u);
  EXPECT_EQ(sizeof(SparseMmapCap), 16u);
  EXPECT_EQ(sizeof(SparseMmapArea), 16u);
  EXPECT_EQ(sizeof(RegionIoFds), 16u);
  EXPECT_EQ(sizeof(SubRegionIoFd), 40u);
  EXPECT_EQ(sizeof(IrqInfo), 16u);
  EXPECT_EQ(sizeof(IrqSet), 20u);
  EXPECT_EQ(sizeof(RegionAccess), 16u);
  EXPECT_EQ(sizeof(RegionWriteMultiEntry), 24u);
  EXPECT_EQ(sizeof(DmaAccess), 16u);
  EXPECT_EQ(sizeof(DeviceFeature), 8u);
  EXPECT_EQ(sizeof(MigData), 8u);
}

TEST(VfioUserSpec, HeaderFieldOffsets) {
  EXPECT_EQ(offsetof(Header, msg_id), 0u);
  EXPECT_EQ(offsetof(Header, command), 2u);
  EXPECT_EQ(offsetof(Header, msg_size), 4u);
  EXPECT_EQ(offsetof(Header, flags), 8u);
  EXPECT_EQ(offsetof(Header, error), 12u);
  EXPECT_EQ(offsetof(IrqSet, count), 16u);
  EXPECT_EQ(offsetof(RegionAccess, region), 8u);
  EXPECT_EQ(offsetof(RegionAccess, count), 12u);
  EXPECT_EQ(offsetof(SubRegionIoFd, fd_index), 16u);
  EXPECT_EQ(offsetof(SubRegionIoFd, datamatch_or_user_data), 32u);
}

TEST(VfioUserSpec, CommandNumbersFollowTheSpecTable) {
  EXPECT_EQ(cmd::kVersion, 1);
  EXPECT_EQ(cmd::kDmaMap, 2);
  EXPECT_EQ(cmd::kDmaUnmap, 3);
  EXPECT_EQ(cmd::kDeviceGetInfo, 4);
  EXPECT_EQ(cmd::kDeviceGetRegionInfo, 5);
  EXPECT_EQ(cmd::kDeviceGetRegionIoFds, 6);
  EXPECT_EQ(cmd::kDeviceGetIrqInfo, 7);
  EXPECT_EQ(cmd::kDeviceSetIrqs, 8);
  EXPECT_EQ(cmd::kRegionRead, 9);
  EXPECT_EQ(cmd::kRegionWrite, 10);
  EXPECT_EQ(cmd::kDmaRead, 11);
  EXPECT_EQ(cmd::kDmaWrite, 12);
  EXPECT_EQ(cmd::kDeviceReset, 13);
  EXPECT_EQ(cmd::kRegionWriteMulti, 15);
  EXPECT_EQ(cmd::kDeviceFeature, 16);
  EXPECT_EQ(cmd::kMigDataRead, 17);
  EXPECT_EQ(cmd::kMigDataWrite, 18);
  EXPECT_EQ(flags::kTypeReply, 1u);
  EXPECT_EQ(flags::kNoReply, 0x10u);
  EXPECT_EQ(flags::kError, 0x20u);
}

TEST(VfioUserSpec, VfioConstantsAreTheKernelOnes) {
  EXPECT_EQ(sizeof(RegionInfo), sizeof(vfio_region_info));
  EXPECT_EQ(sizeof(CapHeader), sizeof(vfio_info_cap_header));
  EXPECT_EQ(sizeof(SparseMmapCap), sizeof(vfio_region_info_cap_sparse_mmap));
  EXPECT_EQ(sizeof(SparseMmapArea), sizeof(vfio_region_sparse_mmap_area));
  EXPECT_EQ(sizeof(IrqInfo), sizeof(vfio_irq_info));
  EXPECT_EQ(sizeof(IrqSet), sizeof(vfio_irq_set));
  EXPECT_EQ(sizeof(DeviceInfo), offsetof(vfio_device_info, num_irqs) + 4);  // kernel adds caps

  EXPECT_EQ(kDeviceFlagReset, static_cast<uint32_t>(VFIO_DEVICE_FLAGS_RESET));
  EXPECT_EQ(kDeviceFlagPci, static_cast<uint32_t>(VFIO_DEVICE_FLAGS_PCI));
  EXPECT_EQ(kRegionFlagRead, static_cast<uint32_t>(VFIO_REGION_INFO_FLAG_READ));
  EXPECT_EQ(kRegionFlagWrite, static_cast<uint32_t>(VFIO_REGION_INFO_FLAG_WRITE));
  EXPECT_EQ(kRegionFlagMmap, static_cast<uint32_t>(VFIO_REGION_INFO_FLAG_MMAP));
  EXPECT_EQ(kRegionFlagCaps, static_cast<uint32_t>(VFIO_REGION_INFO_FLAG_CAPS));
  EXPECT_EQ(kCapSparseMmap, VFIO_REGION_INFO_CAP_SPARSE_MMAP);
  EXPECT_EQ(kCapType, VFIO_REGION_INFO_CAP_TYPE);
  EXPECT_EQ(kIrqInfoEventfd, static_cast<uint32_t>(VFIO_IRQ_INFO_EVENTFD));
  EXPECT_EQ(kIrqInfoMaskable, static_cast<uint32_t>(VFIO_IRQ_INFO_MASKABLE));
  EXPECT_EQ(kIrqInfoAutomasked, static_cast<uint32_t>(VFIO_IRQ_INFO_AUTOMASKED));
  EXPECT_EQ(kIrqInfoNoresize, static_cast<uint32_t>(VFIO_IRQ_INFO_NORESIZE));
  EXPECT_EQ(kIrqSetDataNone, static_cast<uint32_t>(VFIO_IRQ_SET_DATA_NONE));
  EXPECT_EQ(kIrqSetDataBool, static_cast<uint32_t>(VFIO_IRQ_SET_DATA_BOOL));
  EXPECT_EQ(kIrqSetDataEventfd, static_cast<uint32_t>(VFIO_IRQ_SET_DATA_EVENTFD));
  EXPECT_EQ(kIrqSetActionMask, static_cast<uint32_t>(VFIO_IRQ_SET_ACTION_MASK));
  EXPECT_EQ(kIrqSetActionUnmask, static_cast<uint32_t>(VFIO_IRQ_SET_ACTION_UNMASK));
  EXPECT_EQ(kIrqSetActionTrigger, static_cast<uint32_t>(VFIO_IRQ_SET_ACTION_TRIGGER));

  EXPECT_EQ(region::kConfig, static_cast<uint32_t>(VFIO_PCI_CONFIG_REGION_INDEX));
  EXPECT_EQ(region::kRom, static_cast<uint32_t>(VFIO_PCI_ROM_REGION_INDEX));
  EXPECT_EQ(region::kVga, static_cast<uint32_t>(VFIO_PCI_VGA_REGION_INDEX));
  EXPECT_EQ(region::kNumPciRegions, static_cast<uint32_t>(VFIO_PCI_NUM_REGIONS));
  EXPECT_EQ(irq::kMsix, static_cast<uint32_t>(VFIO_PCI_MSIX_IRQ_INDEX));
  EXPECT_EQ(irq::kReq, static_cast<uint32_t>(VFIO_PCI_REQ_IRQ_INDEX));
  EXPECT_EQ(irq::kNumPciIrqs, static_cast<uint32_t>(VFIO_PCI_NUM_IRQS));
}

}  // namespace
}  // namespace pollux::spec::vfio_user
