#include "scenarios/sim/perf_job.h"

#include <algorithm>

#include "driver/env/pattern.h"

namespace pollux::sim {

PerfJob::PerfJob(nvme::Controller& ctrl, uint32_t nsid, const JobOptions& o,
                 std::mt19937_64& rng, const env::Clock& clock, env::MemoryRegistry& registry,
                 std::string* error)
    : ctrl_(ctrl), o_(o), rng_(rng), clock_(clock) {
  ns_ = ctrl.ns(nsid);
  if (ns_ == nullptr) {
    *error = "no namespace " + std::to_string(nsid);
    return;
  }
  if (o.io_bytes % ns_->block_size || o.queue_depth == 0) {
    *error = "io size must be a multiple of the block size, queue depth >= 1";
    return;
  }
  blocks_ = (o.range_bytes ? std::min(o.range_bytes, ns_->num_blocks * ns_->block_size)
                           : ns_->num_blocks * ns_->block_size) / ns_->block_size;
  io_blocks_ = o.io_bytes / ns_->block_size;
  nvme::QpairOptions qo;
  qo.queue_size = std::min<uint32_t>(ctrl.max_queue_entries(), std::max(64u, o.queue_depth + 1));
  qo.track_latency = o.track_latency;
  auto qp = ctrl.alloc_io_qpair(qo);
  if (!qp) {
    *error = "alloc_io_qpair: " + qp.error().message;
    return;
  }
  auto mem = env::DmaRegion::create(registry, size_t{o.queue_depth} * o.io_bytes);
  if (!mem) {
    *error = "DMA buffers: " + mem.error().message;
    ctrl.free_io_qpair(std::move(qp).value());
    return;
  }
  buffers_ = std::move(mem).value();
  qp_ = std::move(qp).value();
  ios_.resize(o.queue_depth);
  for (uint32_t i = 0; i < o.queue_depth; ++i) {
    ios_[i] = Io{this, static_cast<uint8_t*>(buffers_->data()) + size_t{i} * o.io_bytes, 0, 0};
  }
  wait_ring_.resize(o.queue_depth, nullptr);
}

PerfJob::~PerfJob() {
  if (poller_) thread_->unregister_poller(poller_);
  if (qp_) ctrl_.free_io_qpair(std::move(qp_));
}

void PerfJob::start(event::Thread& thread) {
  thread_ = &thread;
  poller_ = thread.register_poller(&PerfJob::poll, this, 0, "perf-job");
}

uint64_t PerfJob::next_lba() {
  const uint64_t slots = blocks_ / io_blocks_;
  if (o_.pattern == Pattern::kSequential) {
    const uint64_t lba = seq_lba_;
    seq_lba_ = (seq_lba_ + io_blocks_) % (slots * io_blocks_);
    return lba;
  }
  return (rng_() % slots) * io_blocks_;
}

bool PerfJob::submit(Io& io) {
  const bool read = o_.read_percent >= 100 || (rng_() % 100) < o_.read_percent;
  const uint64_t lba = next_lba();
  if (!read && o_.write_pattern) {
    env::fill_pattern(io.buf, lba, static_cast<uint32_t>(io_blocks_), ns_->block_size, ++writes_);
  }
  io.submitted_ns = clock_.now();
  const int rc = read ? qp_->read(*ns_, io.buf, lba, static_cast<uint32_t>(io_blocks_),
                                  &PerfJob::on_complete, &io)
                      : qp_->write(*ns_, io.buf, lba, static_cast<uint32_t>(io_blocks_),
                                   &PerfJob::on_complete, &io);
  if (rc != 0) {
    ++result_.errors;
    return false;
  }
  ++submitted_;
  ++outstanding_;
  return true;
}

void PerfJob::on_complete(void* ctx, const spec::nvme::CompletionEntry& cpl) {
  Io& io = *static_cast<Io*>(ctx);
  PerfJob& j = *io.job;
  --j.outstanding_;
  const uint64_t now = j.clock_.now();
  if (spec::nvme::status::sc(cpl.status) || spec::nvme::status::sct(cpl.status)) ++j.result_.errors;
  if (j.o_.series_window_ns) {
    JobResult& r = j.result_;
    const uint64_t w = (now - j.start_ns_) / j.o_.series_window_ns;
    if (w >= r.series.size()) {  // off the hot path: once a window
      r.series.resize(w + 1, 0);
      r.series_latency_sum_ns.resize(w + 1, 0);
      r.series_latency_max_ns.resize(w + 1, 0);
      r.series_errors.resize(w + 1, 0);
    }
    const uint64_t lat = now - io.submitted_ns + j.o_.stack_ns;
    ++r.series[w];
    r.series_latency_sum_ns[w] += lat;
    r.series_latency_max_ns[w] = std::max(r.series_latency_max_ns[w], lat);
    if (spec::nvme::status::sc(cpl.status) || spec::nvme::status::sct(cpl.status)) ++r.series_errors[w];
  }
  // Latency of I/Os issued after warm-up; IOPS from completions inside the window.
  if (io.submitted_ns >= j.measure_from_ns_)
    j.result_.latency_ns.record(now - io.submitted_ns + j.o_.stack_ns);
  if (now >= j.measure_from_ns_ && (j.o_.duration_ns == 0 || now < j.stop_ns_)) {
    ++j.result_.ios;
    j.last_done_ns_ = now;
  }
  if (j.state_ == State::kRunning) {
    const bool more = (j.o_.max_ios == 0 || j.submitted_ < j.o_.max_ios) &&
                      (j.o_.duration_ns == 0 || now < j.stop_ns_);
    if (more && j.o_.stack_ns == 0) {
      j.submit(io);
    } else if (more) {  // through the host stack first
      io.ready_ns = now + j.o_.stack_ns;
      j.wait_ring_[(j.wait_head_ + j.waiting_) % j.wait_ring_.size()] = &io;
      ++j.waiting_;
    } else {
      j.state_ = State::kDraining;
      j.waiting_ = 0;  // nothing more is submitted: what waits out the stack never goes
    }
  }
}

bool PerfJob::submit_due() {
  bool any = false;
  const uint64_t now = clock_.now();
  while (waiting_ && wait_ring_[wait_head_]->ready_ns <= now) {
    Io& io = *wait_ring_[wait_head_];
    wait_head_ = static_cast<uint32_t>((wait_head_ + 1) % wait_ring_.size());
    --waiting_;
    if (state_ == State::kRunning && (o_.duration_ns == 0 || now < stop_ns_) &&
        (o_.max_ios == 0 || submitted_ < o_.max_ios)) {
      submit(io);
      any = true;
    }
  }
  if (state_ == State::kRunning && waiting_ == 0 && outstanding_ == 0) state_ = State::kDraining;
  return any;
}

event::PollStatus PerfJob::poll(void* arg) {
  return static_cast<PerfJob*>(arg)->poll_once();
}

event::PollStatus PerfJob::poll_once() {
  switch (state_) {
    case State::kIdle:
      start_ns_ = clock_.now();
      measure_from_ns_ = start_ns_ + o_.warmup_ns;
      stop_ns_ = measure_from_ns_ + o_.duration_ns;
      state_ = State::kRunning;
      for (Io& io : ios_) {
        if (o_.max_ios && submitted_ >= o_.max_ios) break;
        submit(io);
      }
      qp_->flush_doorbell();
      return event::PollStatus::kBusy;
    case State::kRunning:
    case State::kDraining: {
      int n = qp_->process_completions();
      if (n < 0) {
        state_ = State::kDone;
        return event::PollStatus::kIdle;
      }
      if (waiting_ && submit_due()) {
        qp_->flush_doorbell();
        ++n;
      }
      if (state_ == State::kDraining && outstanding_ == 0) state_ = State::kDone;
      return n > 0 ? event::PollStatus::kBusy : event::PollStatus::kIdle;
    }
    case State::kDone: return event::PollStatus::kIdle;
  }
  return event::PollStatus::kIdle;
}

JobResult PerfJob::result() const {
  JobResult r = result_;
  // The window: the measured duration, or warm-up end to the last completion.
  r.window_ns = o_.duration_ns ? o_.duration_ns
                               : (last_done_ns_ > measure_from_ns_ ? last_done_ns_ - measure_from_ns_ : 0);
  return r;
}

PerfWorker::~PerfWorker() {
  stop();
}

void PerfWorker::start(event::Thread& thread) {
  thread_ = &thread;
  poller_ = thread.register_poller(&PerfWorker::poll, this, 0, "perf-worker");
}

void PerfWorker::stop() {
  if (poller_) thread_->unregister_poller(poller_);
  poller_ = nullptr;
}

event::PollStatus PerfWorker::poll(void* arg) {
  bool busy = false;
  for (PerfJob* j : static_cast<PerfWorker*>(arg)->jobs_)
    busy |= j->poll_once() == event::PollStatus::kBusy;
  return busy ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

}  // namespace pollux::sim
