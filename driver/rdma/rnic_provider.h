// The Pollux RNIC provider: verbs (verbs.h) over the emulated NIC's PCI function, as a
// user-space provider does over a real one — WQEs written into rings in DMA memory, doorbells
// stored into the mapped doorbell page, completions read from the CQ ring by phase bit, set-up
// through the command mailbox (spec/rnic.h). It never includes emulator/ headers: it sees only
// a PciDevice (vfio-user in-process or over a socket; vfio-pci for hardware).
#pragma once

#include <memory>

#include "driver/env/memory_registry.h"
#include "driver/env/pci_device.h"
#include "driver/env/result.h"
#include "driver/rdma/verbs.h"

namespace pollux::rdma {

struct RnicOptions {
  // A lone work request's WQE also goes into the QP's push slot, so the NIC takes it with the
  // doorbell instead of reading the ring (spec/rnic.h, "push window"; mlx5's BlueFlame, which
  // its provider uses by default for one WQE). Off: every WQE is read from the ring by DMA.
  bool push_wqes = false;
};

// Enables the function (memory space, bus mastering), resets and enables the NIC, sets up the
// command mailbox and the event queue, and queries the device. Rings and the mailbox come
// from `registry` (which the PciDevice maps for DMA); MRs must lie in its regions too.
Result<std::unique_ptr<Context>> open_rnic(std::unique_ptr<env::PciDevice> pci,
                                           env::MemoryRegistry& registry,
                                           RnicOptions options = {});

}  // namespace pollux::rdma
