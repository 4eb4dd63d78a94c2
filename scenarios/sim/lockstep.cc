#include "scenarios/sim/lockstep.h"

#include <algorithm>

namespace pollux::sim {

Lockstep::Lockstep(emu::timing::Simulation& sim, event::Framework& fw, env::VirtualClock& clock,
                   HostCostModel costs)
    : sim_(sim), fw_(fw), clock_(clock), costs_(costs) {
  clock_.set(sim_.now() / emu::timing::kNs);
  fw_.set_cpu_clock(&cpu_clock_);
}

Lockstep::~Lockstep() {
  if (&fw_.cpu_clock() == &cpu_clock_) fw_.set_cpu_clock(nullptr);
}

void Lockstep::watch(nvme::Qpair* qp) {
  charges_.watch(qp);
}

// Its work so far stays charged to this step: the CPU clock never goes back.
void Lockstep::unwatch(nvme::Qpair* qp) {
  charges_.unwatch(qp);
}

// Virtual: the step's time so far, as the framework reads it between two of its pollers. The
// work of the step is charged to the virtual clock when the step ends, so the reading does
// not jump then. Realtime: the wall clock (never behind the virtual clock, which follows it).
uint64_t Lockstep::cpu_now_ns() const {
  if (realtime_) return std::max(clock_.now(), wall_.now_ns());
  bool work = false;
  return clock_.now() + charges_.uncharged_ns(&work);
}

bool Lockstep::step_world() {
  if (in_world_ || world_frozen_ || world_.empty()) return false;
  in_world_ = true;
  bool work = false;
  for (auto& w : world_) work |= w();
  in_world_ = false;
  return work;
}

// The idle jump's bound: no further than the next event of any source.
uint64_t Lockstep::jump_cap(uint64_t t) const {
  uint64_t cap = costs_.idle_jump_cap_ns;
  for (const auto& next : sources_) {
    const uint64_t e = next();
    cap = e <= t ? 0 : std::min(cap, e - t);
  }
  return cap;
}

// The reactor's iteration costs reactor_iteration_ns beyond what its pollers did (in realtime
// its own readings hold what it cost).
bool Lockstep::step() {
  fw_.step(realtime_ ? 0 : costs_.reactor_iteration_ns);
  const bool world = step_world();
  ++steps_;
  bool work = false;
  const uint64_t cost = costs_.reactor_iteration_ns + charges_.charge(&work);
  advance(cost, !work, !work && !world);
  return work;
}

void Lockstep::wait_turn() {
  const bool world = step_world();
  advance(costs_.wait_turn_ns, true, !world);
}

// Back to virtual time from realtime: from where the wall clock has got to, so the CPU clock
// does not go back.
void Lockstep::set_realtime(bool on) {
  if (realtime_) clock_.set(cpu_now_ns());
  realtime_ = on;
  if (on) {
    wall_.start(clock_.now());
    max_lag_ns_ = 0;
  }
}

void Lockstep::advance(uint64_t cost_ns, bool idle, bool may_jump) {
  using emu::timing::kNs;
  if (realtime_) {
    const uint64_t t = cpu_now_ns();
    host_busy_ns_ += idle ? 0 : t - clock_.now();
    max_lag_ns_ = std::max(max_lag_ns_, t - clock_.now());  // the model is at clock_.now()
    sim_.run_until(t * kNs);
    sim_.scan();
    sim_.run_until(t * kNs);  // what the doorbells just seen start at t
    clock_.set(t);
    if (after_advance_) after_advance_();
    return;
  }
  host_busy_ns_ += idle ? 0 : cost_ns;
  uint64_t t = clock_.now() + cost_ns;
  const uint64_t seen = sim_.host_visible_events();
  // The device sees what the host wrote during this step at the step's end.
  sim_.run_until(t * kNs);
  sim_.scan();
  // A completion posted during the step's own time is there for the next poll: jumping past
  // it would add the whole jump to its latency (the null profile's QD1 read took 20 us).
  if (may_jump && sim_.host_visible_events() == seen) {
    // Nothing for the host to do until a device posts a completion: skip the empty polls
    // (bounded, so host timers and the next network event are not skipped over).
    sim_.run_until((t + jump_cap(t)) * kNs, /*stop_at_completion=*/true);
    t = std::max(t, (sim_.now() + kNs - 1) / kNs);
  }
  sim_.run_until(t * kNs);
  clock_.set(t);
  if (after_advance_) after_advance_();
}

}  // namespace pollux::sim
