#include "emulator/rtl/rtl_queue_engine.h"
// (Verilator before SystemC)
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
  devices_.clear();
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
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
}

void Simulation::scan(SimTime (*clock)(void* ctx), void* ctx) {
  elaborate_if_needed();
  for (auto& d : devices_) d->scan(clock, ctx);
}

void Simulation::run_until(SimTime t, bool stop_at_completion) {
  elaborate_if_needed();
  const SimTime now = sc_now();
  if (t <= now) {
    // Delta cycles at the current time (asking for none would make SystemC warn, slowly).
    if (sc_core::sc_pending_activity_at_current_time()) sc_core::sc_start(sc_core::SC_ZERO_TIME);
    return;
  }
  pausing_ = stop_at_completion;
  sc_core::sc_start(sc_ps(t - now));
  pausing_ = false;
}

void Simulation::host_visible_event() {
  ++visible_events_;
  if (pausing_) sc_core::sc_pause();
}

SimTime Simulation::now() const {
  return sc_now();
}

std::optional<SimTime> Simulation::next_event() const {
  if (!started_) return std::nullopt;
  if (!sc_core::sc_pending_activity()) return std::nullopt;
  return sc_now() + sc_core::sc_time_to_pending_activity().value();
}

}  // namespace pollux::emu::timing

// libsystemc.so defines main() and calls sc_main() from it. Pollux programs bring their own
// main(), which wins over the library's; this weak definition only satisfies the linker.
// (A test binary must still not link gtest_main: an archive's main is not pulled in when the
// shared library already provides one. Tests define main() themselves.)
__attribute__((weak)) int sc_main(int, char**) {
  return 1;
}
