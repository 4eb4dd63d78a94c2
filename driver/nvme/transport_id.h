// Transport IDs in SPDK's notation: "trtype:vfio-user traddr:/tmp/emu.sock",
// "trtype:pcie traddr:0000:01:00.0", "trtype:tcp adrfam:ipv4 traddr:10.0.0.1 trsvcid:4420
// subnqn:nqn.2016-06.io.spdk:cnode1" (plus hdgst:1 / ddgst:1 for NVMe/TCP digests). Keys are
// case-insensitive and given once; values are kept as given.
#pragma once

#include <string>

#include "driver/env/result.h"

namespace pollux::nvme {

enum class TransportType { kVfioUser, kPcie, kTcp, kRdma };

struct TransportId {
  TransportType trtype = TransportType::kVfioUser;
  std::string traddr;
  std::string trsvcid;  // port, for fabrics
  std::string subnqn;
  // NVMe/TCP digests to ask for (Pollux's keys hdgst:1 / ddgst:1; SPDK takes them as options).
  bool header_digest = false;
  bool data_digest = false;

  std::string to_string() const;
};

const char* to_string(TransportType t);
Result<TransportId> parse_transport_id(const std::string& text);

}  // namespace pollux::nvme
