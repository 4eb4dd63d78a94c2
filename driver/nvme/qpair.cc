#include "driver/nvme/qpair.h"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "driver/nvme/namespace.h"

namespace pollux::nvme {

struct Qpair::Request {
  sn::SubmissionEntry cmd;     // kept here while waiting for an SQ slot
  CompletionFn cb = nullptr;
  void* cb_ctx = nullptr;
  Request* next = nullptr;     // free list / wait FIFO / outstanding list
  Request* prev = nullptr;     // outstanding list
  uint64_t submit_tick = 0;
  uint64_t timed_out_tick = 0;  // when its timeout was seen (overdue one timeout later)
  uint64_t* list = nullptr;    // one page for a PRP list or SGL segment
  uint64_t list_iova = 0;
  uint16_t cid = 0;            // as sent: generation << cid_index_bits_ | index
  uint16_t index = 0;          // in requests_
  uint16_t gen = 0;
  uint16_t inject_status = 0;  // valid when injected
  bool in_sq = false;
  uint8_t stage = 0;           // 0: outstanding, 1: timed out (late list), 2: overdue too
  bool injected = false;       // an error injection rule hit it
};

namespace {

constexpr uint32_t kPage = 4096;

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

inline void store_doorbell(volatile uint32_t* db, uint32_t value) {
  // A release store: SQEs (or consumed CQEs) are visible before the device sees the doorbell.
  // On x86 this is a plain mov; the ordering is what the compiler must keep.
  __atomic_store_n(db, value, __ATOMIC_RELEASE);
}

}  // namespace

Qpair::Qpair(const QpairContext& ctx, uint16_t qid, const QpairOptions& options)
    : ctx_(ctx), qid_(qid), size_(options.queue_size), options_(options) {}

Qpair::~Qpair() = default;

Result<std::unique_ptr<Qpair>> Qpair::create(const QpairContext& ctx, uint16_t qid,
                                             const QpairOptions& options) {
  if (options.queue_size < 2 || options.queue_size > 65536)
    return make_error(EINVAL, "queue size must be 2..65536");
  auto qp = std::unique_ptr<Qpair>(new Qpair(ctx, qid, options));
  const uint32_t nreq = options.num_requests ? options.num_requests : 2 * options.queue_size;
  if (nreq > 65535) return make_error(EINVAL, "at most 65535 requests per queue pair");

  // One DMA region: SQ, CQ, then one list page per request.
  const std::size_t sq_bytes = align_up(std::size_t{options.queue_size} * 64, kPage);
  const std::size_t cq_bytes = align_up(std::size_t{options.queue_size} * 16, kPage);
  auto mem = env::DmaRegion::create(*ctx.registry, sq_bytes + cq_bytes + std::size_t{nreq} * kPage);
  if (!mem) return mem.error();
  qp->memory_ = std::move(mem).value();
  auto* base = static_cast<uint8_t*>(qp->memory_->data());
  std::memset(base, 0, sq_bytes + cq_bytes);
  qp->sq_ = reinterpret_cast<sn::SubmissionEntry*>(base);
  qp->cq_ = reinterpret_cast<sn::CompletionEntry*>(base + sq_bytes);
  qp->sq_iova_ = qp->memory_->iova();
  qp->cq_iova_ = qp->memory_->iova() + sq_bytes;

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
    r.list = reinterpret_cast<uint64_t*>(base + sq_bytes + cq_bytes + std::size_t{i} * kPage);
    r.list_iova = qp->memory_->iova() + sq_bytes + cq_bytes + std::size_t{i} * kPage;
    r.next = qp->free_;
    qp->free_ = &r;
  }

  const uint32_t sq_db = sn::reg::sq_tail_doorbell(qid, ctx.doorbell_stride);
  const uint32_t cq_db = sn::reg::cq_head_doorbell(qid, ctx.doorbell_stride);
  qp->sq_doorbell_ = static_cast<volatile uint32_t*>(ctx.device->bar_map(0, sq_db, 4));
  qp->cq_doorbell_ = static_cast<volatile uint32_t*>(ctx.device->bar_map(0, cq_db, 4));
  if (options.timeout_us) qp->timeout_ticks_ = ctx.clock->us_to_ticks(options.timeout_us);
  qp->ns_per_tick_q32_ = static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << 32) /
                                               ctx.clock->ticks_per_second());
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

// PRP: the first entry may start anywhere (dword aligned); every later page starts at a page
// boundary, so every iovec but the first must start page-aligned and all but the last must
// end page-aligned.
int Qpair::build_prp(Request* r, const iovec* iov, int iovcnt, uint32_t len) {
  const uint32_t page = ctx_.page_size;
  if (iovcnt == 1) {  // the common case: one buffer, at most two pages, no list
    const uint64_t iova = ctx_.registry->translate(iov[0].iov_base, len);
    if (iova == env::kInvalidIova || (iova & 3) || len == 0) return -EINVAL;
    const uint64_t in_page = iova & (page - 1);
    if (in_page + len <= 2ull * page) {
      r->cmd.dptr.prp.prp1 = iova;
      r->cmd.dptr.prp.prp2 = in_page + len <= page ? 0 : iova - in_page + page;
      return 0;
    }
  }
  uint64_t first = 0;
  uint32_t nlist = 0;
  uint64_t second = 0;
  uint32_t pages_seen = 0;
  uint64_t left = len;  // describe the transfer, not whatever the iovecs hold beyond it
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
    const std::size_t n = std::min<uint64_t>(iov[i].iov_len, left);
    left -= n;
    const uint64_t iova = ctx_.registry->translate(p, n);
    if (iova == env::kInvalidIova || n == 0) return -EINVAL;
    if (i > 0 && iova % page != 0) return -EINVAL;
    if (left > 0 && (iova + n) % page != 0) return -EINVAL;
    if (iova & 3) return -EINVAL;
    // Walk the pages of this element.
    uint64_t cur = iova;
    const uint64_t end = iova + n;
    while (cur < end) {
      if (pages_seen == 0) {
        first = cur;
      } else if (pages_seen == 1) {
        second = cur;
      } else {
        if (pages_seen == 2) r->list[nlist++] = second;  // list starts with the 2nd page
        if (nlist >= page / 8) return -E2BIG;             // one list page: 512 entries
        r->list[nlist++] = cur;
      }
      ++pages_seen;
      cur = (cur / page + 1) * page;
    }
  }
  r->cmd.dptr.prp.prp1 = first;
  r->cmd.dptr.prp.prp2 = pages_seen <= 1 ? 0 : (pages_seen == 2 ? second : r->list_iova);
  return 0;
}

// SGL: one Data Block descriptor in the SQE for one element, else a Last Segment descriptor
// pointing at a list of Data Block descriptors in the request's page.
int Qpair::build_sgl(Request* r, const iovec* iov, int iovcnt, uint32_t len) {
  // Describe the transfer only: trailing iovec bytes beyond it are left out.
  uint64_t left = len;
  int used = 0;
  while (used < iovcnt && left > 0) left -= std::min<uint64_t>(iov[used++].iov_len, left);
  iovcnt = used;
  auto* descs = reinterpret_cast<sn::SglDescriptor*>(r->list);
  if (static_cast<uint32_t>(iovcnt) > kPage / sizeof(sn::SglDescriptor)) return -E2BIG;
  const uint8_t data_id = sn::SglDescriptor::make_id(sn::sgl::kTypeDataBlock, sn::sgl::kSubtypeAddress);
  r->cmd.set_psdt(sn::kPsdtSglMptrContiguous);
  left = len;
  for (int i = 0; i < iovcnt; ++i) {
    const uint64_t iova = ctx_.registry->translate(iov[i].iov_base, iov[i].iov_len);
    if (iova == env::kInvalidIova || iov[i].iov_len == 0 || iov[i].iov_len > UINT32_MAX)
      return -EINVAL;
    sn::SglDescriptor d{};
    d.address = iova;
    d.length = static_cast<uint32_t>(std::min<uint64_t>(iov[i].iov_len, left));
    left -= d.length;
    d.id = data_id;
    if (iovcnt == 1) {
      r->cmd.dptr.sgl1 = d;
      return 0;
    }
    descs[i] = d;
  }
  sn::SglDescriptor seg{};
  seg.address = r->list_iova;
  seg.length = static_cast<uint32_t>(iovcnt * sizeof(sn::SglDescriptor));
  seg.id = sn::SglDescriptor::make_id(sn::sgl::kTypeLastSegment, sn::sgl::kSubtypeAddress);
  r->cmd.dptr.sgl1 = seg;
  return 0;
}

int Qpair::build_data(Request* r, const iovec* iov, int iovcnt, uint32_t len) {
  if (iovcnt <= 0) return -EINVAL;
  if (ctx_.max_transfer && len > ctx_.max_transfer) return -E2BIG;
  if (options_.prefer_sgl && ctx_.sgl_supported) return build_sgl(r, iov, iovcnt, len);
  return build_prp(r, iov, iovcnt, len);
}

int Qpair::rw(uint8_t opcode, const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba,
              uint32_t nlb, CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  const uint64_t bytes = uint64_t{nlb} * ns.block_size;
  uint64_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  if (total < bytes) return -EINVAL;
  if (ctx_.device->removed()) return -ENODEV;
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

int Qpair::read(const Namespace& ns, void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
                void* cb_ctx, uint32_t io_flags) {
  const iovec v{buf, std::size_t{nlb} * ns.block_size};
  return rw(sn::nvm::kRead, ns, &v, 1, lba, nlb, cb, cb_ctx, io_flags);
}

int Qpair::write(const Namespace& ns, const void* buf, uint64_t lba, uint32_t nlb,
                 CompletionFn cb, void* cb_ctx, uint32_t io_flags) {
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
  if (ctx_.device->removed()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = sn::nvm::kFlush;
  r->cmd.nsid = ns.id;
  return submit(r);
}

int Qpair::write_zeroes(const Namespace& ns, uint64_t lba, uint32_t nlb, CompletionFn cb,
                        void* cb_ctx, uint32_t io_flags) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  if (ctx_.device->removed()) return -ENODEV;
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
  if (ctx_.device->removed()) return -ENODEV;
  const uint64_t iova = ctx_.registry->translate(ranges, count * sizeof *ranges);
  if (iova == env::kInvalidIova) return -EINVAL;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd.opcode = sn::nvm::kDatasetManagement;
  r->cmd.nsid = ns.id;
  r->cmd.cdw10 = count - 1;
  r->cmd.cdw11 = sn::nvm::kDsmDeallocate;
  const iovec v{const_cast<sn::nvm::DsmRange*>(ranges), count * sizeof *ranges};
  if (const int rc = build_prp(r, &v, 1, static_cast<uint32_t>(v.iov_len)); rc != 0) {
    put_request(r);
    return rc;
  }
  return submit(r);
}

int Qpair::submit_raw(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                      void* cb_ctx) {
  if (ctx_.device->removed()) return -ENODEV;
  Request* r = get_request(cb, cb_ctx);
  if (r == nullptr) return -ENOMEM;
  r->cmd = cmd;
  r->cmd.cid = r->cid;
  // Without a buffer the caller's DPTR stands (Create I/O SQ/CQ carry the queue's address).
  if (buf != nullptr && len != 0) {
    r->cmd.set_psdt(sn::kPsdtPrp);
    const iovec v{buf, len};
    if (const int rc = build_data(r, &v, 1, len); rc != 0) {
      put_request(r);
      return rc;
    }
  }
  return submit(r);
}

int Qpair::submit(Request* r) {
  ++outstanding_;
  if (inject_armed_) [[unlikely]] {
    if (inject(r)) return 0;
  }
  const bool sq_full = (sq_tail_ + 1) % size_ == sq_head_;
  if (wait_head_ != nullptr || sq_full || resetting_) {  // keep order: wait behind the others
    r->next = nullptr;
    if (wait_tail_) wait_tail_->next = r; else wait_head_ = r;
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
  if (timeout_ticks_) r->submit_tick = ctx_.clock->now();
  else if (options_.track_latency) ++unstamped_;
  r->prev = out_tail_;
  r->next = nullptr;
  if (out_tail_) out_tail_->next = r; else out_head_ = r;
  out_tail_ = r;
  doorbell_pending_ = true;
  ++stats_.submitted;
}

void Qpair::ring_sq_doorbell() {
  if (!doorbell_pending_) return;
  doorbell_pending_ = false;
  ++stats_.doorbells;
  if (unstamped_ != 0) {  // the newest requests are at the tail of the outstanding list
    const uint64_t now = ctx_.clock->now();
    for (Request* r = out_tail_; r != nullptr && unstamped_ != 0; r = r->prev, --unstamped_)
      r->submit_tick = now;
    unstamped_ = 0;
  }
  if (sq_doorbell_) {
    store_doorbell(sq_doorbell_, sq_tail_);
  } else {
    ctx_.device->write32(0, sn::reg::sq_tail_doorbell(qid_, ctx_.doorbell_stride), sq_tail_);
  }
}

void Qpair::flush_doorbell() { ring_sq_doorbell(); }

void Qpair::count_error(uint16_t status) {
  ++stats_.errors;
  ++stats_.errors_by_type[sn::status::sct(status)];
}

Qpair::Request** Qpair::stage_list(uint8_t stage, Request*** tail) {
  switch (stage) {
    case 0: *tail = &out_tail_; return &out_head_;
    case 1: *tail = &late_tail_; return &late_head_;
    default: *tail = &overdue_tail_; return &overdue_head_;
  }
}

void Qpair::unlink_outstanding(Request* r) {
  Request** tailp;
  Request*& head = *stage_list(r->stage, &tailp);
  Request*& tail = *tailp;
  if (r->prev) r->prev->next = r->next; else head = r->next;
  if (r->next) r->next->prev = r->prev; else tail = r->prev;
  r->prev = r->next = nullptr;
  r->in_sq = false;
}

int Qpair::process_completions(uint32_t max) {
  if (ctx_.device->removed()) [[unlikely]] {
    if (!removal_handled_) fail_removed();
    return -ENODEV;
  }
  if (resetting_) return 0;  // the controller is being reset: its queues don't exist
  uint32_t reaped = 0;
  if (inj_head_ != nullptr) [[unlikely]] reaped = deliver_injected(max);
  uint64_t now = 0;  // read at the first completion of the batch, when latency is tracked
  while (max == 0 || reaped < max) {
    sn::CompletionEntry* slot = &cq_[cq_head_];
    const uint16_t status = __atomic_load_n(&slot->status, __ATOMIC_ACQUIRE);
    if ((status & 1) != phase_) break;
    sn::CompletionEntry cpl = *slot;
    if (++cq_head_ == size_) {
      cq_head_ = 0;
      phase_ ^= 1;
    }
    ++reaped;
    const uint32_t index = cpl.cid & ((1u << cid_index_bits_) - 1);
    Request* r = index < num_requests_ ? &requests_[index] : nullptr;
    // A completion we never asked for (unknown CID, a CID not outstanding, a stale generation
    // of a reused CID, another queue's SQID): ignore it safely, its SQ head included.
    if (r == nullptr || !r->in_sq || r->cid != cpl.cid || cpl.sqid != qid_) [[unlikely]] {
      ++stats_.bad_completions;
      continue;
    }
    // The device's SQ head can only move forward, and never past our tail.
    if (cpl.sqhd < size_ && ring_distance(sq_head_, cpl.sqhd) <= ring_distance(sq_head_, sq_tail_))
        [[likely]] {
      sq_head_ = cpl.sqhd;
    } else {
      ++stats_.bad_sq_heads;
    }
    unlink_outstanding(r);
    --outstanding_;
    ++stats_.completed;
    if (options_.track_latency) {
      // A request stamped after `now` was read (an unbatched doorbell rung by a callback of
      // this batch) needs a fresh reading.
      if (now < r->submit_tick) now = ctx_.clock->now();
      stats_.latency.record(ticks_to_ns(now - r->submit_tick));
    }
    if (r->injected) [[unlikely]] cpl.status = static_cast<uint16_t>((cpl.status & 1) | r->inject_status);
    if ((cpl.status & 0xfffe) != 0) [[unlikely]] count_error(cpl.status);
    const CompletionFn cb = r->cb;
    void* const cb_ctx = r->cb_ctx;
    put_request(r);  // before the callback, which may submit again
    if (cb) cb(cb_ctx, cpl);
  }
  if (reaped) {
    if (cq_doorbell_) {
      store_doorbell(cq_doorbell_, cq_head_);
    } else {
      ctx_.device->write32(0, sn::reg::cq_head_doorbell(qid_, ctx_.doorbell_stride), cq_head_);
    }
  }
  while (wait_head_ != nullptr && (sq_tail_ + 1) % size_ != sq_head_) {
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
  if (*tail) (*tail)->next = r; else head = r;
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

uint32_t Qpair::reset_rings(uint16_t status) {
  resetting_ = true;  // what the callbacks submit waits (the rings are reset below)
  const uint32_t n = end_outstanding(status);
  std::memset(static_cast<void*>(sq_), 0, std::size_t{size_} * sizeof(sn::SubmissionEntry));
  std::memset(static_cast<void*>(cq_), 0, std::size_t{size_} * sizeof(sn::CompletionEntry));
  sq_tail_ = sq_head_ = cq_head_ = 0;
  phase_ = 1;
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
    if (inj_tail_) inj_tail_->next = r; else inj_head_ = r;
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
    if ((r->inject_status & 0xfffe) != 0) count_error(r->inject_status);
    end_request(r, r->inject_status);
  }
  return delivered;
}

}  // namespace pollux::nvme
