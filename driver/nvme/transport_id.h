// Transport IDs in SPDK's notation: "trtype:vfio-user traddr:/tmp/emu.sock",
// "trtype:pcie traddr:0000:01:00.0". Keys are case-insensitive and given once; values are kept
// as given.
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

  std::string to_string() const;
};

const char* to_string(TransportType t);
Result<TransportId> parse_transport_id(const std::string& text);

}  // namespace pollux::nvme
