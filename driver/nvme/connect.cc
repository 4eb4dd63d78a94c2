#include "driver/nvme/connect.h"

#include "driver/env/vfio_pci.h"
#include "driver/env/vfio_user_client.h"

#include <map>
#include <mutex>

namespace pollux::nvme {

namespace {
std::mutex g_mu;
std::map<TransportType, TransportFactory>& factories() {
  static std::map<TransportType, TransportFactory> f;
  return f;
}
}  // namespace

void register_transport(TransportType type, TransportFactory factory) {
  std::lock_guard lock(g_mu);
  factories()[type] = std::move(factory);
}

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
    case TransportType::kRdma: {
      TransportFactory make;
      {
        std::lock_guard lock(g_mu);
        auto it = factories().find(trid.trtype);
        if (it != factories().end()) make = it->second;
      }
      if (!make) {
        return make_error(ENOTSUP, std::string("trtype:") + to_string(trid.trtype) +
                                       ": this program was built without that host transport");
      }
      auto t = make(trid, registry);
      if (!t) return t.error();
      return Controller::attach(std::move(t).value(), options);
    }
  }
  return make_error(EINVAL, "unknown transport type");
}

}  // namespace pollux::nvme
