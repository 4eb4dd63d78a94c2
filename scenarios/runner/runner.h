// Runs a scenario: builds the topology on its target (timed emulated devices in virtual time,
// or QEMU's controller through vfio-pci in real time: target.h), the unchanged driver and
// bdev_nvme with its hot-plug poller on one step-mode reactor, runs the verified workloads,
// fires the fault timeline at its instants, sweeps every written block through the oracle at
// the end, and judges the expectations.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driver/env/histogram.h"
#include "driver/metrics/exporter.h"
#include "scenarios/runner/recorder.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {

struct RunOptions {
  uint64_t seed = 0;      // 0: the scenario's own seed
  bool progress = false;  // a live progress line on stderr
  uint32_t buckets = 200; // time buckets of the report's charts
  std::string replay;     // the command that replays this run (printed on failure)
  std::string time;       // virtual | realtime; "": the scenario's
  // Metrics (docs/METRICS.md): the run publishes its host stack's, its devices' and its own
  // metrics here every 50 ms of wall time and at the end (the lockstep thread collects them;
  // a scrape never touches the run). nullptr: none.
  metrics::Snapshot* metrics = nullptr;
};

struct FaultOutcome {
  FaultSpec spec;
  uint32_t device = 0;
  bool fired = false;
  uint64_t fired_ns = 0;
  uint64_t recovery_from_ns = 0;  // the fault, or the re-insertion after a hot-remove
  bool recovered = false;
  uint64_t recovery_ns = 0;       // to the first I/O submitted after it that succeeded
  std::string detail;             // what happened ("12 writes lost in the cache", ...)
  // Its error window (errors of I/O in flight in it are allowed); to_ns = kOpenWindow: to the
  // end of the run.
  uint64_t window_from_ns = 0, window_to_ns = 0;
};

// One expectation as judged: what was measured against what was allowed.
struct ExpectationOutcome {
  std::string name;      // "recovery after 'pull the drive'"
  std::string measured;  // "1.2ms"
  std::string limit;     // "<= 3ms"
  bool passed = false;
};

struct WorkloadOutcome {
  std::string name, bdev;
  std::string what;  // random, 50% reads, 4 KiB, QD 16, 12ms over 8 MiB
  uint64_t reads = 0, writes = 0, flushes = 0, errors = 0, verified_reads = 0, reopens = 0;
  uint64_t crossed_power_loss = 0;
};

struct DeviceOutcome {
  std::string name, profile, bdev;
  bool attached_at_end = false;
  uint64_t host_resets = 0, host_reset_failures = 0, retries = 0, removed_failures = 0;
  bool device_counters = true;  // false: the device's own counters are unknown (QEMU's)
  uint64_t device_resets = 0, fault_hits = 0, writes_lost_to_power = 0;
  uint64_t gc_relocations = 0, nand_erases = 0;  // NAND media: the FTL's garbage collection
  uint64_t swept_blocks = 0, sweep_read_errors = 0;
  uint64_t violations = 0;
};

// One poller's share of the host's CPU time spent in its busy runs, per time bucket (the
// Grafana "top pollers by busy time" panel: in virtual time the lockstep's host cost model
// charges it, in realtime the TSC measures it), and its share of runs that found work.
struct PollerSeries {
  std::string name;  // "thread/poller"
  std::vector<double> busy_time_share;
  std::vector<double> busy_share;  // of runs
  uint64_t runs = 0, busy_runs = 0, busy_ns = 0;
};

struct RunResult {
  std::string error;                 // set-up failed: nothing ran
  bool passed = false;
  std::vector<std::string> failures; // each failed expectation, in words
  std::vector<ExpectationOutcome> expectations;  // every expectation judged, passed or not
  std::string scenario, file;
  uint64_t seed = 0;
  std::string time = "virtual";  // realtime: the trace is not reproducible
  uint64_t trace_hash = 0, trace_records = 0;
  uint64_t simulated_ns = 0, planned_ns = 0, steps = 0;
  double wall_seconds = 0;
  // The host's reactors over the run (their CPU clock: Framework::cpu_clock), summed.
  uint64_t host_busy_ns = 0, host_idle_ns = 0;
  // A fabric target's cores over the run (virtual time, summed; 0 where none is modelled).
  uint64_t target_busy_ns = 0, target_commands = 0;
  uint32_t target_cores = 0;                  // 0: no fabric target
  std::vector<uint64_t> target_core_busy_ns;  // each core's share of target_busy_ns
  // Realtime: the most the emulated devices' model lagged behind the wall clock; beyond
  // kRealtimeLagWarnNs the run's timings are this machine's, not the profiles' (a warning).
  uint64_t realtime_max_lag_ns = 0;
  uint64_t ios = 0, errors = 0, errors_outside_windows = 0;
  env::LatencyHistogram latency, latency_outside;
  std::vector<Bucket> series;
  uint64_t bucket_ns = 0;
  std::vector<FaultOutcome> faults;
  std::vector<WorkloadOutcome> workloads;
  std::vector<DeviceOutcome> devices;
  std::vector<PollerSeries> pollers;  // busiest first
  std::vector<std::string> notes;       // "lvol: ..." (what the lvstores went through), "fabric: ..."
  // A fabric's transport counters at the end (target.h), and the retransmissions of them.
  std::vector<std::pair<std::string, uint64_t>> fabric;
  uint64_t retransmissions = 0;
  std::vector<std::string> violations;  // the first few, in words
  uint64_t violation_count = 0;
  uint32_t devices_at_end = 0;
  std::string replay;
};

inline constexpr uint64_t kRealtimeLagWarnNs = 1'000'000;  // pollux-emu's --warn-lag-us default

RunResult run_scenario(const Scenario& scenario, const RunOptions& options);

}  // namespace pollux::scenarios
