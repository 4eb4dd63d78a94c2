// Attach a controller by transport ID: picks the PciDevice backend for the transport type
// and runs the controller's initialisation.
#pragma once

#include <functional>
#include <memory>

#include "driver/env/result.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/transport_id.h"

namespace pollux::nvme {

// vfio-user: connects to the socket at traddr. pcie: opens the PCI function at traddr through
// vfio-pci (driver/env/vfio_pci.h; the device must be bound to vfio-pci: tools/pollux-setup).
// tcp, rdma: the fabrics transports, which live above the driver (fabric/) and register here;
// a program that links one in (//fabric/tcp:host) can connect with it.
Result<std::unique_ptr<Controller>> connect(const TransportId& trid,
                                            ControllerOptions options = {});

using TransportFactory = std::function<Result<std::unique_ptr<Transport>>(
    const TransportId& trid, env::MemoryRegistry& registry)>;
void register_transport(TransportType type, TransportFactory factory);

}  // namespace pollux::nvme
