#include "fabric/net/posix.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace pollux::fabric::net {
namespace {

std::string name_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class PosixSocket final : public Socket {
 public:
  // A connected socket (accepted), or one whose connect is in progress to addrs[next - 1].
  PosixSocket(int fd, std::string peer, bool connecting = false)
      : fd_(fd), peer_(std::move(peer)), connecting_(connecting) {}
  ~PosixSocket() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  ssize_t send(const iovec* iov, int iovcnt) override {
    const ssize_t r = send_flags(iov, iovcnt);
    push();
    return r;
  }
  // TCP_CORK rather than MSG_MORE: MSG_MORE's hold ends with the next ACK that comes in (with
  // TCP_NODELAY on), so under load it held almost nothing.
  ssize_t send_more(const iovec* iov, int iovcnt) override {
    if (!corked_) set_cork(true);
    return send_flags(iov, iovcnt);
  }
  void push() override {
    if (corked_) set_cork(false);  // sends the partial segment at once
  }
  ssize_t recv(const iovec* iov, int iovcnt) override {
    const ssize_t r = iovcnt == 1 ? ::recv(fd_, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT)
                                  : ::readv(fd_, iov, iovcnt);
    if (r > 0) return r;
    if (r == 0) return kEof;
    return errno == EAGAIN || errno == EINTR ? kAgain : -errno;
  }
  void shutdown_write() override { ::shutdown(fd_, SHUT_WR); }
  void reset_on_close() override {
    const linger l{1, 0};  // close() sends a RST and drops what is queued
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  bool connected(int* error) override {
    if (!connecting_) return true;
    pollfd pf{fd_, POLLOUT, 0};
    if (::poll(&pf, 1, 0) != 1) return false;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr == 0) {
      connecting_ = false;
      no_delay(fd_);
      return true;
    }
    *error = soerr;
    // The next address of the name, if there is one.
    while (next_ < addrs_.size()) {
      const sockaddr_storage& a = addrs_[next_++];
      ::close(fd_);
      fd_ = ::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd_ < 0) continue;
      const socklen_t len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
      if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a), len) == 0 || errno == EINPROGRESS) {
        *error = 0;
        return connected(error);
      }
      *error = errno;
    }
    return false;
  }
  void wait(bool for_write, uint64_t deadline_ns) override {
    const uint64_t now = posix_network().now_ns();
    const int ms =
        deadline_ns > now ? static_cast<int>((deadline_ns - now + 999'999) / 1'000'000) : 0;
    pollfd pf{fd_, static_cast<short>(for_write || connecting_ ? POLLOUT : POLLIN), 0};
    ::poll(&pf, 1, ms);
  }
  std::string peer() const override { return peer_; }

  std::vector<sockaddr_storage> addrs_;  // addresses still to try when a connect fails
  std::size_t next_ = 0;

 private:
  void set_cork(bool on) {
    const int v = on ? 1 : 0;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &v, sizeof v);
    corked_ = on;
  }
  ssize_t send_flags(const iovec* iov, int iovcnt) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = static_cast<std::size_t>(iovcnt);
    const ssize_t r = ::sendmsg(fd_, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0) return r;
    return errno == EAGAIN || errno == EINTR ? kAgain : -errno;
  }

  int fd_;
  std::string peer_;
  bool connecting_;
  bool corked_ = false;  // TCP_CORK on: partial segments wait for push()
};

class PosixListener final : public Listener {
 public:
  PosixListener(int fd, uint16_t port) : fd_(fd), port_(port) {}
  ~PosixListener() override { ::close(fd_); }
  std::unique_ptr<Socket> accept() override {
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    const int fd =
        ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return nullptr;
    no_delay(fd);
    return std::make_unique<PosixSocket>(fd, name_of(ss));
  }
  uint16_t port() const override { return port_; }

 private:
  int fd_;
  uint16_t port_;
};

class Epoll final : public ReadinessGroup {
 public:
  Epoll() : epfd_(::epoll_create1(EPOLL_CLOEXEC)) {}
  ~Epoll() override { ::close(epfd_); }
  void add(Socket& s, void* ctx) override {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = ctx;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, static_cast<PosixSocket&>(s).fd(), &ev);
  }
  void remove(Socket& s) override {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, static_cast<PosixSocket&>(s).fd(), nullptr);
  }
  int poll(void** ready, int max) override {
    constexpr int kMax = 64;
    epoll_event evs[kMax];
    const int n = ::epoll_wait(epfd_, evs, std::min(max, kMax), 0);
    for (int i = 0; i < n; ++i) ready[i] = evs[i].data.ptr;
    return std::max(n, 0);
  }

 private:
  int epfd_;
};

constexpr int kBacklog = 512;

}  // namespace

Result<std::unique_ptr<Socket>> PosixNetwork::connect(const std::string& address,
                                                      const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(EHOSTUNREACH, ::gai_strerror(rc));
  std::vector<sockaddr_storage> addrs;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, std::min<std::size_t>(a->ai_addrlen, sizeof ss));
    addrs.push_back(ss);
  }
  ::freeaddrinfo(res);
  int err = EHOSTUNREACH;
  for (std::size_t i = 0; i < addrs.size(); ++i) {
    const sockaddr_storage& a = addrs[i];
    const int fd = ::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const socklen_t len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), len);
    if (rc != 0 && errno != EINPROGRESS) {
      err = errno;
      ::close(fd);
      continue;
    }
    auto s = std::make_unique<PosixSocket>(fd, name_of(a), /*connecting=*/true);
    s->addrs_ = addrs;
    s->next_ = i + 1;
    return std::unique_ptr<Socket>(std::move(s));
  }
  return make_error(err, std::strerror(err));
}

Result<std::unique_ptr<Listener>> PosixNetwork::listen(const std::string& adrfam,
                                                       const std::string& address,
                                                       const std::string& port) {
  addrinfo hints{};
  hints.ai_family = adrfam == "ipv6" ? AF_INET6 : AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(address.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(EINVAL, ::gai_strerror(rc));
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int e = errno;
    ::freeaddrinfo(res);
    return make_error(e, std::string("socket: ") + std::strerror(e));
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, kBacklog) != 0) {
    const int e = errno;
    ::close(fd);
    ::freeaddrinfo(res);
    return make_error(e, std::strerror(e));
  }
  ::freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  const uint16_t bound =
      ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::unique_ptr<Listener>(std::make_unique<PosixListener>(fd, bound));
}

std::unique_ptr<ReadinessGroup> PosixNetwork::readiness_group() {
  return std::make_unique<Epoll>();
}

uint64_t PosixNetwork::now_ns() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

Network& posix_network() {
  static PosixNetwork n;
  return n;
}

}  // namespace pollux::fabric::net
