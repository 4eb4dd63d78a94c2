// Why a TCP server could not listen on host:port, for libraries that do not say (CivetServer:
// "null context when constructing CivetServer").
#pragma once

#include <string>

namespace pollux::common {

// Tries to bind host:port itself and names the reason ("cannot listen: Address already in
// use", "cannot resolve: ..."); `fallback` when it can bind.
std::string explain_listen_failure(const std::string& host_port, const std::string& fallback);

}  // namespace pollux::common
