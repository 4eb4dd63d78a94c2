#include "common/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pollux::common {

int claim_socket_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;  // free
  if (!S_ISSOCK(st.st_mode)) return -EEXIST;
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return -ENAMETOOLONG;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  if (live) return -EADDRINUSE;
  ::unlink(path.c_str());  // nobody listens: a stale socket of an earlier run
  return 0;
}

void SocketPathOwner::own(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

void SocketPathOwner::release() {
  if (path_.empty()) return;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    ::unlink(path_.c_str());
  path_.clear();
}

}  // namespace pollux::common
