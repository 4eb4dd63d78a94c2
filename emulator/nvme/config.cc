#include "emulator/nvme/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace pollux::emu::nvme {
namespace {

Error err(std::string msg) { return Error{std::move(msg)}; }

std::string where(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return "";
  return " (line " + std::to_string(m.line + 1) + ")";
}

Result<uint64_t> get_uint(const YAML::Node& n, const std::string& field, uint64_t min,
                          uint64_t max) {
  if (!n.IsScalar()) return err(field + ": expected an integer" + where(n));
  const std::string s = n.Scalar();
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    return err(field + ": '" + s + "' is not a non-negative integer" + where(n));
  }
  if (v < min || v > max) {
    return err(field + ": " + s + " is out of range [" + std::to_string(min) + ", " +
               std::to_string(max) + "]" + where(n));
  }
  return v;
}

Result<bool> get_bool(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return err(field + ": expected true or false" + where(n));
  const std::string& s = n.Scalar();
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  return err(field + ": '" + s + "' is not a boolean (true/false)" + where(n));
}

Result<std::string> get_string(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return err(field + ": expected a string" + where(n));
  return n.Scalar();
}

Status check_keys(const YAML::Node& map, const std::string& prefix,
                  const std::set<std::string>& allowed) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return err(prefix + key + ": unknown key (expected one of: " + list + ")" +
                 where(kv.first));
    }
  }
  return Status::Ok();
}

bool printable_ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Result<ControllerConfig> parse_root(const YAML::Node& root) {
  ControllerConfig c;
  if (!root.IsMap()) return err("config: the document must be a mapping with keys controller, namespaces");
  if (Status s = check_keys(root, "", {"controller", "namespaces"}); !s) return Error{s.error()};

  if (const YAML::Node ctrl = root["controller"]) {
    if (!ctrl.IsMap()) return err("controller: expected a mapping" + where(ctrl));
    if (Status s = check_keys(ctrl, "controller.",
                              {"serial", "model", "firmware", "max_queue_entries",
                               "max_io_queue_pairs", "mdts", "doorbell_stride",
                               "volatile_write_cache", "ready_delay_polls",
                               "weighted_round_robin"});
        !s) {
      return Error{s.error()};
    }
#define POLLUX_STR(key)                                                      \
  if (const YAML::Node n = ctrl[#key]) {                                     \
    auto r = get_string(n, "controller." #key);                              \
    if (!r) return Error{r.error()};                                         \
    c.key = r.value();                                                       \
  }
#define POLLUX_UINT(key, lo, hi)                                             \
  if (const YAML::Node n = ctrl[#key]) {                                     \
    auto r = get_uint(n, "controller." #key, lo, hi);                        \
    if (!r) return Error{r.error()};                                         \
    c.key = static_cast<decltype(c.key)>(r.value());                         \
  }
    POLLUX_STR(serial)
    POLLUX_STR(model)
    POLLUX_STR(firmware)
    POLLUX_UINT(max_queue_entries, 2, 65536)
    POLLUX_UINT(max_io_queue_pairs, 1, 65535)
    POLLUX_UINT(mdts, 0, 15)
    POLLUX_UINT(doorbell_stride, 0, 15)
    POLLUX_UINT(ready_delay_polls, 0, 1000000000)
#undef POLLUX_STR
#undef POLLUX_UINT
    if (const YAML::Node n = ctrl["volatile_write_cache"]) {
      auto r = get_bool(n, "controller.volatile_write_cache");
      if (!r) return Error{r.error()};
      c.volatile_write_cache = r.value();
    }
    if (const YAML::Node n = ctrl["weighted_round_robin"]) {
      auto r = get_bool(n, "controller.weighted_round_robin");
      if (!r) return Error{r.error()};
      c.weighted_round_robin = r.value();
    }
  }

  const YAML::Node nss = root["namespaces"];
  if (!nss) return err("namespaces: missing (at least one namespace is required)");
  if (!nss.IsSequence()) return err("namespaces: expected a list" + where(nss));
  for (size_t i = 0; i < nss.size(); ++i) {
    const YAML::Node ns = nss[i];
    const std::string p = "namespaces[" + std::to_string(i) + "].";
    if (!ns.IsMap()) return err("namespaces[" + std::to_string(i) + "]: expected a mapping" + where(ns));
    if (Status s = check_keys(ns, p, {"size", "size_bytes", "blocks", "lba_size", "backing"}); !s) {
      return Error{s.error()};
    }
    NamespaceConfig nc;
    if (const YAML::Node n = ns["lba_size"]) {
      auto r = get_uint(n, p + "lba_size", 0, std::numeric_limits<uint32_t>::max());
      if (!r) return Error{r.error()};
      if (r.value() != 512 && r.value() != 4096) {
        return err(p + "lba_size: " + std::to_string(r.value()) + " is not supported (512 or 4096)" + where(n));
      }
      nc.lba_size = static_cast<uint32_t>(r.value());
    }
    const int sizes = !!ns["size"] + !!ns["size_bytes"] + !!ns["blocks"];
    if (sizes != 1) return err(p + "size: give exactly one of size, size_bytes, blocks" + where(ns));
    if (const YAML::Node n = ns["size"]) {
      if (!n.IsScalar()) return err(p + "size: expected a size such as 1GiB" + where(n));
      auto r = parse_size(n.Scalar());
      if (!r) return err(p + "size: " + r.error() + where(n));
      nc.size_bytes = r.value();
    } else if (const YAML::Node n = ns["size_bytes"]) {
      auto r = get_uint(n, p + "size_bytes", 1, std::numeric_limits<uint64_t>::max());
      if (!r) return Error{r.error()};
      nc.size_bytes = r.value();
    } else {
      const YAML::Node b = ns["blocks"];
      auto r = get_uint(b, p + "blocks", 1, (uint64_t{1} << 52));
      if (!r) return Error{r.error()};
      nc.size_bytes = r.value() * nc.lba_size;
    }
    if (const YAML::Node n = ns["backing"]) {
      auto r = get_string(n, p + "backing");
      if (!r) return Error{r.error()};
      nc.backing = r.value();
    }
    c.namespaces.push_back(std::move(nc));
  }
  if (Status s = validate(c); !s) return Error{s.error()};
  return c;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view t) {
  size_t i = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  if (i == 0) return err("'" + std::string(t) + "' is not a size (e.g. 4096, 64KiB, 1GiB)");
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + i, v);
  if (ec != std::errc() || p != t.data() + i) return err("'" + std::string(t) + "' is too large");
  std::string unit(t.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  unsigned shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KiB" || unit == "k") shift = 10;
  else if (unit == "M" || unit == "MiB") shift = 20;
  else if (unit == "G" || unit == "GiB") shift = 30;
  else if (unit == "T" || unit == "TiB") shift = 40;
  else return err("'" + std::string(t) + "': unknown unit '" + unit + "' (B, KiB, MiB, GiB, TiB)");
  if (shift && v > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return err("'" + std::string(t) + "' is too large");
  }
  if (v == 0) return err("'" + std::string(t) + "' must be greater than zero");
  return v << shift;
}

Status validate(const ControllerConfig& c) {
  if (c.serial.empty() || c.serial.size() > 20 || !printable_ascii(c.serial)) {
    return err("controller.serial: must be 1..20 printable ASCII characters");
  }
  if (c.model.empty() || c.model.size() > 40 || !printable_ascii(c.model)) {
    return err("controller.model: must be 1..40 printable ASCII characters");
  }
  if (c.firmware.empty() || c.firmware.size() > 8 || !printable_ascii(c.firmware)) {
    return err("controller.firmware: must be 1..8 printable ASCII characters");
  }
  if (c.max_queue_entries < 2 || c.max_queue_entries > 65536) {
    return err("controller.max_queue_entries: must be in [2, 65536]");
  }
  if (c.max_io_queue_pairs < 1 || c.max_io_queue_pairs > 65535) {
    return err("controller.max_io_queue_pairs: must be in [1, 65535]");
  }
  if (c.mdts > 15) return err("controller.mdts: must be in [0, 15]");
  if (c.doorbell_stride > 15) return err("controller.doorbell_stride: must be in [0, 15]");
  if (c.doorbell_bytes() > (size_t{64} << 20)) {
    return err("controller.doorbell_stride: with max_io_queue_pairs=" +
               std::to_string(c.max_io_queue_pairs) + " the doorbell area would exceed 64 MiB");
  }
  if (c.namespaces.empty()) return err("namespaces: at least one namespace is required");
  if (c.namespaces.size() > 1024) return err("namespaces: at most 1024 namespaces");
  for (size_t i = 0; i < c.namespaces.size(); ++i) {
    const NamespaceConfig& n = c.namespaces[i];
    const std::string p = "namespaces[" + std::to_string(i) + "].";
    if (n.lba_size != 512 && n.lba_size != 4096) return err(p + "lba_size: must be 512 or 4096");
    if (n.size_bytes == 0) return err(p + "size: must be greater than zero");
    if (n.size_bytes % n.lba_size != 0) {
      return err(p + "size: " + std::to_string(n.size_bytes) + " bytes is not a multiple of lba_size " +
                 std::to_string(n.lba_size));
    }
    if (n.size_bytes > (uint64_t{1} << 60)) return err(p + "size: larger than 1 EiB");
    if (n.backing != "memory") {
      if (n.backing.rfind("file:", 0) != 0) {
        return err(p + "backing: '" + n.backing + "' is neither 'memory' nor 'file:<path>'");
      }
      if (n.backing.size() == 5) return err(p + "backing: 'file:' needs a path");
    }
  }
  return Status::Ok();
}

Result<ControllerConfig> parse_config(std::string_view yaml_text) {
  try {
    return parse_root(YAML::Load(std::string(yaml_text)));
  } catch (const YAML::Exception& e) {
    return err(std::string("config: YAML syntax error: ") + e.what());
  }
}

Result<ControllerConfig> load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return err("config: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_config(ss.str());
  if (!r) return err(path + ": " + r.error());
  return r;
}

}  // namespace pollux::emu::nvme
