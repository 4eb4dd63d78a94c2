// What the target's core needs of a transport (TCP today, RDMA later): its limits, its
// listeners, its share of each poll group, its options and statistics for the RPC server.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "driver/env/result.h"
#include "fabric/target/types.h"

namespace pollux::fabric::target {

class PollGroup;
using Status = Result<std::monostate>;
inline Status ok_status() {
  return std::monostate{};
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* trtype() const = 0;  // "TCP"
  virtual const TransportLimits& limits() const = 0;

  // Target thread. Listening twice on one address is refused by the caller, not here.
  virtual Status listen(const ListenAddress& address) = 0;
  virtual void stop_listening(const ListenAddress& address) = 0;
  // The port a listener asked for with trsvcid "0" (any) was bound to; 0: unknown.
  virtual uint16_t bound_port(const ListenAddress&) const { return 0; }

  // The poll group's thread: the transport starts / ends its part of the group (its poller,
  // buffers). remove_group runs once the group has no queue pair left.
  virtual void add_group(PollGroup& group) = 0;
  virtual void remove_group(PollGroup& group) = 0;

  // The parameters that create this transport again (nvmf_create_transport, save_config).
  virtual nlohmann::json options_json() const = 0;
  // The poll group's thread: this transport's counters in `group` (nvmf_get_stats).
  virtual nlohmann::json group_stats(PollGroup& group) const = 0;
};

}  // namespace pollux::fabric::target
