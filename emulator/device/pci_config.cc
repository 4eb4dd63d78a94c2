#include "emulator/device/pci_config.h"

#include <cerrno>

namespace pollux::emu::device {

void PciConfigSpace::set16(std::size_t off, uint16_t v) {
  bytes_[off] = static_cast<uint8_t>(v);
  bytes_[off + 1] = static_cast<uint8_t>(v >> 8);
}

void PciConfigSpace::set32(std::size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes_[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

PciConfigSpace::PciConfigSpace(uint16_t vendor, uint16_t device, uint32_t class_code,
                               uint64_t bar0_size)
    : bar0_size_(bar0_size) {
  set16(0x00, vendor);
  set16(0x02, device);
  set16(0x06, 0x0010);                 // status: capabilities list
  bytes_[0x08] = 0x02;                 // revision
  bytes_[0x09] = static_cast<uint8_t>(class_code);        // prog-if 02: NVM Express
  bytes_[0x0a] = static_cast<uint8_t>(class_code >> 8);   // subclass 08: non-volatile memory
  bytes_[0x0b] = static_cast<uint8_t>(class_code >> 16);  // class 01: mass storage
  set32(0x10, 0x4);                    // BAR0: memory, 64-bit, not prefetchable
  set16(0x2c, vendor);                 // subsystem vendor / id
  set16(0x2e, device);
  bytes_[0x34] = kCapPm;               // capabilities pointer
  bytes_[0x3d] = 0x01;                 // interrupt pin INTA#
  // Power management capability (PCI PM 1.2), D0 only.
  bytes_[kCapPm] = 0x01;
  bytes_[kCapPm + 1] = kCapExp;
  set16(kCapPm + 2, 0x0003);
  // PCI Express capability, version 2, endpoint; Device Capabilities: FLR (bit 28),
  // max payload 256 B.
  bytes_[kCapExp] = 0x10;
  bytes_[kCapExp + 1] = 0x00;
  set16(kCapExp + 2, 0x0002);
  set32(kCapExp + 4, 1u << 28 | 0x1);
}

int PciConfigSpace::read(uint64_t offset, void* buf, std::size_t len) const {
  if (offset > kSize || len > kSize - offset) return -EINVAL;
  auto* out = static_cast<uint8_t*>(buf);
  for (std::size_t i = 0; i < len; ++i) out[i] = bytes_[offset + i];
  return 0;
}

void PciConfigSpace::write_byte(std::size_t off, uint8_t v) {
  switch (off) {
    case 0x04:  // command: I/O, memory, bus master, ...
      bytes_[off] = v & 0x47;
      return;
    case 0x05:  // command: interrupt disable
      bytes_[off] = v & 0x04;
      return;
    case 0x0c:  // cache line size
    case 0x0d:  // latency timer
    case 0x3c:  // interrupt line
      bytes_[off] = v;
      return;
    case 0x10: case 0x11: case 0x12: case 0x13:
    case 0x14: case 0x15: case 0x16: case 0x17: {
      // BAR0/1 form one 64-bit BAR: address bits below the size read back as 0, so writing
      // all ones and reading back yields the size (the standard sizing protocol).
      bytes_[off] = v;
      uint64_t bar = 0;
      for (int i = 0; i < 8; ++i) bar |= uint64_t{bytes_[0x10 + i]} << (8 * i);
      bar = (bar & ~(bar0_size_ - 1)) | 0x4;
      for (int i = 0; i < 8; ++i) bytes_[0x10 + i] = static_cast<uint8_t>(bar >> (8 * i));
      return;
    }
    case kCapExp + 9:  // Device Control, high byte: bit 15 = initiate FLR
      if (v & 0x80) flr_requested_ = true;
      bytes_[off] = v & 0x7f;
      return;
    case kCapExp + 8:  // Device Control, low byte
      bytes_[off] = v;
      return;
    default:
      return;  // read-only
  }
}

int PciConfigSpace::write(uint64_t offset, const void* buf, std::size_t len) {
  if (offset > kSize || len > kSize - offset) return -EINVAL;
  const auto* in = static_cast<const uint8_t*>(buf);
  for (std::size_t i = 0; i < len; ++i) write_byte(offset + i, in[i]);
  return 0;
}

bool PciConfigSpace::take_flr_request() {
  const bool r = flr_requested_;
  flr_requested_ = false;
  return r;
}

}  // namespace pollux::emu::device
