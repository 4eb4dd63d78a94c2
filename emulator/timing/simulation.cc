#include "emulator/rtl/rtl_queue_engine.h"
// (Verilator before SystemC)
#include <algorithm>
#include <cstdlib>

#include "emulator/timing/simulation.h"
#include "emulator/timing/timed_ssd.h"

namespace pollux::emu::timing {

Simulation::Simulation(uint64_t seed) : seed_(seed), rng_(seed) {
  ::setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  // A kernel context of our own: SystemC elaborates a context once, and the library's first
  // context must stay alive until exit (static objects of the library refer to it).
  previous_context_ = sc_core::sc_get_curr_simcontext();
  auto* ctx = new sc_core::sc_simcontext();
  sc_core::sc_curr_simcontext = ctx;
  sc_core::sc_default_global_context = ctx;
  context_ = ctx;
  sc_core::sc_report_handler::set_actions(sc_core::SC_ID_NO_SC_START_ACTIVITY_,
                                          sc_core::SC_DO_NOTHING);
}

Simulation::~Simulation() {
  if (model_clock::next_event_ctx == this) {
    model_clock::next_event_fn = nullptr;
    model_clock::next_event_ctx = nullptr;
    model_clock::kernel_events = true;
  }
  devices_.clear();
  model_clock::floor = 0;
  auto* previous = static_cast<sc_core::sc_simcontext*>(previous_context_);
  sc_core::sc_curr_simcontext = previous;
  sc_core::sc_default_global_context = previous;
  delete static_cast<sc_core::sc_simcontext*>(context_);
}

nvme::Result<uint32_t> Simulation::add_device(const Profile& profile, nvme::Controller& c) {
  if (started_) return nvme::Error{"simulation: devices must be added before it runs"};
  if (profile.fidelity == Fidelity::kFunctional) {
    return nvme::Error{"simulation: profile '" + profile.name +
                       "' has fidelity functional (no timing model to add)"};
  }
  if (nvme::Status s = validate(profile); !s) return nvme::Error{s.error()};
  const uint32_t index = device_count();
  const std::string name = "ssd" + std::to_string(index);
  devices_.push_back(std::make_unique<TimedSsd>(name.c_str(), profile, c, rng_, trace_, index,
                                                [this] { host_visible_event(); }));
  return index;
}

void Simulation::elaborate_if_needed() {
  if (started_) return;
  started_ = true;
  event_times_.reset(2 * devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) devices_[i]->bind_event_slots(&event_times_, 2 * i);
  model_clock::floor = 0;
  model_clock::kernel_events = !fast_forward_;
  if (fast_forward_) event_times_.begin_fresh(now_);
  model_clock::next_event_fn = [](void* sim) {
    return static_cast<const Simulation*>(sim)->next_kernel_event();
  };
  model_clock::next_event_ctx = this;
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
}

void Simulation::scan(SimTime (*clock)(void* ctx), void* ctx) {
  elaborate_if_needed();
  for (auto& d : devices_) d->scan(clock, ctx);
}

// Without the fast-forward every run enters the kernel. (sc_start(d) stops at now + d with the
// events due then triggered but not run: a run to t followed by a run to a time <= t runs
// them, as the lockstep does after its scan; a notification made outside the kernel for its
// current time needs two such runs.)
void Simulation::run_until(SimTime t, bool stop_at_completion) {
  elaborate_if_needed();
  if (fast_forward_) {
    dispatch_until(t, stop_at_completion);
    return;
  }
  const SimTime next = next_kernel_event();
  if (t <= now_) {
    // One run: it runs what the last run reached at now_, and what was notified since (a
    // doorbell seen by a scan, at now_) only becomes due, to run first at the next run.
    // (Asking the kernel for a run with nothing due makes SystemC warn, slowly.)
    if (next <= now_) kernel_run(now_, false);
    return;
  }
  kernel_run(t, stop_at_completion);
}

// The fast-forward's run: the devices' events are not the kernel's (model_clock::kernel_events)
// but their own records' (event_times_), run here in time order — each as its SystemC process
// would run, at its own time — what a kernel run to t would run:
//   t later than now: every event before t (those at t are the next run's);
//   t not later (sc_start(0): one delta cycle): the events due now that were pending when the
//   last run ended — not those notified since for now (by a scan: "fresh"), nor those the
//   events run here notify for now; the next run runs them.
// At equal times the lower slot goes first (a device's due completions before its engine's
// clock edge, devices in order); the kernel orders such ties by its heap's history. Between
// devices the order changes nothing (the trace folds an instant as a set); within one device a
// completion due on its engine's clock edge is posted at that edge here, one period later were
// the edge to run first: the kernel may do either, so fast_forward_test's workloads agreeing
// with it shows such ties are rare, not that they cannot differ. Due first is what the model
// does without a tie (a completion due on an edge not yet taken is served by that edge). With
// stop_at_completion, it stops after the event that made a completion entry visible (the
// kernel pauses at the end of that delta cycle: the host sees the same entries, and the rest
// of the instant runs before its next step either way).
void Simulation::dispatch_until(SimTime t, bool stop_at_completion) {
  event_times_.end_fresh();
  if (t <= now_) {  // (no edge runs ahead: run_ahead_limit stays 0, none lies before now)
    due_now_.clear();
    for (size_t s = 0; s < event_times_.size(); ++s) {
      if (event_times_.at(s) <= now_ && !event_times_.fresh(s)) due_now_.push_back(s);
    }
    event_times_.clear_fresh();
    for (const size_t s : due_now_) {
      if (event_times_.at(s) <= now_) devices_[s / 2]->run_event(s % 2 == 0);
    }
    event_times_.begin_fresh(now_);
    return;
  }
  event_times_.clear_fresh();
  const uint64_t seen = visible_events_;
  pausing_ = stop_at_completion;
  paused_at_ = 0;
  model_clock::run_ahead_limit = t;
  for (;;) {
    const SimTime e = event_times_.next();
    if (e >= t) break;
    set_now(std::max(now_, e));
    const size_t slot = event_times_.earliest();
    devices_[slot / 2]->run_event(slot % 2 == 0);
    if (stop_at_completion && visible_events_ != seen) {
      set_now(std::max(now_, paused_at_));
      break;
    }
  }
  if (!stop_at_completion || visible_events_ == seen) set_now(t);
  model_clock::run_ahead_limit = 0;
  pausing_ = false;
  event_times_.begin_fresh(now_);
}

// Every kernel event is a device's (its engine's clock, its due completions), and each device
// keeps the time of its own in event_times_: no query of the kernel's queues.
SimTime Simulation::next_kernel_event() const {
  return event_times_.next();
}

// (run_ahead_limit stays 0: every edge is an event of the kernel's.)
void Simulation::kernel_run(SimTime t, bool stop_at_completion) {
  pausing_ = stop_at_completion;
  sc_core::sc_start(sc_ps(t > kernel_now() ? t - kernel_now() : 0));
  pausing_ = false;
  set_now(std::max(now_, kernel_now()));
}

void Simulation::set_now(SimTime t) {
  now_ = t;
  model_clock::floor = t;
}

void Simulation::host_visible_event() {
  ++visible_events_;
  if (pausing_) {
    model_clock::run_ahead_limit = 0;  // the host looks at the time of this completion
    paused_at_ = std::max(paused_at_, sc_now());
    if (model_clock::kernel_events) sc_core::sc_pause();
  }
}

SimTime Simulation::now() const {
  return now_;
}

std::optional<SimTime> Simulation::next_event() const {
  if (!started_) return std::nullopt;
  if (fast_forward_) {
    const SimTime e = next_kernel_event();
    if (e == EventTimes::kNever) return std::nullopt;
    return std::max(now_, e);
  }
  if (!sc_core::sc_pending_activity()) return std::nullopt;
  return std::max(now_, kernel_query_next_event());
}

}  // namespace pollux::emu::timing

// libsystemc.so defines main() and calls sc_main() from it. Pollux programs bring their own
// main(), which wins over the library's; this weak definition only satisfies the linker.
// (A test binary must still not link gtest_main: an archive's main is not pulled in when the
// shared library already provides one. Tests define main() themselves.)
__attribute__((weak)) int sc_main(int, char**) {
  return 1;
}
