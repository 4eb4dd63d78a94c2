// Attach a controller by transport ID: picks the PciDevice backend for the transport type
// and runs the controller's initialisation.
#pragma once

#include <memory>

#include "driver/env/result.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/transport_id.h"

namespace pollux::nvme {

// vfio-user: connects to the socket at traddr. pcie: opens the PCI function at traddr through
// vfio-pci (driver/env/vfio_pci.h; the device must be bound to vfio-pci: tools/pollux-setup).
Result<std::unique_ptr<Controller>> connect(const TransportId& trid,
                                            ControllerOptions options = {});

}  // namespace pollux::nvme
