// Deterministic lockstep of a host stack and simulated devices in one process (virtual time).
//
// The simulator owns the clock. Each step runs every reactor once (the event framework's step
// mode), charges the host work it did to virtual time through a cost model calibrated from
// the driver's measured costs (docs/BENCHMARKS.md), then lets the devices catch up to the new
// time. When the host found nothing to do, time jumps to the next device event (bounded, so
// host timers still fire on time). Same seed + same configuration = same event trace.
//
// The rest of the world (add_world): other machines in the same virtual time — a fabric
// target on its own step-mode framework — stepped once per step and per set-up wait turn,
// never charged to the host. Event sources (add_event_source) — a simulated network — bound
// the idle jump so it lands on their next event instead of skipping it. With neither, a run
// is exactly what it was without them (device-only trace hashes do not change).
//
// Realtime mode (set_realtime): the same loop, but time is the wall clock — each step the
// devices catch up to the wall clock instead of to the host's modelled cost, and nothing is
// skipped, so the host's real CPU time counts and a completion is seen no earlier than its
// simulated time (later when this machine is slow). Host and devices still share one thread.
// Not deterministic.
//
// The host's CPU time (the event framework's busy and idle statistics) is what this models:
// the lockstep is the framework's CPU clock (Framework::set_cpu_clock). In virtual time a
// reading is the virtual time plus the modelled cost of the work done since the last step
// ended, so a poller's run lasts what its polls, submissions, completions and doorbells cost;
// the fixed cost of an iteration is the reactor's; the time the clock then moves on (the rest
// of the step's cost, the idle jump) is the reactor's idle time. In realtime it is the TSC on
// the virtual clock's scale. Either way a reactor's busy + idle is the time it ran through.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "driver/env/clock.h"
#include "driver/event/framework.h"
#include "driver/nvme/qpair.h"
#include "emulator/timing/simulation.h"
#include "scenarios/sim/cpu_cost.h"

namespace pollux::sim {

class Lockstep {
 public:
  // Becomes fw's CPU clock until destroyed (fw must outlive it).
  Lockstep(emu::timing::Simulation& sim, event::Framework& fw, env::VirtualClock& clock,
           HostCostModel costs = {});
  ~Lockstep();
  Lockstep(const Lockstep&) = delete;
  Lockstep& operator=(const Lockstep&) = delete;
  // Queue pairs whose work is charged to host time (they count it into one group, read at
  // every reading of the CPU clock): on their owner thread; unwatch one before it is freed.
  void watch(nvme::Qpair* qp);
  void unwatch(nvme::Qpair* qp);

  // One host step and device catch-up. Returns whether the host did any work.
  bool step();
  // For nvme::ControllerOptions::wait_hook: a set-up path waits for the device (the world
  // is stepped too; the host never).
  void wait_turn();
  // Another machine's step (true: it did work). Steps the world never nest: a world's own
  // set-up wait that lands in wait_turn() only advances time.
  void add_world(std::function<bool()> step) { world_.push_back(std::move(step)); }
  // The instant (ns) of a source's next event, UINT64_MAX for none.
  void add_event_source(std::function<uint64_t()> next_event_ns) {
    sources_.push_back(std::move(next_event_ns));
  }
  // Stops (true) or resumes stepping the world: the other machine hangs, its peers' timers
  // run on (a keep-alive expiry).
  void freeze_world(bool frozen) { world_frozen_ = frozen; }
  // Called after every advance of time (host steps and set-up waits alike): a scenario's
  // timeline fires device faults at their instant even inside a host reset's wait loop. It
  // must not step the host.
  void set_after_advance(std::function<void()> fn) { after_advance_ = std::move(fn); }
  // From now on time follows the wall clock (from the current time on); false: virtual again.
  void set_realtime(bool on);
  bool realtime() const { return realtime_; }

  uint64_t now_ns() const { return clock_.now(); }
  // The host's CPU clock now (what the framework measures busy and idle time with), in ns.
  uint64_t cpu_now_ns() const;
  const env::Clock& cpu_clock() const { return cpu_clock_; }
  uint64_t host_busy_ns() const { return host_busy_ns_; }
  // Realtime: the most the devices' model lagged behind the wall clock since realtime began
  // (a step's span: what the devices did in it, the host saw up to this late).
  uint64_t max_lag_ns() const { return max_lag_ns_; }
  uint64_t steps() const { return steps_; }
  const HostCostModel& costs() const { return costs_; }

 private:
  void advance(uint64_t cost_ns, bool host_idle, bool may_jump);
  bool step_world();
  uint64_t jump_cap(uint64_t t) const;

  emu::timing::Simulation& sim_;
  event::Framework& fw_;
  env::VirtualClock& clock_;
  HostCostModel costs_;
  QpairCharges charges_{costs_};
  // The framework's view of cpu_now_ns().
  struct ReadCpu {
    const Lockstep* ls;
    uint64_t operator()() const { return ls->cpu_now_ns(); }
  };
  FnClock<ReadCpu> cpu_clock_{ReadCpu{this}};
  uint64_t host_busy_ns_ = 0;
  uint64_t max_lag_ns_ = 0;
  uint64_t steps_ = 0;
  std::function<void()> after_advance_;
  std::vector<std::function<bool()>> world_;
  std::vector<std::function<uint64_t()>> sources_;
  bool in_world_ = false, world_frozen_ = false;
  bool realtime_ = false;
  WallNs wall_;  // realtime: the TSC from the virtual time realtime began at
};

}  // namespace pollux::sim
