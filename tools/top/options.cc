#include "tools/top/options.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace pollux::top {

std::string Endpoint::to_string() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + path;
}

std::optional<Endpoint> parse_endpoint(std::string_view text) {
  if (text.starts_with("http://")) text.remove_prefix(7);
  Endpoint e;
  std::size_t slash = text.find('/');
  if (slash != std::string_view::npos) {
    e.path = std::string(text.substr(slash));
    text = text.substr(0, slash);
  }
  std::size_t colon;
  if (text.starts_with("[")) {  // [IPv6]:port
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    e.host = std::string(text.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    e.host = std::string(text.substr(0, colon));
  }
  std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (e.host.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return std::nullopt;
  }
  e.port = static_cast<uint16_t>(value);
  return e;
}

std::optional<std::chrono::milliseconds> parse_interval(std::string_view text) {
  double scale_ms = 1000;  // A bare number is seconds.
  if (text.ends_with("ms")) {
    scale_ms = 1;
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
  }
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  const double ms = std::round(value * scale_ms);
  // A day is far more than anyone wants between refreshes and keeps the cast in range.
  if (ms < 1 || ms > 86400e3) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

std::optional<View> parse_view(std::string_view text) {
  if (text == "reactors") return View::kReactors;
  if (text == "threads") return View::kThreads;
  if (text == "pollers") return View::kPollers;
  return std::nullopt;
}

}  // namespace pollux::top
