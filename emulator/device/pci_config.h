// PCI configuration space of the emulated NVMe function (type 0 header): ids, class code
// 01-08-02, a 64-bit memory BAR0 with the standard sizing protocol, and a capability list
// (power management, PCI Express endpoint with FLR). Writes touch only writable bits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "spec/pci.h"

namespace pollux::emu::device {

class PciConfigSpace {
 public:
  static constexpr std::size_t kSize = 4096;  // PCIe extended config space
  static constexpr uint8_t kCapPm = 0x40;
  static constexpr uint8_t kCapExp = 0x50;

  PciConfigSpace(uint16_t vendor, uint16_t device, uint32_t class_code, uint64_t bar0_size);

  // 0 or -EINVAL (out of range). Any width; unaligned accesses are allowed.
  int read(uint64_t offset, void* buf, std::size_t len) const;
  int write(uint64_t offset, const void* buf, std::size_t len);

  uint16_t command() const { return get16(spec::pci::kCommand); }
  bool bus_master() const { return command() & spec::pci::command::kBusMaster; }
  bool memory_enabled() const { return command() & spec::pci::command::kMemorySpace; }
  bool intx_disabled() const { return command() & spec::pci::command::kInterruptDisable; }
  // True once since the last call if the host requested a function-level reset through the
  // PCI Express Device Control register.
  bool take_flr_request();
  uint64_t bar0_size() const { return bar0_size_; }

 private:
  uint16_t get16(std::size_t off) const { return static_cast<uint16_t>(bytes_[off] | bytes_[off + 1] << 8); }
  void set16(std::size_t off, uint16_t v);
  void set32(std::size_t off, uint32_t v);
  void write_byte(std::size_t off, uint8_t v);

  std::array<uint8_t, kSize> bytes_{};
  uint64_t bar0_size_;
  bool flr_requested_ = false;
};

}  // namespace pollux::emu::device
