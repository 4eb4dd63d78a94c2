#include "fabric/rdma/device.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "driver/env/vfio_user_client.h"
#include "driver/rdma/ibverbs_provider.h"
#include "driver/rdma/rnic_provider.h"
#include "fabric/net/posix.h"
#include "fabric/rdma/rdma_cm.h"

namespace pollux::fabric::rdma {

namespace {

// librdmacm's own contexts (rdma_get_devices): the QPs must live on the context its ids use.
Result<std::unique_ptr<pollux::rdma::Context>> open_ibverbs_for_cm(const std::string& name,
                                                                   const std::string& address) {
  int n = 0;
  ibv_context** list = rdma_get_devices(&n);
  if (list == nullptr || n == 0) {
    const int err = errno != 0 ? errno : ENODEV;
    if (list != nullptr) rdma_free_devices(list);
    return make_error(ENODEV, address + ": no RDMA devices for rdma_cm (" + std::strerror(err) +
                                  "; are rdma_ucm and the device's driver loaded?)");
  }
  std::string have;
  for (int i = 0; i < n; ++i) {
    const char* dev = ibv_get_device_name(list[i]->device);
    if (name.empty() || name == dev) {
      auto ctx = pollux::rdma::wrap_ibverbs(
          list[i], [](void* l) { rdma_free_devices(static_cast<ibv_context**>(l)); }, list);
      if (!ctx) return make_error(ctx.error().code, address + ": " + ctx.error().message);
      return std::move(ctx).value();
    }
    have += (have.empty() ? "" : ", ") + std::string(dev);
  }
  rdma_free_devices(list);
  return make_error(ENODEV,
                    address + ": no libibverbs device '" + name + "' (devices: " + have + ")");
}

}  // namespace

Result<std::unique_ptr<pollux::rdma::Context>> open_rdma_device(const std::string& address,
                                                                env::MemoryRegistry& registry) {
  if (address.rfind("ibverbs:", 0) == 0) return open_ibverbs_for_cm(address.substr(8), address);
  if (address.rfind("vfio-user:", 0) != 0)
    return make_error(EINVAL, "RDMA device '" + address +
                                  "': vfio-user:/path.sock (a Pollux RNIC) or ibverbs:NAME (a "
                                  "libibverbs device)");
  auto pci = env::VfioUserDevice::connect(address, registry);
  if (!pci) return make_error(pci.error().code, address + ": " + pci.error().message);
  auto ctx = pollux::rdma::open_rnic(std::move(pci).value(), registry);
  if (!ctx) return make_error(ctx.error().code, address + ": " + ctx.error().message);
  return std::move(ctx).value();
}

Result<std::unique_ptr<ConnectionManager>> connection_manager_for(pollux::rdma::Context& ctx,
                                                                  net::Network* cm_network,
                                                                  const QpTiming& t) {
  if (pollux::rdma::ibverbs_context(ctx) != nullptr) return make_rdma_cm(ctx, t);
  return stream_cm(cm_network != nullptr ? *cm_network : net::posix_network());
}

}  // namespace pollux::fabric::rdma
