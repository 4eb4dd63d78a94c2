#include "emulator/device/control_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pollux::emu::device {

ControlSocket::~ControlSocket() {
  if (client_fd_ >= 0) close(client_fd_);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    owner_.release();  // only if it is still ours
  }
}

int ControlSocket::listen(const std::string& path, const std::string& group, std::string* why) {
  std::string reason;
  if (why == nullptr) why = &reason;
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return -ENAMETOOLONG;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (const int rc = common::restrict_socket_before_bind(fd, path, group, why); rc != 0) {
    close(fd);
    return rc;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (const int rc = common::claim_socket_path(path); rc != 0) {
    close(fd);
    return rc;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1) != 0) {
    const int e = errno;
    close(fd);
    return -e;
  }
  if (const int rc = common::restrict_socket_after_bind(path, group, why); rc != 0) {
    close(fd);
    unlink(path.c_str());
    return rc;
  }
  listen_fd_ = fd;
  path_ = path;
  owner_.own(path);
  return 0;
}

int ControlSocket::poll(const std::function<std::string(const std::string&)>& handle) {
  if (listen_fd_ < 0) return 0;
  if (client_fd_ < 0) {
    client_fd_ = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client_fd_ < 0) return 0;
    in_.clear();
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(client_fd_, buf, sizeof buf, 0);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      if (in_.size() > (1u << 20)) break;  // a line that never ends: drop the client
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close(client_fd_);  // closed by the peer, or an error
    client_fd_ = -1;
    return 0;
  }
  if (in_.size() > (1u << 20)) {
    close(client_fd_);
    client_fd_ = -1;
    return 0;
  }
  int handled = 0;
  for (size_t nl; (nl = in_.find('\n')) != std::string::npos;) {
    const std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    if (line.empty()) continue;
    const std::string reply = handle(line) + "\n";
    // Replies are short; a client that does not read them loses them.
    (void)!send(client_fd_, reply.data(), reply.size(), MSG_NOSIGNAL);
    ++handled;
  }
  return handled;
}

}  // namespace pollux::emu::device
