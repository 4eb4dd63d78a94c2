// PCI configuration space (type 0 header) fields the NVMe driver and the emulated function
// share: the command register and its bits (PCI Local Bus 3.0, 6.2.2). No behaviour.
#pragma once

#include <cstdint>

namespace pollux::spec::pci {

inline constexpr uint32_t kCommand = 0x04;  // 16 bits

namespace command {
inline constexpr uint16_t kIoSpace = 1u << 0;
inline constexpr uint16_t kMemorySpace = 1u << 1;
inline constexpr uint16_t kBusMaster = 1u << 2;
// Interrupt Disable: the function must not assert INTx. A polled host sets it: a device may
// otherwise try to signal INTx it has no way to deliver (SPDK's vfio-user target then sets
// CSTS.CFS).
inline constexpr uint16_t kInterruptDisable = 1u << 10;
}  // namespace command

}  // namespace pollux::spec::pci
