// The host's logical volumes in a scenario (WorkloadSpec::lvol): an lvstore per base bdev with
// one lvol per workload, kept loaded through what a host lives through. A power loss crashes
// the host's lvstore (nothing more is written; it is gone with the host's memory); the base's
// hot removal takes it down by itself. A keeper poller loads it again — dirty, so the load
// recovers — as soon as the base bdev is back and answers, and the lvol bdevs reappear for the
// workloads to reopen. What every load found and repaired is kept for the report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/event/thread.h"
#include "scenarios/runner/scenario.h"

namespace pollux::lvol {
class LvolStore;
struct Lvol;
}

namespace pollux::scenarios {

class LvolHost {
 public:
  LvolHost(const Scenario& sc, bdev::Manager& mgr, const env::Clock& clock,
           env::MemoryRegistry& registry);
  ~LvolHost();
  LvolHost(const LvolHost&) = delete;
  LvolHost& operator=(const LvolHost&) = delete;

  bool empty() const { return stores_.empty(); }
  // The lvol bdev a workload runs on ("lvs_nvme0/<workload>").
  static std::string lvol_bdev(const Scenario& sc, const WorkloadSpec& w);
  // Creates the lvstores and lvols on the current thread, calling `step` until each is done
  // (at most `wait_ns` of the clock for each); then the keeper poller runs on `thread`.
  std::string create(event::Thread& thread, const std::function<void()>& step, uint64_t wait_ns);
  void stop();  // the keeper stops (teardown)
  // Teardown: every lvstore crashes (writing nothing) and is gone once this returns true.
  bool shut_down();

  // The host crashed with the power of `device`: its lvstores go, writing nothing.
  void crash(uint32_t device);
  bool all_loaded() const;
  // The end of a run: every lvstore crashes and is loaded again (no power is lost, so the
  // oracle's expectations stand), so the final sweep reads what the metadata on the device
  // says. "" or what went wrong.
  std::string reload_all(const std::function<void()>& step, uint64_t wait_ns);
  // The log, and a line per snapshotting volume (taken, merged away, failed).
  std::vector<std::string> log() const;

 private:
  enum class State { kUp, kCrashing, kDown, kLoading };
  struct Store;
  // An lvol workload's snapshots (LvolSpec::snapshot_every).
  struct Volume {
    Store* store = nullptr;
    const WorkloadSpec* w = nullptr;
    uint64_t next_at = 0;
    uint32_t seq = 0;
    bool recheck = true;  // list the snapshots again (one may be due for deletion)
    uint64_t taken = 0, failed = 0, merged = 0, merge_failed = 0;
    std::vector<std::string> snapshots() const;  // "<name>.s<N>" in the store, oldest first
  };
  struct Store {
    LvolHost* host = nullptr;
    std::string name, base;
    uint32_t device = 0;
    uint64_t cluster_bytes = 0;
    uint64_t md_pages = 0;
    std::vector<const WorkloadSpec*> volumes;
    std::vector<Volume> snapshotting;  // volumes with snapshot_every
    bool op_busy = false;              // a snapshot or delete is running
    State state = State::kDown;
    lvol::LvolStore* lvs = nullptr;
    bool crash_after_load = false;  // the host crashed while the load ran
    uint64_t retry_at = 0;
    uint32_t failed_loads = 0;  // in a row
  };
  static event::PollStatus keep(void* arg);
  bool snapshot_step(Store& s);  // starts a due snapshot or delete; true if it did
  static void snapshotted(void* arg, lvol::Lvol* l, int rc);
  static void merged(void* arg, int rc);
  void crash(Store& s);
  void load(Store& s);
  static void loaded(void* arg, lvol::LvolStore* lvs, int rc);
  static void crashed(void* arg, int rc);
  bool wait(const std::function<bool()>& until, const std::function<void()>& step,
            uint64_t wait_ns);
  std::string at() const;  // the clock, for the log

  bdev::Manager& mgr_;
  const env::Clock& clock_;
  env::MemoryRegistry& registry_;
  uint64_t t0_ = 0;
  std::vector<std::unique_ptr<Store>> stores_;
  event::Thread* thread_ = nullptr;
  event::Poller* poller_ = nullptr;
  std::vector<std::string> log_;
};

}  // namespace pollux::scenarios
