#include "scenarios/sim/run.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "driver/metrics/event_source.h"
#include "driver/metrics/nvme_source.h"
#include "emulator/device/metrics.h"
#include "emulator/nvme/namespace_store.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim {

RunReport run_perf(const RunSpec& spec) {
  RunReport rep;
  // Jobs stop at a duration or an I/O count; with neither the run would never end.
  if (spec.job.duration_ns == 0 && spec.job.max_ios == 0) {
    rep.error = "the run has no end: give a duration or an I/O count";
    return rep;
  }
  const auto wall0 = std::chrono::steady_clock::now();
  RigOptions ro;
  ro.profile = spec.profile;
  ro.devices = spec.devices;
  ro.seed = spec.seed;
  ro.costs = spec.costs;
  ro.fast_forward = spec.fast_forward;
  auto rig = Rig::create(ro, &rep.error);
  if (!rig) return rep;
  rig->sim().trace().dump_to(spec.trace_dump);
  std::vector<std::unique_ptr<PerfJob>> jobs;
  for (uint32_t i = 0; i < rig->device_count(); ++i) {
    std::string err;
    JobOptions jo = spec.job;
    jo.track_latency = spec.metrics != nullptr;
    auto job = std::make_unique<PerfJob>(rig->controller(i), 1, jo, rig->sim().rng(),
                                         rig->clock(), rig->registry(), &err);
    if (!job->ok()) {
      rep.error = "device " + std::to_string(i) + ": " + err;
      return rep;
    }
    rig->lockstep().watch(job->qpair());
    jobs.push_back(std::move(job));
  }
  if (spec.job.stack_ns) {  // the host wakes when an I/O's stack time is over
    rig->lockstep().add_event_source([&jobs] {
      uint64_t next = UINT64_MAX;
      for (const auto& j : jobs) next = std::min(next, j->next_due_ns());
      return next;
    });
  }
  metrics::QpairRegistry qpairs;
  std::unique_ptr<metrics::Exporter> sources;
  if (spec.metrics) {
    sources = std::make_unique<metrics::Exporter>();
    sources->add_source(metrics::event_source(rig->framework()));
    for (uint32_t i = 0; i < jobs.size(); ++i) qpairs.add(jobs[i]->qpair(), "dev" + std::to_string(i));
    sources->add_source(qpairs.source());
    sources->add_source([&rig, &spec](metrics::Builder& b) {
      b.gauge("pollux_emu_simulated_seconds", "Simulated time of the run (virtual or paced)", {},
              static_cast<double>(rig->lockstep().now_ns()) * 1e-9);
      for (uint32_t i = 0; i < rig->device_count(); ++i) {
        emu::device::DeviceMetricsInput in;
        in.name = "dev" + std::to_string(i);
        in.profile = spec.profile.name;
        in.controller = &rig->device(i).controller();
        in.timed = &rig->sim().device(i);
        in.now = rig->sim().now();
        std::vector<prometheus::MetricFamily> device;
        emu::device::append_device_metrics(in, device);
        for (const auto& f : device) b.family(f);
      }
    });
  }
  auto last_publish = std::chrono::steady_clock::now();
  auto publish = [&](bool now) {
    if (!sources) return;
    const auto w = std::chrono::steady_clock::now();
    if (!now && w - last_publish < std::chrono::milliseconds(50)) return;
    last_publish = w;
    spec.metrics->publish(sources->collect());
  };
  const uint64_t t0 = rig->lockstep().now_ns();
  const uint64_t steps0 = rig->lockstep().steps();
  const uint64_t busy0 = rig->lockstep().host_busy_ns();
  PerfWorker worker;  // one poller for the host core's jobs, as SPDK's perf
  for (auto& j : jobs) worker.add(j.get());
  worker.start(rig->thread());
  auto all_done = [&] {
    for (auto& j : jobs)
      if (!j->done()) return false;
    return true;
  };
  for (uint64_t n = 0; !all_done(); ++n) {
    rig->lockstep().step();
    if ((n & 4095) == 0) publish(false);  // the wall clock only now and then
  }
  publish(true);
  rep.simulated_ns = rig->lockstep().now_ns() - t0;
  rep.steps = rig->lockstep().steps() - steps0;
  rep.host_busy_ns = rig->lockstep().host_busy_ns() - busy0;
  for (uint32_t i = 0; i < jobs.size(); ++i) {
    DeviceReport d;
    d.job = jobs[i]->result();
    d.device = rig->sim().device(i).stats();
    if (const auto* m = dynamic_cast<const emu::nvme::MemoryStore*>(
            rig->device(i).controller().namespace_store(1))) {
      d.store = StoreReport{true, m->pattern_blocks(), m->byte_blocks(), m->memory_bytes()};
    }
    rep.total_iops += d.job.iops();
    rep.total_ios += jobs[i]->qpair()->stats().completed;
    rep.devices.push_back(d);
  }
  rep.trace_hash = rig->sim().trace().hash();
  rep.trace_records = rig->sim().trace().records();
  sources.reset();  // its sources read the rig and the queue pairs
  for (auto& j : jobs) rig->lockstep().unwatch(j->qpair());
  worker.stop();
  jobs.clear();
  rig.reset();
  rep.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return rep;
}

}  // namespace pollux::sim
