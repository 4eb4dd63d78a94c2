// A small blocking HTTP/1.0 client: enough to read a Prometheus /metrics page.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "tools/top/options.h"

namespace pollux::top {

struct HttpResult {
  std::string body;
  std::string error;  // Empty on success; otherwise says what went wrong, for a person.

  bool ok() const { return error.empty(); }
};

// A whole response as read until the server closed the connection: the status must be 200, and
// a Content-Length, when present, must be met (the body is cut to it).
HttpResult parse_http_response(std::string_view raw);

// GET endpoint.path, reading until the server closes. `timeout` bounds the connect, each write
// and each read (SO_SNDTIMEO / SO_RCVTIMEO), not the whole exchange. Errors name the URL.
HttpResult http_get(const Endpoint& endpoint, std::chrono::milliseconds timeout);

}  // namespace pollux::top
