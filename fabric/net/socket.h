// The socket seam of the fabric transports: a connected non-blocking byte stream, a listener,
// a readiness group (what epoll does for a target's poll group) and the network that makes
// them. PosixNetwork (posix.h) is the kernel's TCP; SimNetwork (sim_network.h) an in-process
// wire in virtual time whose every fault is drawn from a seed; FaultNetwork (fault_network.h)
// the same faults in front of another network (the kernel's TCP) on the wall clock.
//
// Hot path: send/recv/wait_ready are one virtual call onto one syscall (POSIX) or a ring copy
// (sim); nothing allocates, locks or throws.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

#include "driver/env/result.h"

namespace pollux::fabric::net {

// Results of send/recv: > 0 bytes moved; kAgain: nothing now (the socket would block);
// kEof: the peer closed its side (recv only); any other value < 0: -errno, the connection
// is broken (ECONNRESET after a reset, ETIMEDOUT after a user timeout).
inline constexpr ssize_t kAgain = 0;
inline constexpr ssize_t kEof = -0x10000;

class Socket {
 public:
  virtual ~Socket() = default;  // closes: the peer sees EOF once what was sent has arrived
  // Takes as much of the iovecs as the stream has room for (one sendmsg on POSIX).
  virtual ssize_t send(const iovec* iov, int iovcnt) = 0;
  // send(), saying more data follows soon: the kernel holds a partly filled segment back
  // (TCP_CORK) until a later send() or push() — fewer, fuller segments. A simulated wire
  // segments by its own MTU and sends at once.
  virtual ssize_t send_more(const iovec* iov, int iovcnt) { return send(iov, iovcnt); }
  // Sends at once what send_more() held back (one setsockopt on POSIX).
  virtual void push() {}
  // Reads into the iovecs what has arrived (one recv/readv on POSIX).
  virtual ssize_t recv(const iovec* iov, int iovcnt) = 0;
  ssize_t recv(void* buf, std::size_t len) {
    const iovec v{buf, len};
    return recv(&v, 1);
  }
  // Half-close: the peer sees EOF once what was sent has arrived; receiving goes on.
  virtual void shutdown_write() = 0;
  // The close that follows (destruction) is abortive: the peer sees a reset (ECONNRESET), not
  // an end of stream, and what was not sent is discarded (SO_LINGER 0 on POSIX). For a fault
  // layer's connection drop.
  virtual void reset_on_close() {}
  // Set-up paths only: true once a connect finished (false and *error when it failed).
  virtual bool connected(int* error) = 0;
  // Set-up paths only: waits until the socket may be readable (or writable), the connection
  // is up, or the network's time reaches deadline_ns. In a simulation it advances the world
  // one turn (the network's wait hook) instead of blocking.
  virtual void wait(bool for_write, uint64_t deadline_ns) = 0;
  virtual std::string peer() const = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // A connection that arrived, or nullptr (non-blocking).
  virtual std::unique_ptr<Socket> accept() = 0;
  virtual uint16_t port() const = 0;  // the bound port (a listen on "0" gets one)
};

// A target poll group's sockets: which of them have something to read (or are closed).
class ReadinessGroup {
 public:
  virtual ~ReadinessGroup() = default;
  virtual void add(Socket& s, void* ctx) = 0;
  virtual void remove(Socket& s) = 0;
  // Up to max contexts of readable sockets, without waiting (one epoll_wait on POSIX).
  virtual int poll(void** ready, int max) = 0;
};

class Network {
 public:
  virtual ~Network() = default;
  // Starts a non-blocking connect (set-up path); Socket::connected() says when it is done.
  virtual Result<std::unique_ptr<Socket>> connect(const std::string& address,
                                                  const std::string& port) = 0;
  // adrfam: "ipv4" or "ipv6"; port "0": any.
  virtual Result<std::unique_ptr<Listener>> listen(const std::string& adrfam,
                                                   const std::string& address,
                                                   const std::string& port) = 0;
  virtual std::unique_ptr<ReadinessGroup> readiness_group() = 0;
  // This network's time in ns (deadlines of Socket::wait).
  virtual uint64_t now_ns() const = 0;
};

// The kernel's TCP (one instance for the process).
Network& posix_network();

}  // namespace pollux::fabric::net
