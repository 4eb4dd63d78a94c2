#include "common/unix_socket.h"

#include <grp.h>
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

namespace {

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

int restrict_socket_before_bind(int fd, const std::string& path, const std::string& group,
                                std::string* why) {
  if (!group.empty() && ::getgrnam(group.c_str()) == nullptr) {
    *why = "no group '" + group + "'";
    return -EINVAL;
  }
  const std::string dir = directory_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    *why = "directory " + dir + ": " + std::strerror(e);
    return -e;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    *why = "directory " + dir +
           " is writable by others and not sticky: another user could replace the socket "
           "(use a directory only you can write, or a sticky one such as /tmp)";
    return -EPERM;
  }
  if (::fchmod(fd, 0600) != 0) {  // the group, if any, is added once the file is ours
    const int e = errno;
    *why = std::string("fchmod: ") + std::strerror(e);
    return -e;
  }
  return 0;
}

int restrict_socket_after_bind(const std::string& path, const std::string& group,
                               std::string* why) {
  if (group.empty()) return 0;
  const struct group* g = ::getgrnam(group.c_str());
  if (g == nullptr) {
    *why = "no group '" + group + "'";
    return -EINVAL;
  }
  if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0 ||
      ::chmod(path.c_str(), 0660) != 0) {
    const int e = errno;
    *why = "group " + group + " for " + path + ": " + std::strerror(e);
    return -e;
  }
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
