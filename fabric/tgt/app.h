// pollux-tgt's application: the bdev layer and the NVMe-oF target configured from an SPDK-shaped
// JSON file (its "bdev" and "nvmf" sections), and a JSON-RPC server offering the same methods
// plus queries (bdev_get_bdevs, bdev_get_iostat, nvmf_get_subsystems, nvmf_get_stats,
// framework_get_reactors, thread_get_pollers, thread_get_stats, save_config). Everything here
// runs on the application thread (the framework's first thread).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver/bdev/config.h"
#include "driver/event/framework.h"
#include "fabric/target/target.h"
#include "fabric/tgt/nvmf_config.h"
#include "fabric/tgt/rpc_server.h"

namespace pollux::metrics {
class BdevCollector;
}

namespace pollux::fabric::tgt {

struct AppOptions {
  std::string json;                              // configuration file ("": none)
  std::string rpc = "/var/tmp/pollux-tgt.sock";  // "": no RPC server
  std::string rpc_group;  // "": the socket is the owner's only (0600); else 0660 for the group
  bool bdev_metrics = false;                     // gather bdev statistics for --metrics
  net::Network* tcp_network = nullptr;  // where TCP transports listen (nullptr: the kernel's)
  // With rpc "": an RPC server without a socket, for in-process clients (tests, fuzzing).
  bool rpc_in_process = false;
  bdev::ManagerOptions bdev_options;  // the bdev layer's pools (tests make them small)
};

class TargetApp {
 public:
  explicit TargetApp(event::Framework& fw) : fw_(fw) {}
  ~TargetApp();

  // The application thread: builds everything and applies the configuration. An error is bad
  // input (exit status 2) unless its code says otherwise.
  Result<std::monostate> start(const AppOptions& o);
  // The application thread: stops the RPC server, the target (every association ends), unloads
  // the lvol stores, detaches NVMe bdev controllers; then done().
  void stop(std::function<void()> done);

  target::Target& target() const { return *tgt_; }
  bdev::Manager& bdevs() const { return *mgr_; }
  metrics::BdevCollector* bdev_collector() const { return collector_.get(); }
  // The configuration that starts this target again (save_config).
  nlohmann::json save_config() const;
  RpcServer* rpc() const { return rpc_.get(); }

 private:
  struct Record {
    std::string method;
    nlohmann::json params;
    std::vector<std::string> created;  // bdevs the entry made
  };
  void unload_lvol_stores(std::function<void()> then);
  void detach_and_finish(std::function<void()> done);
  void record_bdev_methods();
  void register_rpc_methods();
  void config_method_rpc(const std::string& method, const bdev::ConfigMethods& table);

  event::Framework& fw_;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<bdev::StandardModules> modules_;
  std::unique_ptr<target::Target> tgt_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<metrics::BdevCollector> collector_;
  bdev::ConfigMethods keyring_methods_;
  bdev::ConfigMethods bdev_methods_;
  bdev::ConfigMethods nvmf_methods_;
  NvmfResult nvmf_result_;
  std::vector<Record> records_;
};

}  // namespace pollux::fabric::tgt
