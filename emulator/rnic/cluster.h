// Several emulated RNICs on one Wire, and a virtual clock to drive them: the in-process test
// bed for the RDMA stack. The host side (driver/rdma over a vfio-user connection from
// RnicDevice::connect()) runs on the same thread: it posts and polls between calls here.
//
// Time advances only here. step() does all the work due at the current time; run_for() and
// run_until_idle() alternate steps with jumps to the next event (a delivery or a frame on
// the wire, a NIC's pipeline, completion write or retransmission/RNR timer), so a 600 ms RNR
// wait costs no wall time. The lockstep engine can drive the same objects through the same
// calls (step_at, next_event_ns). Same seed, same inputs: same packet trace and end time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "emulator/rnic/rnic_device.h"
#include "emulator/rnic/wire.h"

namespace pollux::emu::rnic {

class Cluster {
 public:
  // Functional NICs on a wire with a fixed latency.
  explicit Cluster(uint64_t seed, WireFaults faults = {}, uint64_t latency_ns = 1000);
  // Timed NICs (PCIe, pipelines) on the profile's network (ports, cables, switch, PFC).
  Cluster(uint64_t seed, const NicProfile& profile, WireFaults faults = {});

  // A new NIC with port address count()+1 on the wire; nullptr if it could not be created.
  // On a timed cluster it gets the cluster's profile unless `config` names its own.
  RnicDevice* add_nic(RnicConfig config = {});
  // The cluster's timing profile, or nullptr (functional).
  const NicProfile* profile() const { return profile_ ? &*profile_ : nullptr; }
  RnicDevice& nic(std::size_t i) { return *nics_.at(i); }
  std::size_t count() const { return nics_.size(); }
  Wire& wire() { return wire_; }
  const Wire& wire() const { return wire_; }
  uint64_t now_ns() const { return now_; }

  // All the work due now: deliveries, then each NIC. True if anything happened.
  bool step();
  // For an engine that owns the clock (scenarios/sim's Lockstep: add_world / add_event_source):
  // time moves to t (never back) and the work due then is done; and the next instant at which
  // anything is due (a delivery or a NIC timer), UINT64_MAX for none.
  bool step_at(uint64_t t_ns) {
    if (t_ns > now_) now_ = t_ns;
    return step();
  }
  uint64_t next_event_ns() const;
  // The CPU clock of the host driving NIC i (Rnic::process's stores_at): its doorbell stores
  // are dated by it. None: now.
  void set_host_clock(std::size_t i, std::function<uint64_t()> clock) {
    if (clocks_.size() <= i) clocks_.resize(i + 1);
    clocks_[i] = std::move(clock);
  }
  // Steps and jumps from event to event until now + ns (now ends there).
  void run_for(uint64_t ns);
  // ... until nothing is pending at all, or `limit_ns` of virtual time went by. True if idle.
  bool run_until_idle(uint64_t limit_ns = 10'000'000'000ull);

 private:
  Wire wire_;
  std::optional<NicProfile> profile_;
  std::vector<std::unique_ptr<RnicDevice>> nics_;
  std::vector<std::function<uint64_t()>> clocks_;
  uint64_t now_ = 0;
};

}  // namespace pollux::emu::rnic
