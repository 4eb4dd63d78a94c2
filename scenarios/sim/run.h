// One perf run in virtual time: build the rig, run a job per device on one host core, report.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "driver/metrics/exporter.h"
#include "emulator/rnic/nic_profile.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/sim/lockstep.h"
#include "scenarios/sim/perf_job.h"

namespace pollux::sim {

struct RunSpec {
  emu::timing::Profile profile;
  uint32_t devices = 1;
  uint64_t seed = 1;
  JobOptions job;
  HostCostModel costs;
  // Metrics on: the run collects the event framework's, the queue pairs' and the devices'
  // metrics on its own thread every 50 ms of wall time (and at the end) and publishes them.
  metrics::Snapshot* metrics = nullptr;
  // "" : the devices attached to the host directly (run_perf); "rdma": behind an NVMe-oF
  // target over emulated RoCEv2 NICs (run_rdma_perf, fabric_run.h), this far apart.
  std::string transport;
  uint64_t wire_latency_ns = 2'000;
  // With "rdma": timed NICs of this profile (their ports and cables replace the wire's fixed
  // latency); nullopt: functional NICs.
  std::optional<emu::rnic::NicProfile> nic_profile;
  // With "rdma": the target cores' CPU time; nullopt: their work takes no time.
  std::optional<TargetCostModel> target_costs = TargetCostModel{};
  uint32_t target_cores = 1;  // "rdma": the target's reactors, a poll group on each
  // With "rdma": the target's in-capsule data size (SPDK's nvmf_create_transport -c); 0: every
  // write's data is fetched by RDMA READ, as SPDK's 2017 host did (it sent no in-capsule
  // data); nullopt: the transport's default (4 KiB).
  std::optional<uint32_t> in_capsule_data_size;
  // With "rdma": the hosts' providers push lone WQEs to the NIC with the doorbell, as mlx5's
  // provider sends a single work request by BlueFlame; false: the NIC reads every WQE from the
  // ring.
  bool rnic_push = true;
  // false: the simulation without fast forward (emu::timing::Simulation::set_fast_forward):
  // the same results, more slowly; for checking that.
  bool fast_forward = true;
  // Every trace record as text (time device kind a b c), for comparing two runs; null: none.
  FILE* trace_dump = nullptr;
};

// What the emulator's memory store keeps at the end of the run (namespace 1).
struct StoreReport {
  bool memory = false;  // a MemoryStore (the other fields are 0 otherwise)
  uint64_t pattern_blocks = 0, byte_blocks = 0, memory_bytes = 0;
};

struct DeviceReport {
  JobResult job;
  emu::timing::TimedSsdStats device;
  StoreReport store;
};

struct RunReport {
  std::string error;  // empty: the run happened
  std::vector<DeviceReport> devices;
  double total_iops = 0;
  uint64_t total_ios = 0;     // completions of the whole run (warm-up included)
  uint64_t simulated_ns = 0;  // virtual time the run took
  double wall_seconds = 0;    // host time the run took
  uint64_t host_busy_ns = 0;  // virtual host CPU time charged by the cost model
  uint64_t target_busy_ns = 0;  // "rdma": the target cores', likewise (all of them)
  std::vector<uint64_t> target_core_busy_ns;  // "rdma": each core's
  uint64_t target_commands = 0;  // "rdma": I/O commands the target completed
  uint64_t trace_hash = 0;
  uint64_t trace_records = 0;
  uint64_t steps = 0;
};

RunReport run_perf(const RunSpec& spec);

}  // namespace pollux::sim
