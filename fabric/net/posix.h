// The kernel's TCP behind the socket seam (socket.h): non-blocking sockets, one sendmsg per
// send, one recv (or readv) per recv, one epoll_wait per readiness poll.
#pragma once

#include "fabric/net/socket.h"

namespace pollux::fabric::net {

class PosixNetwork final : public Network {
 public:
  Result<std::unique_ptr<Socket>> connect(const std::string& address,
                                          const std::string& port) override;
  Result<std::unique_ptr<Listener>> listen(const std::string& adrfam, const std::string& address,
                                           const std::string& port) override;
  std::unique_ptr<ReadinessGroup> readiness_group() override;
  uint64_t now_ns() const override;
};

}  // namespace pollux::fabric::net
