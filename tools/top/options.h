// Values of pollux-top's command-line options, parsed without side effects.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tools/top/rows.h"

namespace pollux::top {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string path = "/metrics";

  std::string to_string() const;  // "host:port/path", IPv6 hosts in brackets.
};

// "host:port", "host:port/path", "[::1]:port", each optionally after "http://".
std::optional<Endpoint> parse_endpoint(std::string_view text);

// "500ms", "1s", "1.5s" or a bare number of seconds ("2"); must be at least 1 ms.
std::optional<std::chrono::milliseconds> parse_interval(std::string_view text);

// "reactors", "threads" or "pollers".
std::optional<View> parse_view(std::string_view text);

}  // namespace pollux::top
