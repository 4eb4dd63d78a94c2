// The emulated target (target.h): timed devices in this process (scenarios/sim's rig), the
// driver attached through the in-process vfio-user boundary, one step-mode reactor in
// lockstep. The fabric target (fabric_target.cc) builds on it: the same drives, behind an
// NVMe-oF target.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "emulator/device/metrics.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/runner/target.h"
#include "scenarios/sim/rig.h"

namespace pollux::scenarios {

class EmulatedTarget : public Target {
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
  void watch(nvme::Qpair* qp, bool created) override {
    if (created)
      rig_->lockstep().watch(qp);
    else
      rig_->lockstep().unwatch(qp);
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
  uint64_t realtime_max_lag_ns() const override {
    return rig_->lockstep().realtime() ? rig_->lockstep().max_lag_ns() : 0;
  }

 protected:
  std::vector<DeviceSpec> specs_;  // names and profiles, for the metrics
  std::vector<emu::timing::Profile> profiles_;
  std::unique_ptr<sim::Rig> rig_;
  std::vector<bool> enabling_;            // per device, for state triggers
  std::vector<uint64_t> gc_relocations_;  // per device: GC relocations seen at the last poll
  std::vector<bool> collecting_;          // per device: the last poll saw GC relocate
  std::vector<uint64_t> lost_to_power_;
};

// The drives of a scenario on a rig (nullptr and *error on failure). tune: the driver
// controllers' options (the host's; nullptr: the driver's defaults).
std::unique_ptr<sim::Rig> make_rig(const Scenario& sc, uint64_t seed, TuneController tune,
                                   std::vector<emu::timing::Profile>* profiles, std::string* error);

}  // namespace pollux::scenarios
