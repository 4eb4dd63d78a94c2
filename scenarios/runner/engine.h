// The scenario engine's internals (runner.cc: set-up, the fault timeline, the sweep;
// judge.cc: the expectations, the metrics, the poller series). Not an interface: runner.h is.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/metrics/bdev_source.h"
#include "driver/metrics/exporter.h"
#include "driver/metrics/nvme_source.h"
#include "scenarios/runner/lvol_host.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/target.h"
#include "scenarios/runner/workload.h"

namespace pollux::scenarios::engine {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kDefaultWindowNs = 10'000'000;
constexpr uint32_t kSweepBlocks = 64;
constexpr uint64_t kBdevStatsPeriodUs = 1000;  // virtual time: runs last milliseconds

struct Fault {
  FaultOutcome out;
  bool insert_pending = false;  // hot_remove with reinsert_after
  uint64_t insert_at = 0;
  size_t window = 0;
  bool window_open = false;
  uint32_t state_seen = 0;
};

class Engine {
 public:
  Engine(const Scenario& sc, const RunOptions& o) : sc_(sc), o_(o) {
    seed_ = o.seed ? o.seed : sc.seed;
  }
  ~Engine() { teardown(); }
  RunResult run();

 private:
  std::string setup();
  void tick();  // after every advance of virtual time: the fault timeline
  void fire(Fault& f, uint64_t now);
  void insert(Fault& f, uint64_t now);
  void host_actions();
  void track_recovery(uint64_t now);
  void progress(uint64_t now, bool last);
  void settle();
  void sweep();
  std::string zero_spans();
  // One bdev I/O (submit(cb, arg) returns the submission's rc), run to its end or for at
  // most io_wait_ns() of the target's time (kHung: given up on, its completion may come).
  enum class IoEnd { kOk, kFailed, kHung };
  IoEnd run_io(const std::function<int(bdev::IoCompletionFn, void*)>& submit);
  uint64_t io_wait_ns() const;
  struct IoDone {
    bool done = false, ok = false;
    static void cb(bdev::BdevIo&, bool success, void* arg) {
      auto* d = static_cast<IoDone*>(arg);
      d->done = true;
      d->ok = success;
    }
  };
  void take_cpu_time(RunResult& r);  // the pollers' series, the host's busy and idle time
  void judge(RunResult& r);
  uint64_t outstanding() const;  // the workloads' I/Os in flight
  void teardown();
  // Poller runs and busy time since the last sample, into the bucket the last one named;
  // `bucket` is the next one's.
  void sample_pollers(size_t bucket);
  void collect_metrics(metrics::Builder& b) const;  // devices, controllers, the run itself
  void publish_metrics(bool now);
  uint64_t now() const { return target_->clock().now() - t0_; }
  uint32_t device_index(const std::string& name) const;
  std::string fail_fault(Fault& f, const std::string& why);
  std::string setup_lvols();
  uint64_t last_success(uint32_t device) const;  // of its own and its lvols' workloads
  template <class F>
  void for_each_track(F&& f) {  // devices' and lvols'
    for (auto& t : tracks_) f(*t);
    for (auto& t : volume_tracks_) f(*t);
  }

  Scenario sc_;
  RunOptions o_;
  uint64_t seed_ = 1;
  std::unique_ptr<Target> target_;
  std::unique_ptr<bdev::Manager> mgr_;
  std::vector<std::unique_ptr<DeviceTrack>> tracks_;          // per device
  std::vector<std::unique_ptr<DeviceTrack>> volume_tracks_;   // per lvol workload
  std::unique_ptr<LvolHost> lvols_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  std::unique_ptr<Recorder> rec_;
  std::vector<Fault> faults_;
  std::vector<bool> pulled_;  // per device: hot-removed by the timeline, not inserted again
  bool gc_triggers_ = false;
  std::vector<Fault*> host_resets_;  // host actions waiting for the main loop
  std::vector<std::string> runtime_errors_;
  std::vector<std::unique_ptr<IoDone>> abandoned_;  // I/Os given up on: kept past teardown
  uint64_t t0_ = 0;
  bool armed_ = false;
  bool hotplug_ = false;
  Clock::time_point wall0_, last_progress_, last_metrics_;
  metrics::QpairRegistry qpairs_;
  std::unique_ptr<metrics::Exporter> metrics_;  // the sources, collected on this thread
  std::unique_ptr<metrics::BdevCollector> bdev_stats_;
  struct PollerTrack {
    uint64_t runs = 0, busy_runs = 0, busy_ticks = 0;  // at the last sample
    PollerSeries series;
  };
  std::map<std::string, PollerTrack> pollers_;
  size_t poller_bucket_ = 0;  // the bucket the next sample's runs belong to
  uint64_t poller_sampled_ns_ = 0;  // run time of the last sample
  uint64_t reactor_busy0_ = 0, reactor_idle0_ = 0;  // the host's reactors when the run began
  uint64_t target_busy0_ = 0, target_commands0_ = 0;  // a fabric target's core, likewise
  std::vector<uint64_t> target_core_busy0_;
  uint64_t reactor_ticks(bool busy) const;
  uint64_t host_resets() const;  // resets the host's bdev_nvme controllers completed, summed
  bool expectations_judged_ = false, passed_ = false;
  uint64_t expectation_failures_ = 0;
};

// "random, 50% reads, 4 KiB, QD 16, 12ms over 8 MiB, flush every 32, on a thin lvol"
std::string describe(const WorkloadSpec& w);

}  // namespace pollux::scenarios::engine
