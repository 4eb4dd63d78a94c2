// A line-oriented control socket (UNIX stream): one client at a time sends JSON lines, each
// is handed to a handler whose reply goes back as one line. Non-blocking: the device loop
// calls poll() now and then (it never waits).
#pragma once

#include <functional>
#include <string>

#include "common/unix_socket.h"

namespace pollux::emu::device {

class ControlSocket {
 public:
  ControlSocket() = default;
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // 0 or -errno.
  // Owner-only (0600), or 0660 for `group`, as the vfio-user socket (common/unix_socket.h).
  int listen(const std::string& path, const std::string& group = "", std::string* why = nullptr);
  // Accepts a client, reads what it sent, answers complete lines. Returns lines handled.
  int poll(const std::function<std::string(const std::string& line)>& handle);

 private:
  int listen_fd_ = -1;
  int client_fd_ = -1;
  std::string path_;
  common::SocketPathOwner owner_;
  std::string in_;
};

}  // namespace pollux::emu::device
