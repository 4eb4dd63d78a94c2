// A UNIX socket path a server owns: claimed only when no live server answers on it (a stale
// socket of an earlier run is replaced), and removed at the end only while it is still this
// server's (not one a later server has put there since).
#pragma once

#include <sys/types.h>

#include <string>

namespace pollux::common {

// Before bind(): 0 when the path is free or held by a stale socket (removed now); -EADDRINUSE
// when a server accepts connections there; -EEXIST when it is not a socket.
int claim_socket_path(const std::string& path);

// After bind(): the socket file's identity; release() unlinks the path only if it is still
// that file.
// Who may connect to a server's socket (docs/SECURITY.md). On Linux connecting needs write
// permission on the socket file: it is created 0600 (owner only), or 0660 for `group`.
// Before bind(): refuses a directory that others may write unless it is sticky (as /tmp is:
// there nobody else can remove or replace the socket), and sets the unbound socket's mode,
// which Linux gives the file bind() creates (no window with a wider mode). After bind(): the
// group. 0 or a negative errno with *why saying what is wrong.
int restrict_socket_before_bind(int fd, const std::string& path, const std::string& group,
                                std::string* why);
int restrict_socket_after_bind(const std::string& path, const std::string& group,
                               std::string* why);

class SocketPathOwner {
 public:
  void own(const std::string& path);
  void release();
  ~SocketPathOwner() { release(); }

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace pollux::common
