// A toy PCI device for testing the vfio-user server and client (testonly).
//
// BAR0 (8 KiB): registers in the first 4 KiB (trapped: REGION_READ/WRITE), a "doorbell" page
// at 0x1000 backed by a memfd and offered as a sparse-mmap area (shared by both sides).
// Config space: vendor/device id, class code 0x010802 (NVMe). The "DMA engine" copies
// DMA_LEN bytes from DMA_SRC to DMA_DST (IOVAs) through Server::translate().
#pragma once

#include <cstddef>
#include <cstdint>

#include "emulator/vfio_user/server.h"

namespace pollux::emu::vfio_user {

class ToyDevice final : public DeviceModel {
 public:
  // Register offsets in BAR0 (32-bit unless noted).
  static constexpr uint32_t kRegId = 0x00;          // RO kIdValue
  static constexpr uint32_t kRegScratch = 0x04;     // RW, 0 after reset
  static constexpr uint32_t kRegDmaSrc = 0x08;      // 64-bit IOVA
  static constexpr uint32_t kRegDmaDst = 0x10;      // 64-bit IOVA
  static constexpr uint32_t kRegDmaLen = 0x18;
  static constexpr uint32_t kRegDmaCtrl = 0x1c;     // write 1: copy now
  static constexpr uint32_t kRegDmaStatus = 0x20;   // RO kDma*
  static constexpr uint32_t kRegDbSelect = 0x24;    // doorbell-page offset for kRegDbValue
  static constexpr uint32_t kRegDbValue = 0x28;     // the device's view of that doorbell word
  static constexpr uint32_t kRegResets = 0x2c;      // RO number of resets
  static constexpr uint32_t kRegDmaMaps = 0x30;     // RO server's DMA mapping count
  static constexpr uint32_t kIdValue = 0x504f4c58;  // "POLX"
  static constexpr uint32_t kDmaIdle = 0, kDmaDone = 1, kDmaFault = 2;

  static constexpr uint64_t kBar0Size = 0x2000;
  static constexpr uint64_t kDoorbellOffset = 0x1000;
  static constexpr uint64_t kDoorbellSize = 0x1000;
  static constexpr uint64_t kConfigSize = 256;
  static constexpr uint16_t kVendorId = 0x1b36;
  static constexpr uint16_t kDeviceId = 0x0010;
  static constexpr uint32_t kClassCode = 0x010802;

  ToyDevice();
  ~ToyDevice() override;
  bool ok() const { return doorbells_ != nullptr; }
  void attach_server(Server* server) { server_ = server; }

  RegionDesc region(uint32_t index) const override;
  int region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) override;
  int region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) override;
  void on_reset() override;
  uint32_t irq_count(uint32_t index) const override;
  void on_dma_unmap(uint64_t iova, uint64_t size) override;

  uint64_t unmaps() const { return unmaps_; }

 private:
  uint32_t reg32(uint32_t off) const;
  void run_dma();

  int memfd_ = -1;
  uint8_t* bar0_file_ = nullptr;   // the whole memfd (kBar0Size)
  uint8_t* doorbells_ = nullptr;   // bar0_file_ + kDoorbellOffset
  uint8_t regs_[kDoorbellOffset] = {};
  uint8_t config_[kConfigSize] = {};
  Server* server_ = nullptr;
  uint64_t resets_ = 0;
  uint64_t unmaps_ = 0;
};

}  // namespace pollux::emu::vfio_user
