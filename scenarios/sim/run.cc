#include "scenarios/sim/run.h"

#include <chrono>
#include <memory>

#include "scenarios/sim/rig.h"

namespace pollux::sim {

RunReport run_perf(const RunSpec& spec) {
  RunReport rep;
  const auto wall0 = std::chrono::steady_clock::now();
  RigOptions ro;
  ro.profile = spec.profile;
  ro.devices = spec.devices;
  ro.seed = spec.seed;
  ro.costs = spec.costs;
  auto rig = Rig::create(ro, &rep.error);
  if (!rig) return rep;
  std::vector<std::unique_ptr<PerfJob>> jobs;
  for (uint32_t i = 0; i < rig->device_count(); ++i) {
    std::string err;
    auto job = std::make_unique<PerfJob>(rig->controller(i), 1, spec.job, rig->sim().rng(),
                                         rig->clock(), rig->registry(), &err);
    if (!job->ok()) {
      rep.error = "device " + std::to_string(i) + ": " + err;
      return rep;
    }
    rig->lockstep().watch(job->qpair());
    jobs.push_back(std::move(job));
  }
  const uint64_t t0 = rig->lockstep().now_ns();
  const uint64_t steps0 = rig->lockstep().steps();
  const uint64_t busy0 = rig->lockstep().host_busy_ns();
  for (auto& j : jobs) j->start(rig->thread());
  auto all_done = [&] {
    for (auto& j : jobs)
      if (!j->done()) return false;
    return true;
  };
  while (!all_done()) rig->lockstep().step();
  rep.simulated_ns = rig->lockstep().now_ns() - t0;
  rep.steps = rig->lockstep().steps() - steps0;
  rep.host_busy_ns = rig->lockstep().host_busy_ns() - busy0;
  for (uint32_t i = 0; i < jobs.size(); ++i) {
    DeviceReport d;
    d.job = jobs[i]->result();
    d.device = rig->sim().device(i).stats();
    rep.total_iops += d.job.iops();
    rep.total_ios += jobs[i]->qpair()->stats().completed;
    rep.devices.push_back(d);
  }
  rep.trace_hash = rig->sim().trace().hash();
  rep.trace_records = rig->sim().trace().records();
  for (auto& j : jobs) rig->lockstep().unwatch(j->qpair());
  jobs.clear();
  rig.reset();
  rep.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return rep;
}

}  // namespace pollux::sim
