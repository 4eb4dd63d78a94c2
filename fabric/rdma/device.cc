#include "fabric/rdma/device.h"

#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"

namespace pollux::fabric::rdma {

Result<std::unique_ptr<pollux::rdma::Context>> open_rdma_device(const std::string& address,
                                                                env::MemoryRegistry& registry) {
  if (address.rfind("vfio-user:", 0) != 0)
    return make_error(EINVAL, "RDMA device '" + address +
                                  "': only a Pollux RNIC (vfio-user:/path.sock) is supported");
  auto pci = env::VfioUserDevice::connect(address, registry);
  if (!pci) return make_error(pci.error().code, address + ": " + pci.error().message);
  auto ctx = pollux::rdma::open_rnic(std::move(pci).value(), registry);
  if (!ctx) return make_error(ctx.error().code, address + ": " + ctx.error().message);
  return std::move(ctx).value();
}

}  // namespace pollux::fabric::rdma
