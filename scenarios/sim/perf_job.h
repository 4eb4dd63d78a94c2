// A perf-style workload on one queue pair (what SPDK's perf does per namespace): keeps
// `queue_depth` I/Os outstanding, resubmitting from each completion, and measures latency and
// IOPS on the host's clock. Runs as a poller on an event-framework thread, its own or its
// worker's (PerfWorker: one poller for all of a core's jobs, as SPDK's perf has).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/histogram.h"
#include "driver/event/thread.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"

namespace pollux::sim {

enum class Pattern { kRandom, kSequential };

struct JobOptions {
  uint32_t queue_depth = 1;
  uint32_t io_bytes = 4096;
  uint32_t read_percent = 100;  // the rest are writes
  Pattern pattern = Pattern::kRandom;
  uint64_t range_bytes = 0;     // 0: the whole namespace
  uint64_t warmup_ns = 0;       // completions before this (after start) are not measured
  uint64_t duration_ns = 0;     // stop submitting after start + warmup + duration
  uint64_t max_ios = 0;         // or after this many submissions (0: no limit)
  uint64_t series_window_ns = 0;  // > 0: also count completions per window of this length
  bool track_latency = false;     // the queue pair's latency histogram (metrics)
  // Writes carry the verification data pattern (LBA, generation = the job's write count), as
  // pollux-perf's verify workloads write; otherwise the buffers' zeroes.
  bool write_pattern = false;
  // The host's I/O stack per I/O beyond the polled driver (0: a polled user-space host, as
  // pollux-perf and SPDK's perf): a kernel's system calls, block layer, interrupt and wake-up
  // (fio on Linux). Time, not CPU: the I/O's latency includes it and its slot submits again
  // that long after its completion (the stack's submit and completion halves added up: in a
  // closed loop only their sum shows). No CPU is charged for it.
  uint64_t stack_ns = 0;
};

struct JobResult {
  uint64_t ios = 0;             // measured completions
  uint64_t errors = 0;
  uint64_t window_ns = 0;
  double iops() const { return window_ns ? double(ios) * 1e9 / double(window_ns) : 0.0; }
  env::LatencyHistogram latency_ns;
  std::vector<uint64_t> series;  // completions per series window, from the start (warm-up too)
  std::vector<uint64_t> series_latency_sum_ns, series_latency_max_ns;  // of those completions
  std::vector<uint64_t> series_errors;
};

class PerfJob {
 public:
  // `rng` is the simulation's generator: every random choice of a run comes from one seed.
  PerfJob(nvme::Controller& ctrl, uint32_t nsid, const JobOptions& o, std::mt19937_64& rng,
          const env::Clock& clock, env::MemoryRegistry& registry, std::string* error);
  ~PerfJob();
  // Registers the poller on `thread` and starts at the next step.
  void start(event::Thread& thread);
  // One poll (what the poller runs; a PerfWorker calls it for each of its jobs).
  event::PollStatus poll_once();
  bool done() const { return state_ == State::kDone; }
  const nvme::Qpair* qpair() const { return qp_.get(); }
  nvme::Qpair* qpair() { return qp_.get(); }
  JobResult result() const;
  bool ok() const { return qp_ != nullptr; }
  // With JobOptions::stack_ns: when the next I/O waiting out the host stack is due
  // (UINT64_MAX: none), for the lockstep's idle jump.
  uint64_t next_due_ns() const {
    return waiting_ && state_ == State::kRunning ? wait_ring_[wait_head_]->ready_ns : UINT64_MAX;
  }

 private:
  enum class State { kIdle, kRunning, kDraining, kDone };
  struct Io {
    PerfJob* job;
    uint8_t* buf;
    uint64_t submitted_ns;
    uint64_t ready_ns;  // stack_ns: when it may be submitted again
  };
  static event::PollStatus poll(void* arg);
  static void on_complete(void* ctx, const spec::nvme::CompletionEntry& cpl);
  bool submit(Io& io);
  bool submit_due();  // the I/Os whose host-stack time is over
  uint64_t next_lba();

  nvme::Controller& ctrl_;
  const nvme::Namespace* ns_ = nullptr;
  JobOptions o_;
  std::mt19937_64& rng_;
  const env::Clock& clock_;
  std::unique_ptr<nvme::Qpair> qp_;
  std::unique_ptr<env::DmaRegion> buffers_;
  std::vector<Io> ios_;
  // I/Os waiting out stack_ns, in completion order (all wait as long: a FIFO ring of
  // queue_depth entries, so the hot path allocates nothing).
  std::vector<Io*> wait_ring_;
  uint32_t wait_head_ = 0, waiting_ = 0;
  event::Thread* thread_ = nullptr;
  event::Poller* poller_ = nullptr;
  State state_ = State::kIdle;
  uint64_t start_ns_ = 0, measure_from_ns_ = 0, stop_ns_ = 0, last_done_ns_ = 0;
  uint64_t submitted_ = 0, outstanding_ = 0, seq_lba_ = 0, blocks_ = 0, io_blocks_ = 0;
  uint64_t writes_ = 0;
  JobResult result_;
};

// SPDK perf's worker: one poller on a thread that polls each of its jobs in turn, as perf's
// work_fn loops over its namespaces. The jobs' queue pairs are polled in the same order as
// with a poller each, and what the host is charged for is the same; the reactor's per-poller
// bookkeeping (a clock reading, the poller's statistics) is paid once per iteration, not once
// per drive.
class PerfWorker {
 public:
  PerfWorker() = default;
  ~PerfWorker();
  PerfWorker(const PerfWorker&) = delete;
  PerfWorker& operator=(const PerfWorker&) = delete;
  // Jobs not started on their own; they must outlive the worker's poller (the worker's
  // destructor, or stop()).
  void add(PerfJob* job) { jobs_.push_back(job); }
  void start(event::Thread& thread);
  void stop();

 private:
  static event::PollStatus poll(void* arg);
  std::vector<PerfJob*> jobs_;
  event::Thread* thread_ = nullptr;
  event::Poller* poller_ = nullptr;
};

}  // namespace pollux::sim
