// A verified workload on a bdev, run as a poller: keeps queue_depth reads, writes (and
// flushes) outstanding, tells the device's oracle about every write and checks every read
// against it. It never has two I/Os on one block at once (the oracle's contract), survives
// its bdev going away (hot-remove, a device that failed) by closing it once its I/O has
// ended and opening it again when the bdev comes back (re-insertion, hot-plug poller).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/event/thread.h"
#include "scenarios/oracle/oracle.h"
#include "scenarios/runner/recorder.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {

// Per device: the oracle and the block state shared by the workloads on its bdev.
struct DeviceTrack {
  uint32_t index = 0;
  std::string bdev;
  uint32_t block_size = 0;
  uint64_t num_blocks = 0;
  bool plp = true;  // acknowledged writes survive power loss (no volatile cache, or PLP)
  std::unique_ptr<oracle::Oracle> oracle;
  std::vector<uint8_t> busy;     // per block: an I/O is on it
  std::vector<uint8_t> written;  // per block: ever written (the final sweep reads these)
  uint64_t next_generation = 1;  // pattern generation of the next write
  uint64_t violations = 0;
  uint64_t violations_by_kind[4] = {};      // by oracle::ViolationKind
  std::vector<std::string> violation_text;  // the first few, for the report
  uint64_t last_success_submit_ns = 0;      // recovery: submission time of the latest success
  uint64_t swept_blocks = 0, sweep_read_errors = 0;  // the final read-back

  void note(const oracle::Verdict& v);
};

struct WorkloadStats {
  uint64_t reads = 0, writes = 0, flushes = 0, errors = 0, submit_errors = 0;
  uint64_t verified_reads = 0, reopens = 0, crossed_power_loss = 0;
  uint64_t outstanding = 0;
};

class Workload {
 public:
  Workload(const WorkloadSpec& spec, bdev::Manager& mgr, DeviceTrack& track, Recorder& rec,
           env::MemoryRegistry& registry, const env::Clock& clock, uint64_t seed);
  ~Workload();
  std::string init();                 // DMA buffers; "" or the error
  // Registers the poller. Times the workload reports are relative to t0 (the run's start).
  void start(event::Thread& thread, uint64_t t0);
  void stop_io();                     // submits nothing more (its I/Os still complete)
  void stop();                        // stop_io(), then closes the bdev (the engine's last step)
  bool done() const { return state_ == State::kDone; }
  // The device lost power: writes in flight have an unknown outcome, even if they are
  // acknowledged later (their completion may have been posted before the cut).
  void on_power_loss();
  const WorkloadSpec& spec() const { return spec_; }
  const WorkloadStats& stats() const { return stats_; }

 private:
  enum class State { kWaiting, kOpening, kRunning, kDone };
  enum class Op : uint8_t { kRead, kWrite, kFlush };
  struct Slot {
    Workload* w = nullptr;
    uint8_t* buf = nullptr;
    bool busy = false;
    Op op = Op::kRead;
    uint64_t lba = 0;
    uint32_t blocks = 0;
    uint64_t submit_ns = 0;
    uint64_t id = 0;  // oracle write id or flush token
    bool crossed_power_loss = false;  // in flight at a power loss (a read: not verified)
  };
  static event::PollStatus poll(void* arg);
  static void on_io(bdev::BdevIo& io, bool success, void* arg);
  static void on_event(bdev::DescEvent e, bdev::Bdev& b, void* ctx);
  bool open();
  void close();
  bool submit(Slot& s, uint64_t now);
  bool pick_range(uint64_t* lba);
  void set_busy(uint64_t lba, uint32_t blocks, uint8_t v);
  void complete(Slot& s, bool ok);

  WorkloadSpec spec_;
  bdev::Manager& mgr_;
  DeviceTrack& track_;
  Recorder& rec_;
  env::MemoryRegistry& registry_;
  const env::Clock& clock_;
  std::mt19937_64 rng_;
  std::unique_ptr<env::DmaRegion> mem_;
  std::vector<Slot> slots_;
  event::Thread* thread_ = nullptr;
  event::Poller* poller_ = nullptr;
  bdev::Desc* desc_ = nullptr;
  event::IoChannel* ch_ = nullptr;
  bool removed_ = false;
  State state_ = State::kWaiting;
  uint64_t t0_ = 0, start_ns_ = 0, end_ns_ = 0, next_open_ns_ = 0;
  uint64_t io_blocks_ = 0, range_blocks_ = 0, seq_next_ = 0, writes_since_flush_ = 0;
  WorkloadStats stats_;
};

}  // namespace pollux::scenarios
