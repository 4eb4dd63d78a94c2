// A complete virtual-time test rig in one process: N timed devices of one profile (emulator,
// SystemC), the unchanged polled driver attached to each through the in-process vfio-user
// boundary, one step-mode reactor on a virtual clock, and the lockstep that ties them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/memory_registry.h"
#include "driver/event/framework.h"
#include "driver/nvme/controller.h"
#include "emulator/device/nvme_device.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/simulation.h"
#include "scenarios/sim/lockstep.h"

namespace pollux::sim {

struct RigOptions {
  emu::timing::Profile profile;
  uint32_t devices = 1;
  uint64_t seed = 1;
  HostCostModel costs;
  uint32_t io_queues = 1;  // Number of Queues requested per controller
  // One profile per device (then `profile` and `devices` are ignored): a mixed topology.
  std::vector<emu::timing::Profile> profiles;
  // false: no driver controllers are attached; the caller connects them (connect()).
  bool attach_controllers = true;
  // Adjusts every driver controller's options before attach (timeouts, recovery policy).
  std::function<void(nvme::ControllerOptions&)> tune_controller;
  bool fast_forward = true;  // emu::timing::Simulation::set_fast_forward
};

class Rig {
 public:
  // Returns nullptr and sets *error on failure (bad profile, attach failure...).
  static std::unique_ptr<Rig> create(const RigOptions& options, std::string* error);
  ~Rig();

  emu::timing::Simulation& sim() { return *sim_; }
  Lockstep& lockstep() { return *lockstep_; }
  event::Framework& framework() { return *fw_; }
  event::Thread& thread() { return *thread_; }
  env::VirtualClock& clock() { return clock_; }
  env::MemoryRegistry& registry() { return registry_; }
  uint32_t device_count() const { return static_cast<uint32_t>(controllers_.size()); }
  nvme::Controller& controller(uint32_t i) { return *controllers_[i]; }
  emu::device::NvmeDevice& device(uint32_t i) { return *devices_[i]; }

  // Hot-plug: pull device i out (surprise removal; the driver finds out by itself), put it
  // back (a fresh function on the same data), and attach a new driver controller to it (the
  // old one must have no queue pairs left). reattach returns "" or the error.
  void hot_remove(uint32_t i) { devices_[i]->surprise_remove(); }
  void hot_insert(uint32_t i) { devices_[i]->insert(); }
  std::string reattach(uint32_t i);
  // A new driver controller for device i, owned by the caller (e.g. the bdev layer), or
  // nullptr with *error set. It must be destroyed before the rig.
  std::unique_ptr<nvme::Controller> connect(uint32_t i, std::string* error);
  const emu::timing::Profile& profile(uint32_t i) const { return profiles_[i]; }
  uint32_t devices() const { return static_cast<uint32_t>(devices_.size()); }

 private:
  Rig() = default;
  env::VirtualClock clock_{1'000'000'000};  // 1 tick = 1 ns
  env::MemoryRegistry registry_;
  std::vector<std::unique_ptr<emu::device::NvmeDevice>> devices_;  // outlive the simulation
  std::unique_ptr<emu::timing::Simulation> sim_;
  std::unique_ptr<event::Framework> fw_;
  event::Thread* thread_ = nullptr;
  std::unique_ptr<Lockstep> lockstep_;
  std::vector<std::unique_ptr<nvme::Controller>> controllers_;
  std::string attach(uint32_t i, std::unique_ptr<nvme::Controller>* out);
  uint32_t io_queues_ = 1;
  std::vector<emu::timing::Profile> profiles_;
  std::function<void(nvme::ControllerOptions&)> tune_;
};

}  // namespace pollux::sim
