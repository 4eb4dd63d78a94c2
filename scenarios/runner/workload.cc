#include "scenarios/runner/workload.h"

#include <algorithm>
#include <cstdio>

#include "driver/env/pattern.h"

namespace pollux::scenarios {

namespace {
constexpr size_t kViolationTextKept = 20;
constexpr uint64_t kReopenEveryNs = 10'000;
constexpr int kRangeDraws = 8;
}  // namespace

void DeviceTrack::note(const oracle::Verdict& v) {
  for (const oracle::Violation& x : v.violations) {
    ++violations;
    ++violations_by_kind[static_cast<size_t>(x.kind)];
    if (violation_text.size() < kViolationTextKept) {
      violation_text.push_back(bdev + ": " + x.to_string());
    }
  }
}

Workload::Workload(const WorkloadSpec& spec, bdev::Manager& mgr, DeviceTrack& track,
                   Recorder& rec, env::MemoryRegistry& registry, const env::Clock& clock,
                   uint64_t seed)
    : spec_(spec), mgr_(mgr), track_(track), rec_(rec), registry_(registry), clock_(clock),
      rng_(seed) {}

Workload::~Workload() { stop(); }

std::string Workload::init() {
  if (spec_.block_size % track_.block_size) {
    return "workload " + spec_.name + ": block_size " + std::to_string(spec_.block_size) +
           " is not a multiple of " + spec_.bdev + "'s block size " +
           std::to_string(track_.block_size);
  }
  // validate() checked emulated drives; a qemu device's size is known only now.
  if (spec_.range_bytes / track_.block_size > track_.num_blocks) {
    return "workload " + spec_.name + ": range " + std::to_string(spec_.range_bytes) +
           " bytes is larger than " + spec_.bdev + " (" + std::to_string(track_.num_blocks) +
           " blocks of " + std::to_string(track_.block_size) + " bytes)";
  }
  io_blocks_ = spec_.block_size / track_.block_size;
  range_blocks_ = std::min<uint64_t>(spec_.range_bytes / track_.block_size, track_.busy.size());
  range_blocks_ -= range_blocks_ % io_blocks_;
  if (range_blocks_ < io_blocks_ * spec_.queue_depth) {
    return "workload " + spec_.name + ": range holds fewer I/Os than queue_depth";
  }
  auto mem = env::DmaRegion::create(registry_, size_t{spec_.queue_depth} * spec_.block_size);
  if (!mem) return "workload " + spec_.name + ": " + mem.error().message;
  mem_ = std::move(mem).value();
  slots_.resize(spec_.queue_depth);
  for (uint32_t i = 0; i < spec_.queue_depth; ++i) {
    slots_[i].w = this;
    slots_[i].buf = static_cast<uint8_t*>(mem_->data()) + size_t{i} * spec_.block_size;
  }
  return "";
}

void Workload::start(event::Thread& thread, uint64_t t0) {
  thread_ = &thread;
  t0_ = t0;
  start_ns_ = t0 + spec_.start_ns;
  end_ns_ = start_ns_ + spec_.duration_ns;
  poller_ = thread.register_poller(poll, this, 0, "workload_" + spec_.name);
}

void Workload::stop_io() {
  if (poller_ != nullptr) {
    thread_->unregister_poller(poller_);
    poller_ = nullptr;
  }
  state_ = State::kDone;
}

void Workload::stop() {
  stop_io();
  close();
}

bool Workload::open() {
  auto d = mgr_.open(spec_.bdev, /*write=*/true, on_event, this);
  if (!d) return false;
  desc_ = d.value();
  ch_ = mgr_.get_io_channel(desc_);
  if (ch_ == nullptr) {
    mgr_.close(desc_);
    desc_ = nullptr;
    return false;
  }
  removed_ = false;
  return true;
}

void Workload::close() {
  if (stats_.outstanding > 0 && ch_ != nullptr) {
    // The bdev layer's channel must outlive its I/Os (their completions land in it): one the
    // stack never ended is left open rather than freed under them.
    std::fprintf(stderr, "workload %s: %lu I/Os never ended; its bdev channel is left open\n",
                 spec_.name.c_str(), static_cast<unsigned long>(stats_.outstanding));
    return;
  }
  if (ch_ != nullptr) mgr_.put_io_channel(ch_);
  if (desc_ != nullptr) mgr_.close(desc_);
  ch_ = nullptr;
  desc_ = nullptr;
}

void Workload::on_event(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
  if (e == bdev::DescEvent::kRemove) static_cast<Workload*>(ctx)->removed_ = true;
}

// What was in flight when the power went: a write may or may not have landed; a read may
// still complete (its completion was posted before the cut and is reaped after) with what
// the media held before it — which says nothing about what survived (chaos seed 7101519: a
// read of a not-yet-durable write, reaped at the power loss's instant, made the oracle take
// that write for the survivor, and the sweep then found the older data the cut left).
void Workload::on_power_loss() {
  for (Slot& s : slots_) {
    if (s.busy && (s.op == Op::kWrite || s.op == Op::kRead)) s.crossed_power_loss = true;
  }
}

void Workload::set_busy(uint64_t lba, uint32_t blocks, uint8_t v) {
  std::fill_n(track_.busy.begin() + static_cast<std::ptrdiff_t>(lba), blocks, v);
}

bool Workload::pick_range(uint64_t* lba) {
  const uint64_t ios = range_blocks_ / io_blocks_;
  for (int d = 0; d < kRangeDraws; ++d) {
    uint64_t io;
    if (spec_.pattern == Pattern::kSequential) {
      io = seq_next_;
      seq_next_ = (seq_next_ + 1) % ios;
    } else {
      io = std::uniform_int_distribution<uint64_t>(0, ios - 1)(rng_);
    }
    const uint64_t l = io * io_blocks_;
    bool free = true;
    for (uint64_t b = l; b < l + io_blocks_ && free; ++b) free = !track_.busy[b];
    if (free) {
      *lba = l;
      return true;
    }
  }
  return false;  // everything drawn was busy (another workload on the same blocks): later
}

bool Workload::submit(Slot& s, uint64_t now) {
  const bool flush_due = spec_.flush_every && writes_since_flush_ >= spec_.flush_every;
  int rc;
  s.submit_ns = now;
  s.crossed_power_loss = false;
  if (flush_due) {
    s.op = Op::kFlush;
    s.blocks = 0;
    s.id = track_.oracle->begin_flush();
    rc = mgr_.flush(desc_, ch_, 0, track_.num_blocks, on_io, &s);
    if (rc == 0) writes_since_flush_ = 0;
  } else {
    uint64_t lba;
    if (!pick_range(&lba)) return false;
    s.lba = lba;
    s.blocks = static_cast<uint32_t>(io_blocks_);
    const bool read = std::uniform_int_distribution<uint32_t>(0, 99)(rng_) < spec_.read_percent;
    s.op = read ? Op::kRead : Op::kWrite;
    if (read) {
      // Checked against the oracle: it must not pass on what the slot's last write left.
      if (spec_.verify) env::poison(s.buf, size_t{s.blocks} * track_.block_size);
      rc = mgr_.read(desc_, ch_, s.buf, lba, s.blocks, on_io, &s);
    } else {
      const uint64_t gen = track_.next_generation++;
      env::fill_pattern(s.buf, lba, s.blocks, track_.block_size, gen);
      s.id = track_.oracle->begin_write(lba, s.blocks, s.buf);
      rc = mgr_.write(desc_, ch_, s.buf, lba, s.blocks, on_io, &s);
      if (rc != 0) track_.oracle->write_failed(s.id);
      else ++writes_since_flush_;
    }
    if (rc == 0) set_busy(lba, s.blocks, 1);
  }
  if (rc == -ENOMEM) return false;
  if (rc != 0) {  // refused at submission (a bdev going away): an error the workload sees
    ++stats_.submit_errors;
    ++stats_.errors;
    rec_.completion(track_.index, now - t0_, now - t0_, false);
    return false;
  }
  s.busy = true;
  ++stats_.outstanding;
  return true;
}

void Workload::on_io(bdev::BdevIo&, bool success, void* arg) {
  auto* s = static_cast<Slot*>(arg);
  s->w->complete(*s, success);
}

void Workload::complete(Slot& s, bool ok) {
  const uint64_t now = clock_.now();
  s.busy = false;
  --stats_.outstanding;
  rec_.completion(track_.index, s.submit_ns - t0_, now - t0_, ok);
  if (!ok) ++stats_.errors;
  if (ok && s.submit_ns - t0_ >= track_.last_success_submit_ns) {
    track_.last_success_submit_ns = s.submit_ns - t0_;
  }
  oracle::Oracle& o = *track_.oracle;
  switch (s.op) {
    case Op::kFlush:
      ++stats_.flushes;
      if (ok) o.flush_acked(s.id);
      return;
    case Op::kRead:
      ++stats_.reads;
      if (ok && spec_.verify && !s.crossed_power_loss) {  // else: before the cut, unchecked
        track_.note(o.check_read(s.lba, s.blocks, s.buf));
        ++stats_.verified_reads;
      }
      break;
    case Op::kWrite:
      ++stats_.writes;
      if (s.crossed_power_loss) {
        // Its id was lost with the power; its data may or may not be there.
        ++stats_.crossed_power_loss;
        o.write_failed(o.begin_write(s.lba, s.blocks, s.buf));
      } else if (ok) {
        o.write_acked(s.id);
      } else {
        o.write_failed(s.id);
      }
      std::fill_n(track_.written.begin() + static_cast<std::ptrdiff_t>(s.lba), s.blocks, 1);
      break;
  }
  set_busy(s.lba, s.blocks, 0);
}

event::PollStatus Workload::poll(void* arg) {
  auto* w = static_cast<Workload*>(arg);
  const uint64_t now = w->clock_.now();
  switch (w->state_) {
    case State::kWaiting:
      if (now < w->start_ns_) return event::PollStatus::kIdle;
      w->state_ = State::kOpening;
      [[fallthrough]];
    case State::kOpening:
      if (now >= w->end_ns_) {
        w->state_ = State::kDone;
        return event::PollStatus::kBusy;
      }
      if (now < w->next_open_ns_) return event::PollStatus::kIdle;
      w->next_open_ns_ = now + kReopenEveryNs;
      if (!w->open()) return event::PollStatus::kIdle;
      if (w->stats_.reads + w->stats_.writes + w->stats_.flushes > 0) ++w->stats_.reopens;
      w->state_ = State::kRunning;
      [[fallthrough]];
    case State::kRunning: {
      if (w->removed_ || now >= w->end_ns_) {
        // Close once every I/O has ended (the bdev layer ends them all on removal).
        if (w->stats_.outstanding > 0) return event::PollStatus::kIdle;
        w->close();
        w->state_ = now >= w->end_ns_ ? State::kDone : State::kOpening;
        return event::PollStatus::kBusy;
      }
      int n = 0;
      for (Slot& s : w->slots_) {
        if (s.busy) continue;
        if (!w->submit(s, now)) break;
        ++n;
      }
      return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
    }
    case State::kDone:
      return event::PollStatus::kIdle;
  }
  return event::PollStatus::kIdle;
}

}  // namespace pollux::scenarios
