// Opens an RDMA device by address, for programs (pollux-tgt, pollux-perf) whose configuration
// names one: "vfio-user:/path.sock" is a Pollux RNIC behind a vfio-user socket (pollux-rnic
// --dir DIR serves DIR/rnicK.sock). Real NICs (libibverbs) are not supported yet.
#pragma once

#include <memory>
#include <string>

#include "driver/env/memory_registry.h"
#include "driver/env/result.h"
#include "driver/rdma/verbs.h"

namespace pollux::fabric::rdma {

// Set-up path. registry: the memory the device must reach (its regions are DMA-mapped).
Result<std::unique_ptr<pollux::rdma::Context>> open_rdma_device(const std::string& address,
                                                                env::MemoryRegistry& registry);

}  // namespace pollux::fabric::rdma
