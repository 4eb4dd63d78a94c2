// The emulated target: timed devices in this process (scenarios/sim's rig), the driver
// attached through the in-process vfio-user boundary, one step-mode reactor in lockstep.
#include <random>

#include "emulator/device/metrics.h"
#include "emulator/nvme/fault_commands.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/runner/device_profile.h"
#include "scenarios/runner/target.h"
#include "scenarios/sim/rig.h"

namespace pollux::scenarios {
namespace {

class EmulatedTarget final : public Target {
 public:
  EmulatedTarget(const Scenario& sc, std::vector<emu::timing::Profile> profiles,
                 std::unique_ptr<sim::Rig> rig)
      : specs_(sc.devices), profiles_(std::move(profiles)), rig_(std::move(rig)) {
    enabling_.assign(rig_->devices(), false);
    gc_relocations_.assign(rig_->devices(), 0);
    collecting_.assign(rig_->devices(), false);
    lost_to_power_.assign(rig_->devices(), 0);
  }
  ~EmulatedTarget() override { rig_->lockstep().set_after_advance(nullptr); }

  event::Framework& framework() override { return rig_->framework(); }
  event::Thread& thread() override { return rig_->thread(); }
  env::MemoryRegistry& registry() override { return rig_->registry(); }
  const env::Clock& clock() override { return rig_->clock(); }
  uint32_t devices() const override { return rig_->devices(); }

  Result<std::unique_ptr<nvme::Controller>> connect(uint32_t d) override {
    std::string e;
    auto c = rig_->connect(d, &e);
    if (!c) return make_error(ENODEV, e);
    return c;
  }
  bool present(uint32_t d) override { return rig_->device(d).present(); }
  bool power_loss_protected(uint32_t d) const override {
    const emu::timing::CacheProfile& cache = profiles_[d].cache;
    return cache.bytes == 0 || cache.power_loss_protection;
  }
  void watch(const nvme::Qpair* qp, bool created) override {
    if (created) rig_->lockstep().watch(qp);
    else rig_->lockstep().unwatch(qp);
  }

  void step() override { rig_->lockstep().step(); }
  std::string set_realtime(bool on) override {
    rig_->lockstep().set_realtime(on);
    return "";
  }
  void set_after_advance(std::function<void()> fn) override {
    rig_->lockstep().set_after_advance(std::move(fn));
  }
  uint64_t settle_ns() const override { return 20'000'000; }

  std::string hot_remove(uint32_t d) override {
    rig_->hot_remove(d);
    return "";
  }
  std::string hot_insert(uint32_t d) override {
    rig_->hot_insert(d);
    return "";
  }
  InjectResult inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                      uint64_t seed) override;
  void poll_states(bool gc, const std::function<void(uint32_t, const char*)>& entered) override;

  std::string describe(uint32_t d) override {
    const emu::nvme::Controller& c = rig_->device(d).controller();
    return std::string(c.ready() ? " ready" : " not-ready") + (c.fatal() ? " fatal" : "") +
           (rig_->device(d).present() ? "" : " removed") + " in-flight " +
           std::to_string(rig_->sim().device(d).stats().in_flight);
  }
  void outcome(uint32_t d, DeviceOutcome* out) override {
    const emu::nvme::Controller& c = rig_->device(d).controller();
    out->device_resets = c.counters().resets;
    const emu::timing::TimedSsdStats ts = rig_->sim().device(d).stats();
    out->gc_relocations = ts.ftl.gc_relocations;
    out->nand_erases = ts.ftl.erases;
    out->fault_hits = c.fault_hits();
    out->writes_lost_to_power = lost_to_power_[d];
  }
  void collect_metrics(metrics::Builder& b, uint64_t now_ns) const override {
    b.gauge("pollux_emu_simulated_seconds", "Simulated time of the run (virtual or paced)", {},
            static_cast<double>(now_ns) * 1e-9);
    for (uint32_t i = 0; i < rig_->devices(); ++i) {
      emu::device::DeviceMetricsInput in;
      in.name = specs_[i].name;
      in.profile = specs_[i].profile;
      in.controller = &rig_->device(i).controller();
      in.timed = &rig_->sim().device(i);
      in.now = rig_->sim().now();
      in.present = rig_->device(i).present();
      in.writes_lost_to_power = lost_to_power_[i];
      std::vector<prometheus::MetricFamily> device;
      emu::device::append_device_metrics(in, device);
      for (const auto& f : device) b.family(f);
    }
  }
  uint64_t trace_hash() const override { return rig_->sim().trace().hash(); }
  uint64_t trace_records() const override { return rig_->sim().trace().records(); }
  uint64_t steps() const override { return rig_->lockstep().steps(); }

 private:
  std::vector<DeviceSpec> specs_;  // names and profiles, for the metrics
  std::vector<emu::timing::Profile> profiles_;
  std::unique_ptr<sim::Rig> rig_;
  std::vector<bool> enabling_;            // per device, for state triggers
  std::vector<uint64_t> gc_relocations_;  // per device: GC relocations seen at the last poll
  std::vector<bool> collecting_;          // per device: the last poll saw GC relocate
  std::vector<uint64_t> lost_to_power_;
};

InjectResult EmulatedTarget::inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                                    uint64_t seed) {
  InjectResult r;
  emu::nvme::Controller& ctrl = rig_->device(d).controller();
  switch (s.kind) {
    case FaultKind::kFatal: ctrl.inject_fatal_status(); break;
    case FaultKind::kDisable: ctrl.inject_spontaneous_disable(); break;
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
    case FaultKind::kHostReset: r.error = "not a device-side fault"; break;
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

}  // namespace

std::unique_ptr<Target> make_emulated_target(const Scenario& sc, uint64_t seed,
                                             TuneController tune, std::string* error) {
  auto fail = [error](const std::string& why) -> std::unique_ptr<Target> {
    *error = why;
    return nullptr;
  };
  std::vector<emu::timing::Profile> profiles;
  for (const DeviceSpec& d : sc.devices) {
    auto p = device_profile(d);
    if (!p) return fail(p.error());
    profiles.push_back(std::move(p).value());
  }
  sim::RigOptions ro;
  ro.profiles = profiles;
  ro.seed = seed;
  ro.attach_controllers = false;
  ro.tune_controller = std::move(tune);
  auto rig = sim::Rig::create(ro, error);
  if (!rig) return nullptr;
  for (uint32_t i = 0; i < rig->devices(); ++i) {
    rig->device(i).controller().faults().reseed(seed * 1000003 + i);
  }
  return std::make_unique<EmulatedTarget>(sc, std::move(profiles), std::move(rig));
}

}  // namespace pollux::scenarios
