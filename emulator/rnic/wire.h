// An in-process "wire" between emulated RNIC ports: it carries RoCEv2 packets (BTH onwards,
// ICRC included) from one port address to another, and can drop, corrupt, duplicate or
// reorder them, take links down (on command, or flapping on a seeded schedule) and partition
// the ports — all decided by seeded generators, so a seed replays the same trace. Time is
// virtual (nanoseconds) and supplied by whoever drives it: a test's loop, pollux-rnic's wall
// clock, or the lockstep engine (scenarios/sim), which asks next_event_ns() for the time to
// advance to and calls deliver_until(t) — the same contract as fabric/net's SimNetwork.
//
// Untimed (the default), a packet arrives a fixed latency after it was sent. Timed
// (enable_timing with a NIC profile), the packets go through network.h's Ethernet — port
// serialisation, cables, a switch with buffers and PFC — and the faults are decided when a
// frame starts on its sender's port.
//
// Not thread-safe: one driver thread owns the wire and its ports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "emulator/rnic/network.h"

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
  // Link flaps drawn from the seed, each port on its own schedule: up for an exponentially
  // distributed time of this mean, then down for flap_down_ns (0: no flaps).
  uint64_t flap_interval_ns = 0;
  uint64_t flap_down_ns = 0;
};

struct WireStats {
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t dropped = 0;  // by loss, a script, a link down, or an unknown destination
  uint64_t corrupted = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
};

class Wire : private Network::Sink {
 public:
  explicit Wire(uint64_t seed, WireFaults faults = {}, uint64_t latency_ns = 1000);
  ~Wire() override;
  Wire(const Wire&) = delete;  // its network points back at it
  Wire& operator=(const Wire&) = delete;

  // From now on packets cross the profile's Ethernet (ports, cables, switch) instead of a
  // fixed latency. Before the first packet.
  void enable_timing(const NicProfile& profile);
  bool timed() const { return network_ != nullptr; }

  // Ports are addressed by a 64-bit address (the NIC's wire address, our stand-in for its
  // MAC/GID). The port must outlive the wire or be detached.
  void attach(uint64_t address, WirePort* port);
  void detach(uint64_t address);

  // A packet leaves `src` at virtual time now_ns. Faults are decided here, in send order.
  void transmit(uint64_t now_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                std::size_t len);
  // The same, handed to the sender's port at `ready_ps` (picoseconds, not before the wire's
  // current time): a timed NIC's packets leave when their data is in.
  void transmit_at(uint64_t ready_ps, uint64_t src, uint64_t dst, const uint8_t* packet,
                   std::size_t len);
  // Timed: packets queued on a port that have not started (a NIC keeps at most its transmit
  // window there). Untimed: 0.
  uint32_t queued(uint64_t address) const { return network_ ? network_->queued(address) : 0; }
  // The time of the delivery being made (in a port's receive()), in picoseconds.
  uint64_t delivery_time_ps() const { return delivery_ps_; }
  // Drops the packet with this send index (0-based count of transmit() calls), whatever the
  // random faults say: for tests that need one exact loss.
  void drop_packet(uint64_t send_index) { scripted_drops_.push_back(send_index); }

  // Delivers, in (time, send order), every packet due at or before t. Returns how many.
  std::size_t deliver_until(uint64_t t_ns);
  // The earliest pending delivery, or UINT64_MAX when nothing is in flight.
  uint64_t next_event_ns() const;
  bool idle() const { return network_ ? network_->idle() : in_flight_.empty(); }

  void set_faults(const WireFaults& f);
  // A port's link down (a flap or a partition): everything it sends or is sent is lost until
  // it comes back up. Packets already in flight still arrive.
  void set_link_up(uint64_t address, bool up);
  bool link_up(uint64_t address) const;
  // A partition: packets between `side` and every other port are lost until heal().
  void partition(std::vector<uint64_t> side) { partition_ = std::move(side); }
  void heal() { partition_.clear(); }
  // Whether the port's link is in a seeded flap's down time at t (WireFaults::flap_*).
  bool flapping(uint64_t address, uint64_t t_ns);
  const WireStats& stats() const { return stats_; }
  // The timed network's counters (pause frames, buffer drops, ...); nullptr untimed.
  const NetworkStats* network_stats() const { return network_ ? &network_->stats() : nullptr; }
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

  // The fate of a packet leaving `src` at t_ns: decided in send order from the seed.
  struct Decision {
    bool lost = false;
    bool duplicate = false;
    bool late = false;
    int64_t corrupt_at = -1;  // the byte to flip
  };
  Decision decide(uint64_t t_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                  std::size_t len);
  void enqueue(uint64_t at, uint64_t src, uint64_t dst, std::vector<uint8_t> bytes);
  bool deliver(uint64_t t_ps, uint64_t src, uint64_t dst, const uint8_t* bytes, std::size_t len);
  bool chance(double p);
  // Network::Sink
  Fate depart(SimTime t, Network::Frame& f) override;
  void arrive(SimTime t, Network::Frame& f) override;

  struct Flaps {
    std::mt19937_64 rng;
    uint64_t down_start = 0, down_end = 0;
  };

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
  std::vector<uint64_t> partition_;
  std::map<uint64_t, Flaps> flaps_;
  std::unique_ptr<Network> network_;
  uint64_t delivery_ps_ = 0;
  WireStats stats_;
  uint64_t trace_hash_ = 1469598103934665603ull;
  uint64_t decision_hash_ = 1469598103934665603ull;
  bool record_ = false;
  std::vector<std::string> trace_;
};

}  // namespace pollux::emu::rnic
