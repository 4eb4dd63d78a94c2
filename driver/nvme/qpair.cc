#include "driver/nvme/qpair.h"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "driver/nvme/namespace.h"

namespace pollux::nvme {

struct Qpair::Request {
  sn::SubmissionEntry cmd;  // kept here while waiting for an SQ slot
  CompletionFn cb = nullptr;
  void* cb_ctx = nullptr;
  Request* next = nullptr;  // free list / wait FIFO / outstanding list
  Request* prev = nullptr;  // outstanding list
  uint64_t submit_tick = 0;
  uint64_t timed_out_tick = 0;  // when its timeout was seen (overdue one timeout later)
  uint16_t cid = 0;             // as sent: generation << cid_index_bits_ | index
  uint16_t index = 0;           // in requests_
  uint16_t gen = 0;
  uint16_t inject_status = 0;  // valid when injected
  bool in_sq = false;
  uint8_t stage = 0;      // 0: outstanding, 1: timed out (late list), 2: overdue too
  bool injected = false;  // an error injection rule hit it
  // A split I/O's collector (never submitted): its children's count and first error.
  Qpair* owner = nullptr;
  uint32_t children_left = 0;
  uint16_t split_status = 0;
};

namespace {
constexpr uint32_t kPollBatch = 32;  // completions taken from the transport at once
}  // namespace

Qpair::Qpair(const QpairContext& ctx, uint16_t qid, const QpairOptions& options)
    : ctx_(ctx), qid_(qid), size_(options.queue_size), options_(options) {}

Qpair::~Qpair() = default;

Result<std::unique_ptr<Qpair>> Qpair::create(const QpairContext& ctx,
                                             std::unique_ptr<QueueTransport> transport,
                                             uint16_t qid, const QpairOptions& options) {
  if (options.queue_size < 2 || options.queue_size > 65536)
    return make_error(EINVAL, "queue size must be 2..65536");
  if (!transport || ctx.gone == nullptr || ctx.clock == nullptr)
    return make_error(EINVAL, "queue pair: transport, gone flag and clock are required");
  auto qp = std::unique_ptr<Qpair>(new Qpair(ctx, qid, options));
  const uint32_t nreq = options.num_requests ? options.num_requests : 2 * options.queue_size;
  if (nreq > 65535) return make_error(EINVAL, "at most 65535 requests per queue pair");
  if (const int rc = transport->init_requests(nreq); rc < 0)
    return make_error(-rc, "queue " + std::to_string(qid) + ": transport set-up failed");
  qp->transport_ = std::move(transport);
  qp->sq_ = qp->transport_->submission_queue();
  qp->sq_head_reported_ = qp->transport_->reports_sq_head();

  qp->num_requests_ = nreq;
  // The CID's spare high bits carry a generation that changes each time a request is reused,
  // so a stale or duplicate completion for a recycled CID is recognised and ignored.
  qp->cid_index_bits_ = 1;
  while ((1u << qp->cid_index_bits_) < nreq) ++qp->cid_index_bits_;
  qp->requests_ = std::make_unique<Request[]>(nreq);
  for (uint32_t i = nreq; i-- > 0;) {
    Request& r = qp->requests_[i];
    r.index = static_cast<uint16_t>(i);
    r.cid = static_cast<uint16_t>(i);
    r.next = qp->free_;
    qp->free_ = &r;
  }
  if (options.timeout_us) qp->timeout_ticks_ = ctx.clock->us_to_ticks(options.timeout_us);
  qp->ns_per_tick_q32_ = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(1'000'000'000) << 32) / ctx.clock->ticks_per_second());
  return qp;
}

Qpair::Request* Qpair::get_request(CompletionFn cb, void* cb_ctx) {
  Request* r = free_;
  if (r == nullptr) return nullptr;
  free_ = r->next;
  r->cb = cb;
  r->cb_ctx = cb_ctx;
  r->next = r->prev = nullptr;
  r->stage = 0;
  r->injected = false;
  if (cid_index_bits_ < 16) {
    r->gen = static_cast<uint16_t>((r->gen + 1) & ((1u << (16 - cid_index_bits_)) - 1));
    r->cid = static_cast<uint16_t>(r->gen << cid_index_bits_ | r->index);
  }
  std::memset(&r->cmd, 0, sizeof r->cmd);
  r->cmd.cid = r->cid;
  return r;
}

void Qpair::put_request(Request* r) {
  r->next = free_;
  free_ = r;
}

int Qpair::build_data(Request* r, const iovec* iov, int iovcnt, uint32_t len) {
  if (iovcnt <= 0) return -EINVAL;
  if (ctx_.max_transfer && len > ctx_.max_transfer) return -E2BIG;
  return transport_->map_data(r->index, r->cmd, iov, iovcnt, len);
}

int Qpair::rw(uint8_t opcode, const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba,
              uint32_t nlb, CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  const uint64_t bytes = uint64_t{nlb} * ns.block_size;
  uint64_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  if (total < bytes) return -EINVAL;
  if (gone()) return -ENODEV;
  if (ctx_.max_transfer && bytes > ctx_.max_transfer) [[unlikely]]
    return split_rw(opcode, ns, iov, iovcnt, lba, nlb, cb, cb_ctx, io_flags);
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = opcode;
  r->cmd.nsid = ns.id;
  r->cmd.cdw10 = static_cast<uint32_t>(lba);
  r->cmd.cdw11 = static_cast<uint32_t>(lba >> 32);
  r->cmd.cdw12 = (nlb - 1) | (io_flags & 0xffff0000u);
  if (const int rc = build_data(r, iov, iovcnt, static_cast<uint32_t>(bytes)); rc != 0) {
    put_request(r);
    return rc;
  }
  return submit(r);
}

// Beyond MDTS: commands of at most max_transfer bytes (whole blocks), each with its slice of
// the caller's iovecs, collected by a request that is never submitted. Every command is built
// before any is submitted, so a refusal (no requests, a slice the device cannot take) leaves
// nothing behind.
int Qpair::split_rw(uint8_t opcode, const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba,
                    uint32_t nlb, CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
  const uint32_t chunk = ctx_.max_transfer / ns.block_size;  // blocks per command
  if (chunk == 0) return -EINVAL;
  const uint32_t children = (nlb + chunk - 1) / chunk;
  constexpr uint32_t kMaxChildren = 64;  // 64 × MDTS: beyond any I/O the API takes
  constexpr int kMaxSliceIov = 64;
  if (children > kMaxChildren) return -EINVAL;
  uint32_t free = 0;
  for (Request* f = free_; f != nullptr && free <= children; f = f->next) ++free;
  if (free < children + 1) return -ENOMEM;
  Request* parent = get_request(cb, cb_ctx);
  parent->owner = this;
  parent->children_left = children;
  parent->split_status = 0;
  Request* built[kMaxChildren];
  int vi = 0;  // iovec and offset in it where the next slice starts
  std::size_t voff = 0;
  for (uint32_t k = 0; k < children; ++k) {
    const uint32_t n = std::min(chunk, nlb - k * chunk);
    std::size_t want = std::size_t{n} * ns.block_size;
    iovec slice[kMaxSliceIov];
    int slices = 0;
    while (want > 0) {
      if (slices == kMaxSliceIov || vi >= iovcnt) {
        for (uint32_t i = 0; i < k; ++i) put_request(built[i]);
        put_request(parent);
        return -EINVAL;
      }
      const std::size_t take = std::min(want, iov[vi].iov_len - voff);
      slice[slices++] = iovec{static_cast<uint8_t*>(iov[vi].iov_base) + voff, take};
      want -= take;
      voff += take;
      if (voff == iov[vi].iov_len) ++vi, voff = 0;
    }
    Request* r = get_request(split_child_done, parent);
    const uint64_t at = lba + uint64_t{k} * chunk;
    r->cmd.opcode = opcode;
    r->cmd.nsid = ns.id;
    r->cmd.cdw10 = static_cast<uint32_t>(at);
    r->cmd.cdw11 = static_cast<uint32_t>(at >> 32);
    r->cmd.cdw12 = (n - 1) | (io_flags & 0xffff0000u);
    if (const int rc = build_data(r, slice, slices, n * ns.block_size); rc != 0) {
      put_request(r);
      for (uint32_t i = 0; i < k; ++i) put_request(built[i]);
      put_request(parent);
      return rc;
    }
    built[k] = r;
  }
  ++stats_.split_ios;
  stats_.split_children += children;
  for (uint32_t k = 0; k < children; ++k) submit(built[k]);
  return 0;
}

void Qpair::split_child_done(void* ctx, const sn::CompletionEntry& cpl) {
  Request* parent = static_cast<Request*>(ctx);
  if ((cpl.status & 0xfffe) != 0 && parent->split_status == 0)
    parent->split_status = static_cast<uint16_t>(cpl.status & 0xfffe);
  if (--parent->children_left != 0) return;
  sn::CompletionEntry done = cpl;
  done.cid = parent->cid;
  done.status = static_cast<uint16_t>((cpl.status & 1) | parent->split_status);
  const CompletionFn cb = parent->cb;
  void* const cb_ctx = parent->cb_ctx;
  parent->owner->put_request(parent);
  if (cb) cb(cb_ctx, done);
}

int Qpair::read(const Namespace& ns, void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
                void* cb_ctx, uint32_t io_flags) {
  const iovec v{buf, std::size_t{nlb} * ns.block_size};
  return rw(sn::nvm::kRead, ns, &v, 1, lba, nlb, cb, cb_ctx, io_flags);
}

int Qpair::write(const Namespace& ns, const void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
                 void* cb_ctx, uint32_t io_flags) {
  const iovec v{const_cast<void*>(buf), std::size_t{nlb} * ns.block_size};
  return rw(sn::nvm::kWrite, ns, &v, 1, lba, nlb, cb, cb_ctx, io_flags);
}

int Qpair::readv(const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba, uint32_t nlb,
                 CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
  return rw(sn::nvm::kRead, ns, iov, iovcnt, lba, nlb, cb, cb_ctx, io_flags);
}

int Qpair::writev(const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba, uint32_t nlb,
                  CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
  return rw(sn::nvm::kWrite, ns, iov, iovcnt, lba, nlb, cb, cb_ctx, io_flags);
}

int Qpair::compare(const Namespace& ns, const void* buf, uint64_t lba, uint32_t nlb,
                   CompletionFn cb, void* cb_ctx) {
  const iovec v{const_cast<void*>(buf), std::size_t{nlb} * ns.block_size};
  return rw(sn::nvm::kCompare, ns, &v, 1, lba, nlb, cb, cb_ctx, 0);
}

int Qpair::flush(const Namespace& ns, CompletionFn cb, void* cb_ctx) {
  if (gone()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = sn::nvm::kFlush;
  r->cmd.nsid = ns.id;
  return submit(r);
}

int Qpair::write_zeroes(const Namespace& ns, uint64_t lba, uint32_t nlb, CompletionFn cb,
                        void* cb_ctx, uint32_t io_flags) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  if (gone()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = sn::nvm::kWriteZeroes;
  r->cmd.nsid = ns.id;
  r->cmd.cdw10 = static_cast<uint32_t>(lba);
  r->cmd.cdw11 = static_cast<uint32_t>(lba >> 32);
  r->cmd.cdw12 = (nlb - 1) | (io_flags & 0xffff0000u);
  return submit(r);
}

int Qpair::deallocate(const Namespace& ns, const sn::nvm::DsmRange* ranges, uint32_t count,
                      CompletionFn cb, void* cb_ctx) {
  if (count == 0 || count > 256) return -EINVAL;
  if (gone()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = sn::nvm::kDatasetManagement;
  r->cmd.nsid = ns.id;
  r->cmd.cdw10 = count - 1;
  r->cmd.cdw11 = sn::nvm::kDsmDeallocate;
  const iovec v{const_cast<sn::nvm::DsmRange*>(ranges), count * sizeof *ranges};
  if (const int rc = build_data(r, &v, 1, static_cast<uint32_t>(v.iov_len)); rc != 0) {
    put_request(r);
    return rc;
  }
  return submit(r);
}

// A request for the caller's command: its CID, and its data if a buffer is given (without
// one the caller's DPTR stands: Create I/O SQ/CQ carry the queue's address). 0 or -errno.
int Qpair::raw_request(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                       void* cb_ctx, Request** out) {
  if (gone()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd = cmd;
  r->cmd.cid = r->cid;
  if (buf != nullptr && len != 0) {
    const iovec v{buf, len};
    if (const int rc = build_data(r, &v, 1, len); rc != 0) {
      put_request(r);
      return rc;
    }
  }
  *out = r;
  return 0;
}

int Qpair::submit_raw(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                      void* cb_ctx) {
  Request* r = nullptr;
  if (const int rc = raw_request(cmd, buf, len, cb, cb_ctx, &r); rc != 0) return rc;
  return submit(r);
}

int Qpair::submit_first(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                        void* cb_ctx) {
  if ((sq_tail_ + 1) % size_ == sq_head_) return -EBUSY;  // a fresh queue has room
  Request* r = nullptr;
  if (const int rc = raw_request(cmd, buf, len, cb, cb_ctx, &r); rc != 0) return rc;
  ++outstanding_;
  place_in_sq(r);
  ring_sq_doorbell();
  return 0;
}

int Qpair::submit(Request* r) {
  ++outstanding_;
  if (inject_armed_) [[unlikely]] {
    if (inject(r)) return 0;
  }
  const bool sq_full = (sq_tail_ + 1) % size_ == sq_head_;
  if (wait_head_ != nullptr || sq_full || resetting_ || connecting_) {  // keep order
    r->next = nullptr;
    if (wait_tail_)
      wait_tail_->next = r;
    else
      wait_head_ = r;
    wait_tail_ = r;
    ++stats_.queued;
    return 0;
  }
  place_in_sq(r);
  if (!options_.batch_doorbells) ring_sq_doorbell();
  return 0;
}

void Qpair::place_in_sq(Request* r) {
  sq_[sq_tail_] = r->cmd;
  sq_tail_ = sq_tail_ + 1 == size_ ? 0 : sq_tail_ + 1;
  r->in_sq = true;
  if (timeout_ticks_)
    r->submit_tick = ctx_.clock->now();
  else if (options_.track_latency)
    ++unstamped_;
  r->prev = out_tail_;
  r->next = nullptr;
  if (out_tail_)
    out_tail_->next = r;
  else
    out_head_ = r;
  out_tail_ = r;
  doorbell_pending_ = true;
  ++stats_.submitted;
  if (work_group_) ++work_group_->submitted;
}

void Qpair::ring_sq_doorbell() {
  if (!doorbell_pending_) return;
  doorbell_pending_ = false;
  ++stats_.doorbells;
  if (work_group_) ++work_group_->doorbells;
  if (unstamped_ != 0) {  // the newest requests are at the tail of the outstanding list
    const uint64_t now = ctx_.clock->now();
    for (Request* r = out_tail_; r != nullptr && unstamped_ != 0; r = r->prev, --unstamped_)
      r->submit_tick = now;
    unstamped_ = 0;
  }
  transport_->flush(sq_tail_);
}

void Qpair::flush_doorbell() {
  ring_sq_doorbell();
}

void Qpair::count_error(uint16_t status) {
  ++stats_.errors;
  ++stats_.errors_by_type[sn::status::sct(status)];
}

Qpair::Request** Qpair::stage_list(uint8_t stage, Request*** tail) {
  switch (stage) {
    case 0:
      *tail = &out_tail_;
      return &out_head_;
    case 1:
      *tail = &late_tail_;
      return &late_head_;
    default:
      *tail = &overdue_tail_;
      return &overdue_head_;
  }
}

void Qpair::unlink_outstanding(Request* r) {
  Request** tailp;
  Request*& head = *stage_list(r->stage, &tailp);
  Request*& tail = *tailp;
  if (r->prev)
    r->prev->next = r->next;
  else
    head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    tail = r->prev;
  r->prev = r->next = nullptr;
  r->in_sq = false;
}

// One completion the transport handed over: matched to its request and delivered.
inline void Qpair::complete(const sn::CompletionEntry& entry, uint64_t* now) {
  sn::CompletionEntry cpl = entry;
  const uint32_t index = cpl.cid & ((1u << cid_index_bits_) - 1);
  Request* r = index < num_requests_ ? &requests_[index] : nullptr;
  // A completion we never asked for (unknown CID, a CID not outstanding, a stale generation
  // of a reused CID, another queue's SQID): ignore it safely, its SQ head included.
  if (r == nullptr || !r->in_sq || r->cid != cpl.cid || cpl.sqid != qid_) [[unlikely]] {
    ++stats_.bad_completions;
    return;
  }
  // The controller's SQ head can only move forward, and never past our tail. Without SQ heads
  // (fabrics, SQ flow control off) each completion frees one slot.
  if (!sq_head_reported_) [[unlikely]] {
    sq_head_ = sq_head_ + 1 == size_ ? 0 : sq_head_ + 1;
  } else if (cpl.sqhd < size_ &&
             ring_distance(sq_head_, cpl.sqhd) <= ring_distance(sq_head_, sq_tail_)) [[likely]] {
    sq_head_ = cpl.sqhd;
  } else {
    ++stats_.bad_sq_heads;
  }
  unlink_outstanding(r);
  --outstanding_;
  ++stats_.completed;
  if (work_group_) ++work_group_->completed;
  if (options_.track_latency) {
    // A request stamped after `now` was read (an unbatched doorbell rung by a callback of
    // this batch) needs a fresh reading.
    if (*now < r->submit_tick) *now = ctx_.clock->now();
    stats_.latency.record(ticks_to_ns(*now - r->submit_tick));
  }
  if (r->injected) [[unlikely]]
    cpl.status = static_cast<uint16_t>((cpl.status & 1) | r->inject_status);
  if ((cpl.status & 0xfffe) != 0) [[unlikely]]
    count_error(cpl.status);
  const CompletionFn cb = r->cb;
  void* const cb_ctx = r->cb_ctx;
  put_request(r);  // before the callback, which may submit again
  if (cb) cb(cb_ctx, cpl);
}

int Qpair::process_completions(uint32_t max) {
  ++stats_.polls;  // what a simulator charges host time for (scenarios/sim's Lockstep)
  if (work_group_) ++work_group_->polls;
  if (gone()) [[unlikely]] {
    if (!removal_handled_) fail_removed();
    return -ENODEV;
  }
  if (resetting_) return 0;  // the controller is being reset: its queues don't exist
  uint32_t reaped = 0;
  if (inj_head_ != nullptr) [[unlikely]]
    reaped = deliver_injected(max);
  uint64_t now = 0;  // read at the first completion of the batch, when latency is tracked
  sn::CompletionEntry batch[kPollBatch];
  for (;;) {
    const uint32_t want = max == 0 ? kPollBatch : std::min(kPollBatch, max - reaped);
    if (want == 0) break;
    const int n = transport_->poll(batch, want);
    if (n <= 0) break;  // a transport that lost its connection also raised the gone flag
    for (int i = 0; i < n; ++i) complete(batch[i], &now);
    reaped += static_cast<uint32_t>(n);
    if (static_cast<uint32_t>(n) < want) break;
  }
  while (wait_head_ != nullptr && !connecting_ && (sq_tail_ + 1) % size_ != sq_head_) {
    Request* r = wait_head_;
    wait_head_ = r->next;
    if (wait_head_ == nullptr) wait_tail_ = nullptr;
    place_in_sq(r);
  }
  ring_sq_doorbell();
  if (timeout_ticks_ && (out_head_ != nullptr || late_head_ != nullptr)) [[unlikely]] {
    check_timeouts();
  }
  return static_cast<int>(reaped);
}

// Moves r from its stage's list to the tail of the next stage's.
void Qpair::advance_stage(Request* r) {
  unlink_outstanding(r);
  r->in_sq = true;
  ++r->stage;
  Request** tail;
  Request*& head = *stage_list(r->stage, &tail);
  r->prev = *tail;
  if (*tail)
    (*tail)->next = r;
  else
    head = r;
  *tail = r;
}

// The outstanding list is in submission order, so the oldest is at its head. A request that
// times out is reported once and moved to the "late" list — in the order of those reports —
// where a completion still finds it; one timeout after the report (time for what the report
// set in motion, an Abort), still there, it is reported overdue once and moved on to the last
// list, which nothing scans.
void Qpair::check_timeouts() {
  const uint64_t now = ctx_.clock->now();
  while (out_head_ != nullptr && now - out_head_->submit_tick > timeout_ticks_) {
    Request* r = out_head_;
    advance_stage(r);
    r->timed_out_tick = now;
    ++stats_.timeouts;
    if (options_.timeout_cb) options_.timeout_cb(options_.timeout_ctx, *this, r->cid);
  }
  while (late_head_ != nullptr && now - late_head_->timed_out_tick > timeout_ticks_) {
    Request* r = late_head_;
    advance_stage(r);
    ++stats_.overdue;
    if (options_.overdue_cb) options_.overdue_cb(options_.timeout_ctx, *this, r->cid);
  }
}

// Ends a request without the device: its callback gets `status` (phase bit clear).
void Qpair::end_request(Request* r, uint16_t status) {
  sn::CompletionEntry cpl{};
  cpl.sqid = qid_;
  cpl.cid = r->cid;
  cpl.status = static_cast<uint16_t>(status & 0xfffe);
  const CompletionFn cb = r->cb;
  void* const cb_ctx = r->cb_ctx;
  put_request(r);
  --outstanding_;
  if (cb) cb(cb_ctx, cpl);  // may submit again
}

uint32_t Qpair::cancel_waiting(CompletionFn cb, bool (*match)(void* cb_ctx), uint16_t status) {
  // Detached first: a callback that submits again finds the list whole.
  Request* gone = nullptr;
  Request** tail = &gone;
  Request* prev = nullptr;
  for (Request* r = wait_head_; r != nullptr;) {
    Request* next = r->next;
    if (r->cb == cb && match(r->cb_ctx)) {
      (prev ? prev->next : wait_head_) = next;
      if (wait_tail_ == r) wait_tail_ = prev;
      r->next = nullptr;
      *tail = r;
      tail = &r->next;
    } else {
      prev = r;
    }
    r = next;
  }
  uint32_t n = 0;
  while (Request* r = gone) {
    gone = r->next;
    end_request(r, status);
    ++n;
  }
  return n;
}

// The lists are detached first: a callback that submits again adds to fresh lists, and is
// not ended here (no loop with a callback that always retries).
uint32_t Qpair::end_outstanding(uint16_t status) {
  uint32_t n = 0;
  unstamped_ = 0;
  Request* lists[3] = {out_head_, late_head_, overdue_head_};
  out_head_ = out_tail_ = late_head_ = late_tail_ = overdue_head_ = overdue_tail_ = nullptr;
  for (Request* list : lists) {
    while (list != nullptr) {
      Request* r = list;
      list = r->next;
      r->prev = r->next = nullptr;
      r->in_sq = false;
      end_request(r, status);
      ++n;
    }
  }
  return n;
}

uint32_t Qpair::reset_rings(uint16_t status, bool connect_now) {
  resetting_ = true;  // what the callbacks submit waits (the rings are reset below)
  const uint32_t n = end_outstanding(status);
  if (connect_now) {
    transport_->reset();
  } else {
    (void)transport_->start_connect();
  }
  sq_tail_ = sq_head_ = 0;
  doorbell_pending_ = false;  // (end_outstanding cleared unstamped_)
  return n;
}

uint32_t Qpair::fail_all(uint16_t status) {
  uint32_t n = end_outstanding(status);
  // Then injected software completions not yet delivered, then requests waiting for an SQ
  // slot. Both lists are detached first: what callbacks submit meanwhile stays queued (on a
  // removed device they cannot submit at all), so a callback that retries cannot loop here.
  Request* inj = inj_head_;
  inj_head_ = inj_tail_ = nullptr;
  inj_count_ = 0;
  Request* wait = wait_head_;
  wait_head_ = wait_tail_ = nullptr;
  for (Request* list : {inj, wait}) {
    while (list != nullptr) {
      Request* r = list;
      list = r->next;
      end_request(r, status);
      ++n;
    }
  }
  return n;
}

// Surprise removal: every request this queue pair holds ends now, once, with a DNR status;
// submissions already return -ENODEV, so callbacks cannot add new ones. Whatever the device
// may still write to the CQ is never reaped (process_completions returns before reaping).
void Qpair::fail_removed() {
  removal_handled_ = true;  // first: a callback polling again must not recurse
  stats_.failed_on_removal += fail_all(kRemovedStatus);
}

// ------------------------------------------------------------------ error injection ---

int Qpair::add_error_injection(const ErrorInjection& rule) {
  if (rule.match_lba && rule.lba_lo > rule.lba_hi) return -EINVAL;
  if (rule.start_tick >= rule.end_tick) return -EINVAL;
  if (num_rules_ == kMaxErrorInjections) return -ENOSPC;
  rules_[num_rules_++] = rule;
  inject_armed_ = true;
  return 0;
}

void Qpair::clear_error_injections() {
  num_rules_ = 0;
  inject_armed_ = false;
}

// Off the hot path: only called while a rule is armed.
bool Qpair::inject(Request* r) {
  const sn::SubmissionEntry& c = r->cmd;
  uint64_t now = 0;
  bool have_now = false;
  for (uint32_t i = 0; i < num_rules_; ++i) {
    ErrorInjection& rule = rules_[i];
    if (!rule.any_opcode && rule.opcode != c.opcode) continue;
    if (rule.match_lba) {
      if (qid_ == 0 || !sn::nvm::has_lba_range(c.opcode)) continue;
      const uint64_t slba = c.slba();
      const uint64_t last = slba + c.nlb() - 1;
      if (last < rule.lba_lo || slba > rule.lba_hi) continue;
    }
    if (rule.start_tick != 0 || rule.end_tick != UINT64_MAX) {
      if (!have_now) {
        now = ctx_.clock->now();
        have_now = true;
      }
      if (now < rule.start_tick || now >= rule.end_tick) continue;
    }
    // A hit.
    ++stats_.injected;
    const bool do_not_submit = rule.do_not_submit;
    r->injected = true;
    r->inject_status = sn::status::make(rule.sct, rule.sc, rule.dnr);
    if (rule.count != 0 && --rule.count == 0) {  // used up: drop the rule, keep the order
      for (uint32_t j = i + 1; j < num_rules_; ++j) rules_[j - 1] = rules_[j];
      if (--num_rules_ == 0) inject_armed_ = false;
    }
    if (!do_not_submit) return false;  // submitted; the device's completion gets the status
    r->next = nullptr;
    if (inj_tail_)
      inj_tail_->next = r;
    else
      inj_head_ = r;
    inj_tail_ = r;
    ++inj_count_;
    return true;
  }
  return false;
}

// Delivers the software completions queued before this call (not those their callbacks add:
// an unlimited rule and a callback that resubmits must not loop here forever).
uint32_t Qpair::deliver_injected(uint32_t max) {
  uint32_t n = inj_count_, delivered = 0;
  while (n-- > 0 && inj_head_ != nullptr && (max == 0 || delivered < max)) {
    Request* r = inj_head_;
    inj_head_ = r->next;
    if (inj_head_ == nullptr) inj_tail_ = nullptr;
    --inj_count_;
    ++delivered;
    ++stats_.completed;
    if (work_group_) ++work_group_->completed;
    if ((r->inject_status & 0xfffe) != 0) count_error(r->inject_status);
    end_request(r, r->inject_status);
  }
  return delivered;
}

}  // namespace pollux::nvme
