// Reads YAML mappings field by field with errors that name the field and its line: every key
// must be consumed (typos are errors), numbers, booleans, durations and sizes are checked.
// Shared by device profiles and scenario files.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <type_traits>

#include "common/text.h"
#include "emulator/nvme/config.h"
#include "emulator/nvme/result.h"
#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing::yaml {

using nvme::Error;
using nvme::Status;

inline Error err(std::string msg) { return Error{std::move(msg)}; }

inline std::string where(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.line < 0 ? "" : " (line " + std::to_string(m.line + 1) + ")";
}

// YAML text is UTF-8 (YAML 1.2, 5.2). yaml-cpp takes any bytes, and a name that is not UTF-8
// would only fail far away (in a JSON report), so it is refused here with its line.
inline Status check_utf8(std::string_view text) {
  const std::size_t at = invalid_utf8_at(text);
  if (at == std::string_view::npos) return {};
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(at), '\n');
  return err(fmt::format("line {}: byte 0x{:02X} is not UTF-8 (YAML text is UTF-8)", line,
                         static_cast<unsigned char>(text[at])));
}

// yaml-cpp keeps both pairs of a key given twice, and a lookup finds the first: the second
// value would be dropped without a word. Refused, naming the key and the line of the second.
inline Status unique_keys(const YAML::Node& n, const std::string& path = "") {
  if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) {
      if (Status s = unique_keys(n[i], path + "[" + std::to_string(i) + "]"); !s) return s;
    }
  } else if (n.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const std::string field = path.empty() ? key : path + "." + key;
      if (!key.empty() && !seen.insert(key).second) {
        return err(field + ": given twice" + where(kv.first));
      }
      if (Status s = unique_keys(kv.second, field); !s) return s;
    }
  }
  return {};
}

// Reads the keys of one mapping; every key must be consumed, so typos are caught.
class Section {
 public:
  Section(const YAML::Node& node, std::string prefix) : node_(node), prefix_(std::move(prefix)) {}
  Status check_is_map() const {
    if (node_ && !node_.IsMap()) return err(prefix_ + ": expected a mapping" + where(node_));
    return {};
  }
  Status uint(const char* key, uint64_t lo, uint64_t hi, auto* out) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    const std::string f = field(key);
    if (!n.IsScalar()) return err(f + ": expected an integer" + where(n));
    char* end = nullptr;
    const std::string s = n.Scalar();
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end || s[0] == '-') return err(f + ": '" + s + "' is not an integer" + where(n));
    if (errno == ERANGE || v < lo || v > hi) {  // ERANGE: beyond 64 bits (strtoull saturates)
      return err(f + ": " + s + " is out of range [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]" + where(n));
    }
    *out = static_cast<std::remove_reference_t<decltype(*out)>>(v);
    return {};
  }
  // A plain decimal number (0.02, 1e-4) in [lo, hi].
  Status number(const char* key, double lo, double hi, double* out) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    const std::string f = field(key);
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end == s.c_str() || *end || !std::isfinite(v)) {
      return err(f + ": '" + s + "' is not a number" + where(n));
    }
    if (v < lo || v > hi) {
      return err(fmt::format("{}: {} is out of range [{}, {}]{}", f, s, lo, hi, where(n)));
    }
    *out = v;
    return {};
  }
  Status boolean(const char* key, bool* out) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "true") *out = true;
    else if (s == "false") *out = false;
    else return err(field(key) + ": expected true or false" + where(n));
    return {};
  }
  Status string(const char* key, std::string* out) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    if (!n.IsScalar()) return err(field(key) + ": expected a string" + where(n));
    *out = n.Scalar();
    return {};
  }
  // "8.9us", "70 us", "3ms", "250ns", "1.5s", "0".
  Status duration(const char* key, SimTime* out, SimTime max = 10 * kSec) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    const std::string f = field(key);
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    std::string unit(end ? end : "");
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    double scale = 0;
    if (unit == "ps") scale = 1;
    else if (unit == "ns") scale = kNs;
    else if (unit == "us") scale = kUs;
    else if (unit == "ms") scale = kMs;
    else if (unit == "s") scale = kSec;
    else if (unit.empty() && v == 0 && end != s.c_str()) scale = 1;
    if (s.empty() || end == s.c_str() || scale == 0 || !(v >= 0) || v * scale > double(max)) {
      return err(f + ": '" + s + "' is not a duration (a number with ns, us, ms or s, at most " +
                 std::to_string(max / kMs) + " ms)" + where(n));
    }
    *out = static_cast<SimTime>(std::llround(v * scale));
    return {};
  }
  Status size(const char* key, uint64_t* out) {
    const YAML::Node n = take(key);
    if (!n || n.IsNull()) return {};
    if (!n.IsScalar()) return err(field(key) + ": expected a size" + where(n));
    auto r = nvme::parse_size(n.Scalar());
    if (!r) return err(field(key) + ": " + r.error() + where(n));
    *out = r.value();
    return {};
  }
  YAML::Node take(const char* key) {
    seen_.insert(key);
    return node_ ? node_[key] : YAML::Node();
  }
  Status unknown_keys() const {
    if (!node_) return {};
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (!seen_.count(k)) {
        std::string list;
        for (const auto& s : seen_) list += (list.empty() ? "" : ", ") + s;
        return err(field(k.c_str()) + ": unknown key (expected one of: " + list + ")" +
                   where(kv.first));
      }
    }
    return {};
  }

 private:
  std::string field(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  YAML::Node node_;
  std::string prefix_;
  std::set<std::string> seen_;
};

}  // namespace pollux::emu::timing::yaml

// Returns the error of a Section read (or any Status) from a function returning Result/Status.
#define POLLUX_TRY(expr)                                          \
  do {                                                            \
    if (::pollux::emu::nvme::Status s_ = (expr); !s_) {           \
      return ::pollux::emu::nvme::Error{s_.error()};              \
    }                                                             \
  } while (0)
