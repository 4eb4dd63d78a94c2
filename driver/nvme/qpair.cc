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
  uint64_t* list = nullptr;    // one page for a PRP list or SGL segment
  uint64_t list_iova = 0;
  uint16_t cid = 0;
  bool in_sq = false;
  bool timed_out = false;
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
  qp->requests_ = std::make_unique<Request[]>(nreq);
  for (uint32_t i = nreq; i-- > 0;) {
    Request& r = qp->requests_[i];
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
  return qp;
}

Qpair::Request* Qpair::get_request(CompletionFn cb, void* cb_ctx) {
  Request* r = free_;
  if (r == nullptr) return nullptr;
  free_ = r->next;
  r->cb = cb;
  r->cb_ctx = cb_ctx;
  r->next = r->prev = nullptr;
  r->timed_out = false;
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
  if (sq_doorbell_) {
    store_doorbell(sq_doorbell_, sq_tail_);
  } else {
    ctx_.device->write32(0, sn::reg::sq_tail_doorbell(qid_, ctx_.doorbell_stride), sq_tail_);
  }
}

void Qpair::flush_doorbell() { ring_sq_doorbell(); }

void Qpair::unlink_outstanding(Request* r) {
  Request*& head = r->timed_out ? late_head_ : out_head_;
  Request*& tail = r->timed_out ? late_tail_ : out_tail_;
  if (r->prev) r->prev->next = r->next; else head = r->next;
  if (r->next) r->next->prev = r->prev; else tail = r->prev;
  r->prev = r->next = nullptr;
  r->in_sq = false;
}

int Qpair::process_completions(uint32_t max) {
  if (ctx_.device->removed()) return -ENODEV;
  if (resetting_) return 0;  // the controller is being reset: its queues don't exist
  uint32_t reaped = 0;
  while (max == 0 || reaped < max) {
    sn::CompletionEntry* slot = &cq_[cq_head_];
    const uint16_t status = __atomic_load_n(&slot->status, __ATOMIC_ACQUIRE);
    if ((status & 1) != phase_) break;
    const sn::CompletionEntry cpl = *slot;
    if (++cq_head_ == size_) {
      cq_head_ = 0;
      phase_ ^= 1;
    }
    ++reaped;
    if (cpl.sqhd < size_) sq_head_ = cpl.sqhd;
    Request* r = cpl.cid < num_requests_ ? &requests_[cpl.cid] : nullptr;
    if (r == nullptr || !r->in_sq) {  // a completion we never asked for: ignore it safely
      ++stats_.bad_completions;
      continue;
    }
    unlink_outstanding(r);
    --outstanding_;
    ++stats_.completed;
    if ((cpl.status & 0xfffe) != 0) ++stats_.errors;
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
  if (timeout_ticks_ && out_head_ != nullptr) check_timeouts();
  return static_cast<int>(reaped);
}

// The outstanding list is in submission order, so the oldest is at its head. A request that
// timed out is reported once and moved to the "late" list, where a completion still finds it
// but the timeout scan no longer looks.
void Qpair::check_timeouts() {
  const uint64_t now = ctx_.clock->now();
  while (out_head_ != nullptr && now - out_head_->submit_tick > timeout_ticks_) {
    Request* r = out_head_;
    unlink_outstanding(r);
    r->in_sq = true;
    r->timed_out = true;
    r->prev = late_tail_;
    if (late_tail_) late_tail_->next = r; else late_head_ = r;
    late_tail_ = r;
    ++stats_.timeouts;
    if (options_.timeout_cb) options_.timeout_cb(options_.timeout_ctx, *this, r->cid);
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

uint32_t Qpair::end_outstanding(uint16_t status) {
  uint32_t n = 0;
  for (Request** head : {&out_head_, &late_head_}) {
    while (*head != nullptr) {
      Request* r = *head;
      unlink_outstanding(r);
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
  doorbell_pending_ = false;
  return n;
}

uint32_t Qpair::fail_all(uint16_t status) {
  uint32_t n = end_outstanding(status);
  while (wait_head_ != nullptr) {
    Request* r = wait_head_;
    wait_head_ = r->next;
    if (wait_head_ == nullptr) wait_tail_ = nullptr;
    end_request(r, status);
    ++n;
  }
  return n;
}

}  // namespace pollux::nvme
