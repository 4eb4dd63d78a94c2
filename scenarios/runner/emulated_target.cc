// The emulated target: timed devices in this process (scenarios/sim's rig), the driver
// attached through the in-process vfio-user boundary, one step-mode reactor in lockstep.
#include "scenarios/runner/emulated_target.h"

#include <random>

#include "emulator/nvme/fault_commands.h"
#include "scenarios/runner/device_profile.h"

namespace pollux::scenarios {

InjectResult EmulatedTarget::inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                                    uint64_t seed) {
  InjectResult r;
  emu::nvme::Controller& ctrl = rig_->device(d).controller();
  switch (s.kind) {
    case FaultKind::kFatal:
      ctrl.inject_fatal_status();
      break;
    case FaultKind::kDisable:
      ctrl.inject_spontaneous_disable();
      break;
    case FaultKind::kPowerLoss: {
      const auto lost = rig_->sim().device(d).power_loss();
      lost_to_power_[d] += lost.size();
      r.power_lost = true;
      r.detail = std::to_string(lost.size()) + " acknowledged writes lost from a volatile cache";
      break;
    }
    case FaultKind::kReadyDelay:
      rig_->sim().device(d).delay_next_ready(s.delay_ns * emu::timing::kNs);
      r.detail = "next enable +" + format_ns(s.delay_ns);
      break;
    case FaultKind::kCommand: {
      const std::string reply = emu::nvme::apply_fault_command(ctrl, s.command_json);
      if (reply.find("\"ok\":true") == std::string::npos) r.error = reply;
      r.detail = s.command_json;
      break;
    }
    case FaultKind::kBadBlocks: {
      std::mt19937_64 rng(seed);
      for (uint32_t i = 0; i < s.count && range_blocks > 0; ++i) {
        ctrl.faults().add_bad_block(
            1, std::uniform_int_distribution<uint64_t>(0, range_blocks - 1)(rng));
      }
      r.detail = std::to_string(ctrl.faults().bad_blocks()) + " bad blocks on the device";
      r.open_window = true;  // reads of a bad block fail until a write heals it
      break;
    }
    case FaultKind::kClear:
      ctrl.faults().clear_rules();
      ctrl.faults().clear_bad_blocks();
      break;
    case FaultKind::kHotRemove:
    case FaultKind::kHotInsert:
    case FaultKind::kHostReset:
    case FaultKind::kConnectionDrop:
    case FaultKind::kPartition:
    case FaultKind::kLatency:
    case FaultKind::kCorruption:
    case FaultKind::kKeepaliveExpiry:
    case FaultKind::kTargetRestart:
    case FaultKind::kLinkFlap:
    case FaultKind::kLoss:
    case FaultKind::kQpError:
    case FaultKind::kNicReset:
    case FaultKind::kBadRkey:
      r.error = "not a device-side fault";
      break;
  }
  return r;
}

// A device enters a state when the controller starts enabling (CC.EN 0 -> 1 until RDY), or
// garbage collection starts relocating (a step that relocated after one that did not: its
// NAND operations are booked and under way).
void EmulatedTarget::poll_states(bool gc,
                                 const std::function<void(uint32_t, const char*)>& entered) {
  for (uint32_t d = 0; d < enabling_.size(); ++d) {
    const bool e = rig_->device(d).controller().enabling();
    if (e && !enabling_[d]) entered(d, "controller_init");
    enabling_[d] = e;
    if (!gc) continue;
    const uint64_t r = rig_->sim().device(d).stats().ftl.gc_relocations;
    // (A power cycle may start the counters again from zero.)
    const bool collecting = r > gc_relocations_[d] || (r < gc_relocations_[d] && r != 0);
    gc_relocations_[d] = r;
    if (collecting && !collecting_[d]) entered(d, "gc");
    collecting_[d] = collecting;
  }
}

std::unique_ptr<sim::Rig> make_rig(const Scenario& sc, uint64_t seed, TuneController tune,
                                   std::vector<emu::timing::Profile>* profiles,
                                   std::string* error) {
  for (const DeviceSpec& d : sc.devices) {
    auto p = device_profile(d);
    if (!p) {
      *error = p.error();
      return nullptr;
    }
    profiles->push_back(std::move(p).value());
  }
  sim::RigOptions ro;
  ro.profiles = *profiles;
  ro.seed = seed;
  ro.attach_controllers = false;
  ro.tune_controller = std::move(tune);
  // Behind a fabric target the drives give each target core a queue pair (Number of Queues).
  if (sc.fabric) ro.io_queues = sc.fabric->target_cores;
  auto rig = sim::Rig::create(ro, error);
  if (!rig) return nullptr;
  for (uint32_t i = 0; i < rig->devices(); ++i) {
    rig->device(i).controller().faults().reseed(seed * 1000003 + i);
  }
  return rig;
}

std::unique_ptr<Target> make_emulated_target(const Scenario& sc, uint64_t seed, TuneController tune,
                                             std::string* error) {
  std::vector<emu::timing::Profile> profiles;
  auto rig = make_rig(sc, seed, std::move(tune), &profiles, error);
  if (!rig) return nullptr;
  return std::make_unique<EmulatedTarget>(sc, std::move(profiles), std::move(rig));
}

}  // namespace pollux::scenarios
