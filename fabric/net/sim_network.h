// SimNetwork: an in-process TCP-like network in virtual time, for running a host and a target
// in one process on the lockstep engine. Every random draw comes from the seed, so a run with
// the same seed delivers the same bytes at the same instants.
//
// Model (per link = every connection to one listen address, both directions):
// - a byte stream per direction, delivered in order, in segments of MTU - 40 bytes;
// - serialisation: a segment occupies its direction of the link for (bytes + 40) * 8 /
//   bandwidth, so connections on one link share it; then one-way latency (+ added latency);
// - loss: TCP is reliable, so a lost segment arrives late — one RTO, then 2x, 4x... for each
//   further loss of the same segment — and everything behind it waits (in-order delivery);
//   reordering and jitter likewise only delay;
// - corruption that escapes TCP's checksum: a byte of the segment flipped, delivered as is
//   (the NVMe/TCP digests must catch it, or without them the data oracle);
// - partitions: nothing crosses the link until the end (what was in flight arrives after);
//   one that lasts at least the user timeout resets every connection on it (ETIMEDOUT);
// - drop: a reset to both ends (ECONNRESET), at once;
// - flow control: a direction holds at most window_bytes sent and not yet read.
//
// Delivery is computed when bytes are sent (arrival instants) and observed lazily against the
// clock; next_event_ns() tells a lockstep engine when something will next arrive, so its idle
// jump does not skip it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "fabric/net/faults.h"
#include "fabric/net/socket.h"

namespace pollux::fabric::net {

struct LinkConfig {
  uint64_t latency_ns = 10'000;             // one way
  uint64_t bandwidth_bps = 25'000'000'000;  // per direction; 0: unlimited
  uint32_t mtu = 1500;                      // segment payload: mtu - 40
  double loss = 0;                          // probability a segment is lost (once)
  uint64_t rto_ns = 1'000'000;              // the first retransmission timeout
  uint64_t jitter_ns = 0;                   // uniform extra delay per segment, [0, jitter)
  double corrupt = 0;                       // probability a segment arrives with a byte flipped
  uint64_t user_timeout_ns = 50'000'000;    // a partition this long resets the connections
  uint32_t window_bytes = 256 * 1024;       // per direction: in flight + unread
};

struct SimNetworkStats {
  uint64_t connections = 0, refused = 0, segments = 0, bytes = 0, lost = 0, corrupted = 0,
           resets = 0, partitions = 0;
};

class SimNetwork final : public Network, public NetworkFaults {
 public:
  // clock: 1 tick = 1 ns (a VirtualClock the lockstep engine owns).
  SimNetwork(const env::Clock& clock, uint64_t seed);
  ~SimNetwork() override;

  // ---- configuration and faults. `link` is a listen address ("10.0.0.1"); "" = every link.
  void set_default_link(const LinkConfig& c) { default_ = c; }
  void set_link(const std::string& link, const LinkConfig& c);
  const LinkConfig& link_config(const std::string& link);
  // Connection drop: every connection on the link is reset, both ends, now.
  uint32_t drop(const std::string& link) override;
  // Nothing crosses the link for `duration`; at least the user timeout: connections reset.
  void partition(const std::string& link, uint64_t duration_ns) override;
  // Extra one-way latency on segments sent in the next `duration`.
  void add_latency(const std::string& link, uint64_t extra_ns, uint64_t duration_ns) override;
  // Segments sent in the next `duration` are corrupted with probability `rate`.
  void corrupt(const std::string& link, double rate, uint64_t duration_ns) override;
  // A set-up path's wait (Socket::wait) calls this to advance the world; default: nothing.
  void set_wait_hook(std::function<void()> fn) { wait_hook_ = std::move(fn); }

  // ---- Network
  Result<std::unique_ptr<Socket>> connect(const std::string& address,
                                          const std::string& port) override;
  Result<std::unique_ptr<Listener>> listen(const std::string& adrfam, const std::string& address,
                                           const std::string& port) override;
  std::unique_ptr<ReadinessGroup> readiness_group() override;
  uint64_t now_ns() const override { return clock_.now(); }

  // The earliest instant after now at which something arrives or changes (a segment, a
  // connection set up, an end of stream, a reset), or UINT64_MAX.
  uint64_t next_event_ns();
  // Every delivery decision (connection, direction, offset, length, arrival, corruption) and
  // fault, hashed: same seed and same traffic, same hash.
  uint64_t trace_hash() const { return hash_; }
  uint64_t trace_records() const { return records_; }
  const SimNetworkStats& stats() const { return stats_; }
  std::size_t live_connections() const { return conns_.size(); }

  struct Conn;
  struct Link;
  class SimSocket;
  class SimListener;
  class SimGroup;

 private:
  friend class SimSocket;
  friend class SimListener;
  Link& link(const std::string& address);
  void transmit(Conn& c, int dir, uint64_t from, uint64_t len);
  void settle(Conn& c);  // deliveries due by now
  void record(uint64_t a, uint64_t b, uint64_t c, uint64_t d);
  double draw();  // [0, 1) from the seed
  void forget(Conn* c);

  const env::Clock& clock_;
  std::mt19937_64 rng_;
  LinkConfig default_;
  std::map<std::string, std::unique_ptr<Link>> links_;
  std::map<std::string, SimListener*> listeners_;  // "address:port"
  std::vector<std::shared_ptr<Conn>> conns_;
  std::function<void()> wait_hook_;
  uint64_t next_conn_id_ = 1;
  uint16_t next_port_ = 49152;
  uint64_t hash_ = 0xcbf29ce484222325ull, records_ = 0;
  SimNetworkStats stats_;
};

}  // namespace pollux::fabric::net
