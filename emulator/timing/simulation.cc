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
  // One device answers for itself: keeping a minimum of two would only cost it.
  if (devices_.size() > 1) {
    event_times_.reset(2 * devices_.size());
    for (size_t i = 0; i < devices_.size(); ++i)
      devices_[i]->bind_event_slots(&event_times_, 2 * i);
  }
  model_clock::floor = 0;
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

// The kernel is entered only when an event is due up to t: otherwise the models' time moves on
// alone (modules.h, "time") and the kernel catches up at its next run. Every event then lies at
// or after the models' time, so running the kernel from its own, earlier, time changes nothing.
// (sc_start(d) stops at now + d with the events due then triggered but not run: a run to t
// followed by a run to a time <= t runs them, as the lockstep does after its scan; a
// notification made outside the kernel for its current time needs two such runs.)
void Simulation::run_until(SimTime t, bool stop_at_completion) {
  elaborate_if_needed();
  const SimTime next = next_kernel_event();
  if (t <= now_) {
    // One run, as without the fast-forward: it runs what the last run reached at now_, and
    // what was notified since (a doorbell seen by a scan, at now_) only becomes due, to run
    // first at the next run. A kernel left behind reaches now_ the same way: what is due then
    // (all of it notified since, by construction) is triggered and runs at the next run.
    // (Asking the kernel for a run with nothing due makes SystemC warn, slowly.)
    if (next <= now_) kernel_run(now_, false);
    return;
  }
  if (next > t && fast_forward_) {
    set_now(t);
    return;
  }
  kernel_run(t, stop_at_completion);
}

// Every kernel event is a device's (its engine's clock, its due completions), and each
// device knows when its own are due (several keep them in event_times_ too): no query of the
// kernel's queues.
SimTime Simulation::next_kernel_event() const {
  if (devices_.size() == 1) return devices_[0]->next_event_time();
  return event_times_.next();
}

void Simulation::kernel_run(SimTime t, bool stop_at_completion) {
  pausing_ = stop_at_completion;
  model_clock::run_ahead_limit = fast_forward_ ? t : 0;
  paused_at_ = 0;
  sc_core::sc_start(sc_ps(t > kernel_now() ? t - kernel_now() : 0));
  model_clock::run_ahead_limit = 0;
  pausing_ = false;
  // Paused at a completion an engine posted running ahead: the time is that edge's.
  set_now(std::max({now_, kernel_now(), paused_at_}));
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
    sc_core::sc_pause();
  }
}

SimTime Simulation::now() const {
  return now_;
}

std::optional<SimTime> Simulation::next_event() const {
  if (!started_) return std::nullopt;
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
