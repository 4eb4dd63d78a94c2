// The timed Ethernet under the Wire: each NIC port's egress (frames queued by ready time,
// serialised at the port's rate, held while the port is paused), the cables (propagation),
// and optionally one switch (port latency, cut-through or store-and-forward, an ingress
// buffer per port, PFC XOFF/XON towards the sending NIC, or tail drop without PFC).
//
// A discrete-event model in picoseconds: one queue of events ordered by (time, sequence), so
// equal inputs give equal runs. Fault decisions (loss, corruption, links down) belong to the
// Wire: the network asks its sink when a frame starts on a NIC's port, and hands every frame
// that reaches a NIC back to the sink.
//
// Not thread-safe: the Wire's owner drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <queue>
#include <vector>

#include "emulator/rnic/nic_profile.h"

namespace pollux::emu::rnic {

struct NetworkStats {
  uint64_t frames = 0;            // started on a NIC port
  uint64_t bytes = 0;             // ... their bytes on the wire (framing included)
  uint64_t buffer_drops = 0;      // a full switch ingress buffer without PFC
  uint64_t pause_frames = 0;      // XOFF sent by the switch
  uint64_t resume_frames = 0;     // XON
  uint64_t paused_ps = 0;         // time NIC ports spent paused (summed over ports)
  uint64_t max_buffered = 0;      // the largest ingress occupancy seen (bytes)
  uint64_t headroom_exceeded = 0; // PFC on, a frame accepted beyond buffer_bytes (a profile
                                  // whose headroom is too small; validate() refuses those)
};

class Network {
 public:
  struct Frame {
    uint64_t src = 0, dst = 0;
    std::vector<uint8_t> bytes;
    SimTime ready = 0;        // when the NIC hands it to its port
    SimTime extra_delay = 0;  // a reordered frame's detour
    uint64_t seq = 0;
    uint32_t in_port = 0;     // the sending NIC's port index
  };
  // The Wire.
  class Sink {
   public:
    virtual ~Sink() = default;
    // The frame starts on its sender's port at t: false if it is lost (it still occupies the
    // port); the sink may corrupt it, and ask for a duplicate or a detour.
    struct Fate {
      bool lost = false;
      bool duplicate = false;
      SimTime delay = 0;
    };
    virtual Fate depart(SimTime t, Frame& f) = 0;
    // The frame's last bit reached its destination NIC at t.
    virtual void arrive(SimTime t, Frame& f) = 0;
  };

  Network(const NicProfile& profile, Sink* sink);

  void add_port(uint64_t address);
  // A NIC's packet, ready at `ready` (>= the time of the last event run).
  void send(SimTime ready, uint64_t src, uint64_t dst, const uint8_t* bytes, std::size_t len);
  // Frames queued on a NIC's port that have not started (the NIC's transmit window).
  uint32_t queued(uint64_t address) const;
  bool paused(uint64_t address) const;

  // Runs every event due at or before t; returns how many ran.
  std::size_t run_until(SimTime t);
  SimTime next_event() const;  // UINT64_MAX when idle
  bool idle() const { return events_.empty(); }
  SimTime now() const { return now_; }
  const NetworkStats& stats() const { return stats_; }
  const NicProfile& profile() const { return p_; }

 private:
  enum class Kind : uint8_t { kTxStart, kSwitchIn, kSwitchTxDone, kPause, kResume, kDeliver };
  struct Event {
    SimTime t;
    uint64_t seq;
    Kind kind;
    uint32_t port;   // NIC port index (kTxStart, kPause, kResume), egress port (kSwitchTxDone)
    uint32_t frame;  // frame slot (kSwitchIn, kSwitchTxDone, kDeliver)
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  struct ByReady {
    const std::deque<Frame>* frames;
    bool operator()(uint32_t a, uint32_t b) const {
      const Frame& x = (*frames)[a];
      const Frame& y = (*frames)[b];
      return x.ready != y.ready ? x.ready > y.ready : x.seq > y.seq;
    }
  };
  struct NicPort {
    uint64_t address = 0;
    std::vector<uint32_t> egress;  // a heap by (ready, seq)
    SimTime busy_until = 0;
    SimTime start_scheduled = UINT64_MAX;  // a kTxStart in the queue for this time
    bool paused = false;
    SimTime paused_since = 0;
    // The switch's side of this port: the ingress buffer and its egress towards the NIC.
    uint64_t ingress_bytes = 0;
    bool xoff_sent = false;
    std::queue<uint32_t> sw_egress;
    bool sw_busy = false;
  };

  void schedule(SimTime t, Kind k, uint32_t port, uint32_t frame);
  void schedule_start(uint32_t port, SimTime t);
  void try_start(uint32_t port);
  void switch_in(uint32_t frame);
  void switch_start(uint32_t out);
  void switch_done(uint32_t out, uint32_t frame);
  uint32_t port_index(uint64_t address) const;
  uint32_t new_frame();
  void free_frame(uint32_t f);
  SimTime ser(const Frame& f) const { return serialisation_time(p_.port, f.bytes.size()); }
  uint64_t frame_bytes(const Frame& f) const { return wire_bytes(p_.port, f.bytes.size()); }

  NicProfile p_;
  Sink* sink_;
  SimTime pause_delay_;  // a PFC frame's trip from the switch to the NIC
  std::vector<NicPort> ports_;
  std::map<uint64_t, uint32_t> index_;
  std::deque<Frame> frames_;  // stable references: a sink call may add a frame
  std::vector<uint32_t> free_frames_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t next_seq_ = 0;
  SimTime now_ = 0;
  NetworkStats stats_;
};

}  // namespace pollux::emu::rnic
