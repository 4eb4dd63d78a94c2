#include "common/listen_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pollux::common {

// Binds host:port itself to name the reason (address in use, not an address of this host...).
std::string explain_listen_failure(const std::string& address, const std::string& fallback) {
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), address.c_str() + colon + 1, &hints, &res);
      rc != 0)
    return std::string("cannot resolve: ") + ::gai_strerror(rc);
  std::string why = fallback;
  const int fd = ::socket(res->ai_family, res->ai_socktype, 0);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0)
      why = std::string("cannot listen: ") + std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return why;
}

}  // namespace pollux::common
