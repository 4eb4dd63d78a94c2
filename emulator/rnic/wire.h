// An in-process "wire" between emulated RNIC ports: it carries RoCEv2 packets (BTH onwards,
// ICRC included) from one port address to another with a fixed latency, and can drop,
// corrupt, duplicate or reorder them — all decided by a seeded generator, so a seed replays
// the same trace. Time is virtual (nanoseconds) and supplied by whoever drives it: a test's
// loop today, the lockstep engine (scenarios/sim) later, which asks next_event_ns() for the
// time to advance to and calls deliver_until(t) — the same contract as fabric/net's
// SimNetwork.
//
// Not thread-safe: one driver thread owns the wire and its ports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace pollux::emu::rnic {

// A receiver of packets (an RNIC port).
class WirePort {
 public:
  virtual ~WirePort() = default;
  virtual void receive(uint64_t src_address, const uint8_t* packet, std::size_t len) = 0;
};

struct WireFaults {
  double loss = 0;       // probability a packet is dropped
  double corrupt = 0;    // ... has one byte flipped (the receiver's ICRC check drops it)
  double duplicate = 0;  // ... is delivered twice
  double reorder = 0;    // ... is held back by reorder_delay_ns (later packets overtake it)
  uint64_t reorder_delay_ns = 5000;
};

struct WireStats {
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t dropped = 0;  // by loss, a script, a link down, or an unknown destination
  uint64_t corrupted = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
};

class Wire {
 public:
  explicit Wire(uint64_t seed, WireFaults faults = {}, uint64_t latency_ns = 1000);

  // Ports are addressed by a 64-bit address (the NIC's wire address, our stand-in for its
  // MAC/GID). The port must outlive the wire or be detached.
  void attach(uint64_t address, WirePort* port);
  void detach(uint64_t address);

  // A packet leaves `src` at virtual time now_ns. Faults are decided here, in send order.
  void transmit(uint64_t now_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                std::size_t len);
  // Drops the packet with this send index (0-based count of transmit() calls), whatever the
  // random faults say: for tests that need one exact loss.
  void drop_packet(uint64_t send_index) { scripted_drops_.push_back(send_index); }

  // Delivers, in (time, send order), every packet due at or before t. Returns how many.
  std::size_t deliver_until(uint64_t t_ns);
  // The earliest pending delivery, or UINT64_MAX when nothing is in flight.
  uint64_t next_event_ns() const;
  bool idle() const { return in_flight_.empty(); }

  void set_faults(const WireFaults& f) { faults_ = f; }
  // A port's link down (a flap or a partition): everything it sends or is sent is lost until
  // it comes back up. Packets already in flight still arrive.
  void set_link_up(uint64_t address, bool up);
  bool link_up(uint64_t address) const;
  const WireStats& stats() const { return stats_; }
  uint64_t seed() const { return seed_; }
  // A hash of every delivery (time, addresses, bytes): equal inputs give equal hashes.
  uint64_t trace_hash() const { return trace_hash_; }
  // A hash of every transmit decision (time, addresses, opcode, PSN, length, fate): what a
  // trace line says. Unlike trace_hash() it leaves out the bytes, which carry host virtual
  // addresses (RETHs, keyed SGLs) that differ between two runs of one seed.
  uint64_t decision_hash() const { return decision_hash_; }
  uint64_t decisions() const { return send_index_; }
  // With recording on, one line per transmit decision ("t=… 1->2 op=0x04 psn=7 len=… drop").
  void record_trace(bool on) { record_ = on; }
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  struct Frame {
    uint64_t src;
    uint64_t dst;
    std::vector<uint8_t> bytes;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (delivery time, sequence)

  void enqueue(uint64_t at, uint64_t src, uint64_t dst, std::vector<uint8_t> bytes);
  bool chance(double p);

  uint64_t seed_;
  WireFaults faults_;
  uint64_t latency_ns_;
  std::mt19937_64 rng_;
  std::map<uint64_t, WirePort*> ports_;
  std::map<Key, Frame> in_flight_;
  uint64_t next_seq_ = 0;
  uint64_t send_index_ = 0;
  std::vector<uint64_t> scripted_drops_;
  std::vector<uint64_t> links_down_;
  WireStats stats_;
  uint64_t trace_hash_ = 1469598103934665603ull;
  uint64_t decision_hash_ = 1469598103934665603ull;
  bool record_ = false;
  std::vector<std::string> trace_;
};

}  // namespace pollux::emu::rnic
