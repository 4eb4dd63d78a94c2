// FaultNetwork: the fabric faults (faults.h) in front of another network — the kernel's TCP
// (posix.h) — on the wall clock: a decorator of the socket seam, so the NVMe/TCP host and
// target run unchanged over real sockets while connections are dropped, partitioned, delayed
// and corrupted.
//
// Where each fault acts: at the sending end, in this process. A connection whose two ends
// both come from this network (host and target in one process: the scenario runner) is
// faulted both ways, exactly once each way. Against a peer outside (SPDK's nvmf_tgt, the
// kernel's nvmet) only what this process sends is delayed, held or corrupted; drops and user
// timeouts reset both ends all the same (the kernel sends the peer a RST).
//
// - drop: each end is reset at its next use (ECONNRESET), and its close sends a RST, so a peer
//   outside sees a reset too;
// - partition: what is sent during it is held (in order, up to hold_bytes per end, then
//   sends return "would block" as with a full window) and leaves when it ends; a connect
//   started during it completes only after it (the SYN retransmitted after the heal); a
//   listener accepts nothing during it; one that lasts at least the user timeout ends every
//   connection on the link user_timeout after its start (ETIMEDOUT both ends, as
//   TCP_USER_TIMEOUT would with data outstanding). What the kernel had taken before it still
//   arrives (it had left);
// - latency: what is sent during the window leaves `extra` later (in order: what follows
//   waits behind it);
// - corruption: of what is sent during the window, each segment of segment_bytes (by stream
//   offset) has one byte flipped with probability `rate` — past TCP's checksum; the NVMe/TCP
//   digests must catch it. The caller's buffer is never touched (a copy is corrupted).
//
// Reproducible from the seed: the fault schedule (what the caller injects, when) and every
// random draw — which segment of which connection is corrupted, at which byte, with which
// mask, is a function of (seed, link, connection's ordinal on its link, side, stream offset).
// Not reproducible: wall-clock timing — which bytes fall inside a window, when the kernel
// delivers, how a reconnect interleaves with a fault.
//
// Cost when no fault is active: send/recv/push are one relaxed atomic load and the inner
// socket's call (one syscall, as PosixNetwork); a readiness poll is the inner epoll_wait and
// one pointer read per ready socket; no lock, allocation, clock read or extra syscall. A
// socket takes the slow path only after a fault touched its link, until the fault is over and
// nothing is held; the hold buffer is allocated on a socket's first held byte.
//
// Threads: each socket has one owner thread (as on PosixNetwork); faults may be injected from
// any thread (a mutex guards the set of sockets; injection is not on the I/O path). A fault
// reaches a socket at its owner's next call (a readiness group's next poll for a target's).
// The network outlives its sockets, listeners and groups. drop() counts connection *ends*
// in this process (a connection between two of its sockets: 2).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "fabric/net/faults.h"
#include "fabric/net/socket.h"

namespace pollux::fabric::net {

struct FaultConfig {
  uint64_t user_timeout_ns = 50'000'000;  // a partition this long ends the connections
  uint32_t hold_bytes = 256 * 1024;       // per end: what a fault may hold back
  uint32_t segment_bytes = 1460;          // the unit of corruption (an Ethernet MSS)
};

struct FaultNetworkStats {
  std::atomic<uint64_t> connections{0};       // sockets made (connects and accepts)
  std::atomic<uint64_t> deferred_connects{0}; // connects started during a partition
  std::atomic<uint64_t> resets{0};            // ends reset by a drop
  std::atomic<uint64_t> timeouts{0};          // ends ended by a partition's user timeout
  std::atomic<uint64_t> partitions{0};
  std::atomic<uint64_t> held_bytes{0};        // bytes that went through a hold queue
  std::atomic<uint64_t> corrupted{0};         // bytes flipped
};

class FaultNetwork final : public Network, public NetworkFaults {
 public:
  // inner: the real network (posix_network()). clock: 1 tick = 1 ns, the time faults are
  // timed in (a scenario's clock paced to the wall clock); nullptr: inner.now_ns().
  FaultNetwork(Network& inner, uint64_t seed, const env::Clock* clock = nullptr,
               FaultConfig config = {});
  ~FaultNetwork() override;

  const FaultConfig& config() const { return config_; }
  // A set-up path's wait (Socket::wait) calls this instead of blocking in poll() (a lockstep
  // engine whose target must be stepped for the connect to finish); default: block.
  void set_wait_hook(std::function<void()> fn) { wait_hook_ = std::move(fn); }

  // ---- NetworkFaults
  uint32_t drop(const std::string& link) override;
  void partition(const std::string& link, uint64_t duration_ns) override;
  void add_latency(const std::string& link, uint64_t extra_ns, uint64_t duration_ns) override;
  void corrupt(const std::string& link, double rate, uint64_t duration_ns) override;

  // ---- Network
  Result<std::unique_ptr<Socket>> connect(const std::string& address,
                                          const std::string& port) override;
  Result<std::unique_ptr<Listener>> listen(const std::string& adrfam, const std::string& address,
                                           const std::string& port) override;
  std::unique_ptr<ReadinessGroup> readiness_group() override;
  uint64_t now_ns() const override;

  const FaultNetworkStats& stats() const { return stats_; }
  // The faults injected (kind, link, duration, parameter, in order) and every corruption
  // drawn (connection key, offset, mask; order-independent), hashed. Same seed and same
  // schedule over the same bytes: the same hash. Timing decides which bytes a window covers.
  uint64_t fault_hash() const;
  std::size_t live_sockets() const;

  struct Link;
  class FaultSocket;
  class FaultListener;
  class FaultGroup;

 private:
  friend class FaultSocket;
  friend class FaultListener;
  friend class FaultGroup;
  Link& link(const std::string& address);  // mu_ held
  std::unique_ptr<Socket> wrap(std::unique_ptr<Socket> inner, Link& l, int side,
                               const std::string& port);
  void forget(FaultSocket* s);
  template <class F>
  void for_link(const std::string& address, F&& f);  // mu_ held
  void record(uint64_t a, uint64_t b, uint64_t c, uint64_t d);  // mu_ held

  Network& inner_;
  const uint64_t seed_;
  const env::Clock* clock_;
  FaultConfig config_;
  std::function<void()> wait_hook_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Link>> links_;
  std::vector<FaultSocket*> sockets_;
  std::atomic<uint64_t> gen_{0};  // faults injected so far: readiness groups look again
  uint64_t hash_ = 0xcbf29ce484222325ull;
  std::atomic<uint64_t> corrupt_hash_{0};
  FaultNetworkStats stats_;
};

}  // namespace pollux::fabric::net
