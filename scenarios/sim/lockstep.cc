#include "scenarios/sim/lockstep.h"

#include <algorithm>

namespace pollux::sim {

Lockstep::Lockstep(emu::timing::Simulation& sim, event::Framework& fw, env::VirtualClock& clock,
                   HostCostModel costs)
    : sim_(sim), fw_(fw), clock_(clock), costs_(costs) {
  clock_.set(sim_.now() / emu::timing::kNs);
}

void Lockstep::watch(const nvme::Qpair* qp) {
  const nvme::QpairStats& s = qp->stats();
  watched_.push_back(Watched{qp, s.submitted, s.completed, s.doorbells});
}

void Lockstep::unwatch(const nvme::Qpair* qp) {
  std::erase_if(watched_, [qp](const Watched& w) { return w.qp == qp; });
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

bool Lockstep::step() {
  fw_.step();
  const bool world = step_world();
  ++steps_;
  uint64_t cost = costs_.reactor_iteration_ns;
  bool work = false;
  for (Watched& w : watched_) {
    const nvme::QpairStats& s = w.qp->stats();
    const uint64_t sub = s.submitted - w.submitted, cpl = s.completed - w.completed,
                   db = s.doorbells - w.doorbells;
    w.submitted = s.submitted;
    w.completed = s.completed;
    w.doorbells = s.doorbells;
    cost += costs_.poll_ns + sub * costs_.submit_ns + cpl * costs_.complete_ns +
            db * costs_.doorbell_ns;
    work |= sub != 0 || cpl != 0;
  }
  advance(cost, !work, !work && !world);
  return work;
}

void Lockstep::wait_turn() {
  const bool world = step_world();
  advance(costs_.wait_turn_ns, true, !world);
}

void Lockstep::set_realtime(bool on) {
  realtime_ = on;
  wall0_ = std::chrono::steady_clock::now();
  base_ns_ = clock_.now();
}

void Lockstep::advance(uint64_t cost_ns, bool idle, bool may_jump) {
  using emu::timing::kNs;
  if (realtime_) {
    const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - wall0_);
    const uint64_t t = std::max<uint64_t>(clock_.now(), base_ns_ + wall.count());
    host_busy_ns_ += idle ? 0 : t - clock_.now();
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
