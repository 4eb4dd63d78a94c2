// The RDMA part of a lockstep world: two emulated RoCEv2 NICs (emulator/rnic) on one wire —
// port 1 the target machine's, port 2 the host's — each opened through the driver's verbs
// provider (driver/rdma) over an in-process vfio-user connection, and stepped as part of the
// world in virtual time (Lockstep::add_world / add_event_source): the wire's deliveries and the
// NICs' retransmission and RNR timers are events the idle jump lands on.
//
// Faults a scenario times (each undone by the step at its end, which is an event too): a
// port's link down (a flap), every link down (a partition), a loss or corruption rate on the
// wire, a QP forced to Error (as a NIC's internal error does), a NIC's function-level reset.
// Everything is drawn from the seed: the same seed replays the same packet decisions.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "driver/env/clock.h"
#include "driver/env/memory_registry.h"
#include "driver/metrics/exporter.h"
#include "driver/rdma/verbs.h"
#include "emulator/rnic/cluster.h"

namespace pollux::sim {

enum class RdmaSide { kTarget = 0, kHost = 1 };
const char* to_string(RdmaSide s);

struct RdmaFabricOptions {
  uint64_t seed = 1;
  uint64_t latency_ns = 1000;  // one way, on the wire (functional NICs)
  double loss = 0;             // per packet, all the time (faults add to it for a while)
  // Timed NICs (PCIe, pipelines, the profile's ports, cables and switch) instead of functional
  // ones on a fixed-latency wire: emulator/rnic's NicProfile, e.g. cx4lx-25g or cx5-100g.
  const emu::rnic::NicProfile* nic_profile = nullptr;
  // Both hosts' providers push lone WQEs to their NIC (rdma::RnicOptions::push_wqes).
  bool push_wqes = false;
};

class RdmaFabric {
 public:
  // clock: the lockstep's (1 tick = 1 ns). registry: the memory both NICs reach (their rings,
  // the target's buffers, the host's data). nullptr and *error on failure.
  static std::unique_ptr<RdmaFabric> create(const env::Clock& clock, env::MemoryRegistry& registry,
                                            const RdmaFabricOptions& options, std::string* error);
  ~RdmaFabric();
  RdmaFabric(const RdmaFabric&) = delete;
  RdmaFabric& operator=(const RdmaFabric&) = delete;

  rdma::Context& context(RdmaSide s) { return *contexts_[index(s)]; }
  emu::rnic::RnicDevice& device(RdmaSide s) { return *devices_[index(s)]; }
  const emu::rnic::Rnic& nic(RdmaSide s) const { return devices_[index(s)]->nic(); }
  uint64_t port(RdmaSide s) const { return devices_[index(s)]->nic().port_address(); }
  emu::rnic::Cluster& cluster() { return cluster_; }

  // The world's step: faults whose time is up are undone, then the NICs do what is due now.
  // True if anything happened.
  bool step();
  // The next instant something is due: a delivery, a NIC timer, a fault's end.
  uint64_t next_event_ns() const;

  // ---- faults (from now on, for `duration_ns`) ----
  void link_down(RdmaSide s, uint64_t duration_ns);
  void partition(uint64_t duration_ns);  // both links
  void loss(double rate, uint64_t duration_ns);
  void corrupt(double rate, uint64_t duration_ns);
  // The QP with the n-th lowest number (n modulo their count) among the side's connected QPs
  // (RTR or RTS) fails as after an internal error. Its number, or 0 when none is connected.
  uint32_t fail_qp(RdmaSide s, uint64_t n);
  // The NIC's function-level reset: every resource on it is gone, the NIC disabled until its
  // driver brings it up again.
  void reset_nic(RdmaSide s);

  // What the wire decided, packet by packet (time, ports, opcode, PSN, length, fate): same
  // seed, same hash. Packet bytes are left out: they carry host virtual addresses.
  // The CPU clock of the machine on side s: its NIC dates that machine's doorbell stores by it
  // (emu::rnic::Cluster::set_host_clock). None: the NIC sees them at the step's time.
  void set_cpu_clock(RdmaSide s, std::function<uint64_t()> clock) {
    cluster_.set_host_clock(index(s), std::move(clock));
  }
  uint64_t trace_hash() const { return cluster_.wire().decision_hash(); }
  uint64_t trace_records() const { return cluster_.wire().decisions(); }

  // Per port (NIC) and per QP: packets, bytes, retransmissions, timeouts, RNR and sequence
  // NAKs, errors, message latency; the wire's drops.
  void collect_metrics(metrics::Builder& b) const;

 private:
  RdmaFabric(const env::Clock& clock, const RdmaFabricOptions& o);
  static std::size_t index(RdmaSide s) { return static_cast<std::size_t>(s); }
  void apply(uint64_t now);  // the wire's faults and links as of now

  const env::Clock& clock_;
  RdmaFabricOptions o_;
  emu::rnic::Cluster cluster_;
  std::array<emu::rnic::RnicDevice*, 2> devices_{};
  std::array<std::unique_ptr<rdma::Context>, 2> contexts_;
  std::array<uint64_t, 2> down_until_{};  // per side: its link is down until then
  uint64_t loss_until_ = 0, corrupt_until_ = 0;
  double loss_rate_ = 0, corrupt_rate_ = 0;
  std::array<bool, 2> down_{};  // as applied
  uint64_t link_flaps_ = 0;
};

}  // namespace pollux::sim
