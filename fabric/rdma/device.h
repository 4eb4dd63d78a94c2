// Opens an RDMA device by address, for programs (pollux-tgt, pollux-perf) whose configuration
// names one, and picks the connection manager that goes with it:
//   "vfio-user:/path.sock"  a Pollux RNIC behind a vfio-user socket (pollux-rnic --dir DIR
//                           serves DIR/rnicK.sock); connections by the stream CM (cm.h) over
//                           the kernel's TCP (or the Network given)
//   "ibverbs:NAME"          libibverbs device NAME ("rxe0", "mlx5_0"); connections by
//                           librdmacm (rdma_cm.h), so Linux's nvme-rdma/nvmet-rdma are peers
//   "ibverbs:"              the machine's first libibverbs device
#pragma once

#include <memory>
#include <string>

#include "driver/env/memory_registry.h"
#include "driver/env/result.h"
#include "driver/rdma/verbs.h"
#include "fabric/net/socket.h"
#include "fabric/rdma/cm.h"

namespace pollux::fabric::rdma {

// Set-up path. registry: the memory the device must reach (its regions are DMA-mapped; a
// libibverbs device registers MRs on any memory and needs none).
Result<std::unique_ptr<pollux::rdma::Context>> open_rdma_device(const std::string& address,
                                                                env::MemoryRegistry& registry);

// The connection manager for connections on `ctx`: rdma_cm for a libibverbs device, else the
// stream CM over cm_network (nullptr: the kernel's TCP). t: what rdma_cm negotiates.
Result<std::unique_ptr<ConnectionManager>> connection_manager_for(pollux::rdma::Context& ctx,
                                                                  net::Network* cm_network,
                                                                  const QpTiming& t);

}  // namespace pollux::fabric::rdma
