#include "scenarios/sim/fabric_run.h"

#include <chrono>
#include <memory>

#include "driver/bdev/modules/nvme.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/nvme_source.h"
#include "driver/nvme/transport_id.h"
#include "emulator/device/metrics.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/host.h"
#include "scenarios/sim/fabric_target.h"
#include "scenarios/sim/rdma_fabric.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim {
namespace {

std::string nqn_of(uint32_t device) {
  return "nqn.2026-11.io.pollux:dev" + std::to_string(device);
}

}  // namespace

RunReport run_rdma_perf(const RunSpec& spec) {
  RunReport rep;
  if (spec.job.stack_ns) {  // the fabric's host is polled; no event source wakes it
    rep.error = "JobOptions::stack_ns is for local runs";
    return rep;
  }
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
  ro.attach_controllers = false;  // the target's bdev_nvme drives them
  ro.io_queues = spec.target_cores;  // a queue pair per target core (poll group)
  auto rig = Rig::create(ro, &rep.error);
  if (!rig) return rep;
  rig->sim().trace().dump_to(spec.trace_dump);
  Lockstep& ls = rig->lockstep();
  auto turn = [&ls] { ls.wait_turn(); };
  // The CM's out-of-band exchange: as fast as the wire, never timing out a connection.
  fabric::net::SimNetwork net(rig->clock(), spec.seed ^ 0xc0ffee5eedull);
  fabric::net::LinkConfig cm;
  cm.latency_ns = spec.wire_latency_ns;
  cm.bandwidth_bps = 100'000'000'000;
  cm.rto_ns = 200'000;
  cm.user_timeout_ns = 3'600'000'000'000ull;
  net.set_default_link(cm);
  auto fab = RdmaFabric::create(rig->clock(), rig->registry(),
                                RdmaFabricOptions{spec.seed, spec.wire_latency_ns, 0,
                                                  spec.nic_profile ? &*spec.nic_profile : nullptr,
                                                  spec.rnic_push},
                                &rep.error);
  if (!fab) return rep;
  FabricTargetOptions fo;
  fo.trtype = "RDMA";
  fo.rdma_context = &fab->context(RdmaSide::kTarget);
  fo.registry = &rig->registry();
  fo.costs = spec.target_costs;
  fo.cores = spec.target_cores;
  if (spec.in_capsule_data_size) fo.rdma.in_capsule_data_size = *spec.in_capsule_data_size;
  // Data buffers for every command twelve drives at QD 128 keep in flight (the SPDK paper's
  // Figure 8 set-up; SPDK's default is 4,095 buffers of 8 KiB io units, ours are one buffer of
  // max_io_size per command). Untouched buffers cost address space, not memory.
  fo.rdma.num_shared_buffers = 2048;
  auto target = FabricTarget::create(rig->clock(), net, fo, &rep.error);
  if (!target) return rep;
  ls.add_world([&] { return target->step(); });
  ls.add_world([&] { return fab->step(); });
  // Each side's NIC sees its doorbells when that side's software has run (its CPU clock).
  fab->set_cpu_clock(RdmaSide::kHost, [&ls] { return ls.cpu_now_ns(); });
  fab->set_cpu_clock(RdmaSide::kTarget, [&] { return target ? target->stores_at_ns() : 0; });
  ls.add_event_source([&] { return net.next_event_ns(); });
  ls.add_event_source([&] { return fab->next_event_ns(); });
  ls.add_event_source([&] { return target ? target->next_event_ns() : UINT64_MAX; });
  net.set_wait_hook(turn);
  std::vector<std::unique_ptr<nvme::Controller>> hosts;
  std::vector<std::unique_ptr<PerfJob>> jobs;
  // The host's side first (its queues disconnect over the wire), then the target with the
  // drives it holds, then the NICs.
  auto teardown = [&] {
    for (auto& j : jobs) ls.unwatch(j->qpair());
    jobs.clear();
    hosts.clear();
    if (!target->shutdown(turn) && rep.error.empty()) rep.error = "the target could not stop";
    target.reset();
    fab.reset();
  };

  std::vector<FabricSubsystem> subsystems;
  for (uint32_t i = 0; i < rig->devices(); ++i) {
    std::string err;
    auto ctrl = rig->connect(i, &err);
    if (!ctrl) {
      rep.error = "target: device " + std::to_string(i) + ": " + err;
      teardown();
      return rep;
    }
    event::CurrentThreadScope scope(&target->thread());
    bdev::NvmeBdevOptions o;
    o.name = "dev" + std::to_string(i);
    o.registry = &rig->registry();
    o.qpair_observer = target->qpair_observer();
    auto names = bdev::nvme_attach_controller(target->bdevs(), std::move(ctrl), o);
    if (!names) {
      rep.error = "target: attach " + o.name + ": " + names.error().message;
      teardown();
      return rep;
    }
    subsystems.push_back({nqn_of(i), {o.name + "n1"}});
  }
  if (std::string e = target->start(subsystems, turn); !e.empty()) {
    rep.error = e;
    teardown();
    return rep;
  }

  for (uint32_t i = 0; i < rig->devices(); ++i) {
    auto trid = nvme::parse_transport_id(
        "trtype:rdma adrfam:ipv4 traddr:10.0.0.1 trsvcid:4420 "
        "subnqn:" +
        nqn_of(i));
    fabric::rdma::RdmaHostOptions ho;
    ho.context = &fab->context(RdmaSide::kHost);
    ho.cm_network = &net;
    ho.registry = &rig->registry();
    auto transport = fabric::rdma::RdmaTransport::create(trid.value(), ho);
    if (!transport) {
      rep.error = "host: " + transport.error().message;
      teardown();
      return rep;
    }
    nvme::ControllerOptions co;
    co.clock = &rig->clock();
    co.registry = &rig->registry();
    co.wait_hook = turn;
    co.hostnqn = "nqn.2026-11.io.pollux:sim-host";
    co.io_queues_requested = 1;
    auto c = nvme::Controller::attach(std::move(transport).value(), co);
    if (!c) {
      rep.error = "host: device " + std::to_string(i) + ": " + c.error().message;
      teardown();
      return rep;
    }
    hosts.push_back(std::move(c).value());
    std::string err;
    JobOptions jo = spec.job;
    jo.track_latency = spec.metrics != nullptr;
    auto job = std::make_unique<PerfJob>(*hosts.back(), 1, jo, rig->sim().rng(), rig->clock(),
                                         rig->registry(), &err);
    if (!job->ok()) {
      rep.error = "device " + std::to_string(i) + ": " + err;
      teardown();
      return rep;
    }
    ls.watch(job->qpair());
    jobs.push_back(std::move(job));
  }

  metrics::QpairRegistry qpairs;
  std::unique_ptr<metrics::Exporter> sources;
  if (spec.metrics) {
    sources = std::make_unique<metrics::Exporter>();
    sources->add_source(metrics::event_source(rig->framework()));
    for (uint32_t i = 0; i < jobs.size(); ++i)
      qpairs.add(jobs[i]->qpair(), "dev" + std::to_string(i));
    sources->add_source(qpairs.source());
    sources->add_source([&](metrics::Builder& b) {
      b.gauge("pollux_emu_simulated_seconds", "Simulated time of the run (virtual or paced)", {},
              static_cast<double>(ls.now_ns()) * 1e-9);
      for (uint32_t i = 0; i < rig->devices(); ++i) {
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
      fab->collect_metrics(b);
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
  const uint64_t t0 = ls.now_ns(), steps0 = ls.steps(), busy0 = ls.host_busy_ns();
  const uint64_t target_busy0 = target->busy_ns(), commands0 = target->commands_completed();
  std::vector<uint64_t> core_busy0(target->cores());
  for (uint32_t i = 0; i < target->cores(); ++i) core_busy0[i] = target->busy_ns(i);
  for (auto& j : jobs) j->start(rig->thread());
  auto all_done = [&] {
    for (auto& j : jobs)
      if (!j->done()) return false;
    return true;
  };
  for (uint64_t n = 0; !all_done(); ++n) {
    ls.step();
    if ((n & 4095) == 0) publish(false);
  }
  publish(true);
  rep.simulated_ns = ls.now_ns() - t0;
  rep.steps = ls.steps() - steps0;
  rep.host_busy_ns = ls.host_busy_ns() - busy0;
  rep.target_busy_ns = target->busy_ns() - target_busy0;
  for (uint32_t i = 0; i < target->cores(); ++i)
    rep.target_core_busy_ns.push_back(target->busy_ns(i) - core_busy0[i]);
  rep.target_commands = target->commands_completed() - commands0;
  for (uint32_t i = 0; i < jobs.size(); ++i) {
    DeviceReport d;
    d.job = jobs[i]->result();
    d.device = rig->sim().device(i).stats();
    rep.total_iops += d.job.iops();
    rep.total_ios += jobs[i]->qpair()->stats().completed;
    rep.devices.push_back(d);
  }
  rep.trace_hash = rig->sim().trace().hash() ^ (net.trace_hash() * 0x9e3779b97f4a7c15ull) ^
                   (fab->trace_hash() * 0xc2b2ae3d27d4eb4full);
  rep.trace_records = rig->sim().trace().records() + net.trace_records() + fab->trace_records();
  sources.reset();
  teardown();
  rig.reset();
  rep.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return rep;
}

}  // namespace pollux::sim
