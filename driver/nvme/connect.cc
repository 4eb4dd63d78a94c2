#include "driver/nvme/connect.h"

#include "driver/env/vfio_pci.h"
#include "driver/env/vfio_user_client.h"

namespace pollux::nvme {

Result<std::unique_ptr<Controller>> connect(const TransportId& trid, ControllerOptions options) {
  env::MemoryRegistry& registry =
      options.registry ? *options.registry : env::MemoryRegistry::global();
  switch (trid.trtype) {
    case TransportType::kVfioUser: {
      auto dev = env::VfioUserDevice::connect("vfio-user:" + trid.traddr, registry);
      if (!dev) return dev.error();
      return Controller::attach(std::move(dev).value(), options);
    }
    case TransportType::kPcie: {
      auto dev = env::VfioPciDevice::open(trid.traddr, registry);
      if (!dev) return dev.error();
      return Controller::attach(std::move(dev).value(), options);
    }
    case TransportType::kTcp:
    case TransportType::kRdma:
      return make_error(ENOTSUP, std::string("trtype:") + to_string(trid.trtype) +
                                     " host transport is not built yet");
  }
  return make_error(EINVAL, "unknown transport type");
}

}  // namespace pollux::nvme
