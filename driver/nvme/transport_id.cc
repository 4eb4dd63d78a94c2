#include "driver/nvme/transport_id.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

namespace pollux::nvme {
namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

const char* to_string(TransportType t) {
  switch (t) {
    case TransportType::kVfioUser: return "vfio-user";
    case TransportType::kPcie: return "pcie";
    case TransportType::kTcp: return "tcp";
    case TransportType::kRdma: return "rdma";
  }
  return "?";
}

std::string TransportId::to_string() const {
  std::string s = std::string("trtype:") + nvme::to_string(trtype) + " traddr:" + traddr;
  if (!trsvcid.empty()) s += " trsvcid:" + trsvcid;
  if (!subnqn.empty()) s += " subnqn:" + subnqn;
  if (header_digest) s += " hdgst:1";
  if (data_digest) s += " ddgst:1";
  return s;
}

Result<TransportId> parse_transport_id(const std::string& text) {
  TransportId id;
  bool have_type = false;
  std::set<std::string> seen;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const auto colon = word.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == word.size())
      return make_error(EINVAL, "transport id: '" + word + "' is not key:value");
    const std::string key = lower(word.substr(0, colon));
    // Which of two values was meant is anyone's guess: refused rather than the last one won.
    if (!seen.insert(key).second) {
      return make_error(EINVAL, "transport id '" + text + "': " + key + " given twice");
    }
    const std::string value = word.substr(colon + 1);
    if (key == "trtype") {
      const std::string t = lower(value);
      if (t == "vfio-user" || t == "vfiouser") id.trtype = TransportType::kVfioUser;
      else if (t == "pcie") id.trtype = TransportType::kPcie;
      else if (t == "tcp") id.trtype = TransportType::kTcp;
      else if (t == "rdma") id.trtype = TransportType::kRdma;
      else return make_error(EINVAL, "transport id: unknown trtype '" + value + "'");
      have_type = true;
    } else if (key == "traddr") {
      id.traddr = value;
    } else if (key == "trsvcid") {
      id.trsvcid = value;
    } else if (key == "subnqn") {
      id.subnqn = value;
    } else if (key == "hdgst" || key == "ddgst") {
      if (value != "0" && value != "1") {
        return make_error(EINVAL, "transport id: " + key + ":" + value + " (expected 0 or 1)");
      }
      (key == "hdgst" ? id.header_digest : id.data_digest) = value == "1";
    } else if (key != "adrfam") {
      return make_error(EINVAL, "transport id: unknown key '" + key + "'");
    }
  }
  if (!have_type) return make_error(EINVAL, "transport id '" + text + "' lacks trtype");
  if (id.traddr.empty()) return make_error(EINVAL, "transport id '" + text + "' lacks traddr");
  return id;
}

}  // namespace pollux::nvme
