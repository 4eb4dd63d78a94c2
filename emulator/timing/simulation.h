// One SystemC simulation: the devices in it, its clock, its seeded random generator and its
// event trace. SystemC allows one elaboration per kernel context; a Simulation makes a fresh
// context of its own, so a process can build several in turn (tests do), one at a time.
//
// Time modes:
//   virtual  — the owner advances time explicitly (run_until), in lockstep with a host stack
//              stepped in the same process (see scenarios/sim). Deterministic.
//   realtime — the owner runs it to the wall clock's time, scanning with a wall-clock read
//              (pollux-emu, Lockstep::set_realtime); a driver in another process sees
//              completions when wall time reaches their simulated time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "emulator/nvme/controller.h"
#include "emulator/nvme/result.h"
#include "emulator/timing/event_times.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"
#include "emulator/timing/trace.h"

namespace pollux::emu::timing {

class TimedSsd;

class Simulation {
 public:
  explicit Simulation(uint64_t seed);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // Adds a timed device in front of `controller` (which must outlive the simulation).
  // Only before the first run_until(). Returns its index.
  nvme::Result<uint32_t> add_device(const Profile& profile, nvme::Controller& controller);
  uint32_t device_count() const { return static_cast<uint32_t>(devices_.size()); }
  TimedSsd& device(uint32_t i) { return *devices_[i]; }

  // Every device notices doorbell writes made up to now (see TimedSsd::scan for `clock`).
  void scan(SimTime (*clock)(void* ctx) = nullptr, void* ctx = nullptr);
  // Runs the events before time t — a run to a time not later than now, those pending now
  // (dispatch_until). With stop_at_completion, returns early, at the time a device posted a
  // completion entry (the host has something to see).
  void run_until(SimTime t, bool stop_at_completion = false);
  SimTime now() const;
  // Fast forward (default on): the devices' events never enter the SystemC kernel — the
  // simulation runs them from the devices' own records in time order (dispatch_until), and
  // a queue engine runs the clock edges nothing can come between in one activation (modules.h,
  // "time"). Off: every event and every edge is the kernel's, as before; the same run then
  // gives the same trace (fast_forward_test) — only slower. Ignored once the simulation has
  // started (its first run or scan).
  void set_fast_forward(bool on) {
    if (!started_) fast_forward_ = on;
  }
  bool fast_forward() const { return fast_forward_; }
  // The time of the next pending event, if any.
  std::optional<SimTime> next_event() const;

  uint64_t seed() const { return seed_; }
  std::mt19937_64& rng() { return rng_; }
  Trace& trace() { return trace_; }
  // Devices call this when a completion entry became visible to the host.
  void host_visible_event();
  // Completion entries made visible so far (a lockstep host knows whether one came while it
  // was not looking).
  uint64_t host_visible_events() const { return visible_events_; }

 private:
  void elaborate_if_needed();
  void kernel_run(SimTime t, bool stop_at_completion);
  void dispatch_until(SimTime t, bool stop_at_completion);
  SimTime next_kernel_event() const;  // absolute; ~0 for none
  void set_now(SimTime t);
  uint64_t seed_;
  std::mt19937_64 rng_;
  Trace trace_;
  std::vector<std::unique_ptr<TimedSsd>> devices_;
  // Each device's two kernel events' times (bound when the simulation starts): the next
  // kernel event is their minimum, read without visiting the devices.
  EventTimes event_times_;
  std::vector<size_t> due_now_;  // dispatch_until's snapshot
  bool started_ = false;
  uint64_t visible_events_ = 0;
  SimTime now_ = 0;  // the models' time (the kernel's may lag: modules.h, "time")
  bool pausing_ = false;
  SimTime paused_at_ = 0;
  bool fast_forward_ = true;
  void* context_ = nullptr;           // the sc_simcontext this simulation built
  void* previous_context_ = nullptr;  // restored when it ends
};

}  // namespace pollux::emu::timing
