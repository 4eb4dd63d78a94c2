// The Pollux RNIC provider's hot path: posting WQEs and ringing doorbells, polling CQEs by
// phase. No locks, no allocation, no system calls.
#include <cstddef>
#include <cstring>

#include "driver/rdma/rnic_internal.h"

namespace pollux::rdma::rnic {

namespace {
// Doorbells are 32-bit stores into the mapped page, after the WQEs they announce.
void ring_doorbell(volatile uint32_t* db, uint32_t count) {
  std::atomic_thread_fence(std::memory_order_release);
  *db = count;
}

// A lone WQE also goes into the QP's push slot, so the device need not read it back by DMA
// (as mlx5's BlueFlame for a single work request): count 0 first, the body, the count last.
void push_wqe(volatile uint8_t* slots, const sr::SendWqe& w, uint32_t count) {
  static_assert(offsetof(sr::SendWqe, push_count) == 28 && sizeof(sr::SendWqe) == 128);
  volatile uint8_t* slot = slots + (count & 1) * sizeof(sr::SendWqe);
  auto* words = reinterpret_cast<volatile uint64_t*>(slot);  // 128-byte aligned
  auto* tag = reinterpret_cast<volatile uint32_t*>(slot + 28);
  __atomic_store_n(tag, 0u, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_release);
  uint64_t src[16];
  std::memcpy(src, &w, sizeof w);
  for (int i = 0; i < 16; ++i)
    if (i != 3) words[i] = src[i];
  *reinterpret_cast<volatile uint32_t*>(slot + 24) = w.rkey;  // word 3's other half
  __atomic_store_n(tag, count, __ATOMIC_RELEASE);
}

bool copy_sges(sr::Sge* dst, const Sge* src, int n) {
  if (n > 0 && src == nullptr) return false;
  for (int i = 0; i < n; ++i) dst[i] = sr::Sge{src[i].addr, src[i].length, src[i].lkey};
  return true;
}
}  // namespace

// ------------------------------------------------------------------------------ CQ ---
RnicCq::~RnicCq() {
  if (gen_ != ctx_.generation()) return;  // the device was reset: nothing of it is left
  ctx_.cqs[handle_] = nullptr;
  const sr::HandleIn in{handle_};
  ctx_.command(sr::CmdOpcode::kDestroyCq, &in, sizeof in, nullptr, 0);
}

// A discarded entry (clean()) names no QP.
constexpr uint32_t kCleanedQpn = sr::kNone;

int RnicCq::poll(WorkCompletion* wc, int n) {
  if (n < 0 || (n > 0 && wc == nullptr)) return -EINVAL;
  if (const int rc = ctx_.check(gen_); rc != 0) return rc;
  int got = 0;
  uint32_t taken = 0;
  while (got < n) {
    const sr::Cqe* e = ring_.at(consumed_ + taken);
    if (__atomic_load_n(&e->owner, __ATOMIC_ACQUIRE) != sr::phase_for(consumed_ + taken, ring_.log))
      break;
    ++taken;
    if (e->qpn == kCleanedQpn) continue;
    WorkCompletion& w = wc[got++];
    w.wr_id = e->wr_id;
    w.status = static_cast<WcStatus>(e->status);
    w.opcode = static_cast<WcOpcode>(e->opcode);
    w.vendor_err = e->vendor_err;
    w.byte_len = e->byte_len;
    w.imm_data = e->imm_data;
    w.qp_num = e->qpn;
    w.wc_flags = (e->flags & sr::cqe_flag::kWithImm) ? wc_flag::kWithImm : 0;
    // Free the work queue slots this completion retires (unsignaled WQEs before it too).
    if (e->qpn < ctx_.qps.size() && ctx_.qps[e->qpn] != nullptr) {
      RnicQp& qp = *ctx_.qps[e->qpn];
      if (!(e->flags & sr::cqe_flag::kRecv)) {
        qp.sq().complete_through(e->wqe_counter);
      } else if (qp.srq() != nullptr) {
        qp.srq()->queue().complete_through(e->wqe_counter);
      } else {
        qp.rq().complete_through(e->wqe_counter);
      }
    }
  }
  if (taken > 0) {
    consumed_ += taken;
    ring_doorbell(ctx_.doorbell(sr::reg::cq_doorbell(handle_)), consumed_);
  }
  return got;
}

void RnicCq::clean(uint32_t qpn) {
  for (uint32_t i = consumed_;; ++i) {
    sr::Cqe* e = ring_.at(i);
    if (__atomic_load_n(&e->owner, __ATOMIC_ACQUIRE) != sr::phase_for(i, ring_.log)) break;
    if (e->qpn == qpn) e->qpn = kCleanedQpn;
    if (i - consumed_ >= ring_.size()) break;
  }
}

// ----------------------------------------------------------------------------- SRQ ---
RnicSrq::RnicSrq(RnicContext& ctx, uint32_t handle, Ring<sr::RecvWqe> ring, uint32_t max_sge)
    : ctx_(ctx),
      gen_(ctx.generation()),
      handle_(handle),
      ring_(std::move(ring)),
      doorbell_(ctx.doorbell(sr::reg::srq_doorbell(handle))) {
  rq_.log = ring_.log;
  rq_.max_sge = max_sge;
}

RnicSrq::~RnicSrq() {
  if (gen_ != ctx_.generation()) return;
  ctx_.srqs[handle_] = nullptr;
  const sr::HandleIn in{handle_};
  ctx_.command(sr::CmdOpcode::kDestroySrq, &in, sizeof in, nullptr, 0);
}

namespace {
// Shared by a QP's own RQ and an SRQ. The device reads a WQE only once the doorbell says so.
int post_recv_chain(const RecvWr& first, const RecvWr** bad_wr, Ring<sr::RecvWqe>& ring,
                    WorkQueue& q, volatile uint32_t* doorbell) {
  int rc = 0;
  const uint32_t before = q.produced;
  for (const RecvWr* wr = &first; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q.max_sge) {
      rc = -EINVAL;
    } else if (q.free_slots() == 0) {
      rc = -ENOMEM;
    }
    sr::RecvWqe* w = rc == 0 ? ring.at(q.produced) : nullptr;
    if (w != nullptr) {
      std::memset(w, 0, sizeof *w);
      w->wr_id = wr->wr_id;
      w->num_sge = static_cast<uint8_t>(wr->num_sge);
      if (!copy_sges(w->sge, wr->sg_list, wr->num_sge)) rc = -EINVAL;
    }
    if (rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      break;
    }
    ++q.produced;
  }
  if (q.produced != before) ring_doorbell(doorbell, q.produced);
  return rc;
}
}  // namespace

int RnicSrq::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  if (const int rc = ctx_.check(gen_); rc != 0) {
    if (bad_wr != nullptr) *bad_wr = &wr;
    return rc;
  }
  return post_recv_chain(wr, bad_wr, ring_, rq_, doorbell_);
}

// ------------------------------------------------------------------------------ QP ---
RnicQp::RnicQp(RnicContext& ctx, uint32_t qpn, const QpInitAttr& init, Ring<sr::SendWqe> sq,
               Ring<sr::RecvWqe> rq)
    : ctx_(ctx),
      gen_(ctx.generation()),
      qpn_(qpn),
      sig_all_(init.sq_sig_all),
      srq_(init.srq != nullptr ? ctx.srqs[init.srq->handle()] : nullptr),
      send_cqn_(init.send_cq->handle()),
      recv_cqn_(init.recv_cq->handle()),
      sq_ring_(std::move(sq)),
      rq_ring_(std::move(rq)),
      sq_doorbell_(ctx.doorbell(sr::reg::sq_doorbell(qpn))),
      rq_doorbell_(ctx.doorbell(sr::reg::rq_doorbell(qpn))),
      push_slots_(ctx.push_slots(qpn)) {
  sq_.log = sq_ring_.log;
  sq_.max_sge = init.cap.max_send_sge;
  rq_.log = rq_ring_.log;  // 0 with an SRQ
  rq_.max_sge = init.cap.max_recv_sge;
}

RnicQp::~RnicQp() {
  if (gen_ != ctx_.generation()) return;
  ctx_.qps[qpn_] = nullptr;
  const sr::HandleIn in{qpn_};
  ctx_.command(sr::CmdOpcode::kDestroyQp, &in, sizeof in, nullptr, 0);
  clean_cqs();
}

void RnicQp::clean_cqs() {
  for (uint32_t cqn : {send_cqn_, recv_cqn_})
    if (ctx_.cqs[cqn] != nullptr) ctx_.cqs[cqn]->clean(qpn_);
}

int RnicQp::modify(const QpAttr& a, uint32_t mask) {
  if (gen_ != ctx_.generation()) return -EIO;  // its number may be another QP's now
  sr::QpAttrs in{};
  in.qpn = qpn_;
  in.attr_mask = mask;
  in.dest_address = a.dest_address;
  in.dest_qpn = a.dest_qp_num;
  in.rq_psn = a.rq_psn;
  in.sq_psn = a.sq_psn;
  in.access_flags = a.qp_access_flags;
  in.state = static_cast<uint8_t>(a.qp_state);
  in.cur_state = static_cast<uint8_t>(a.cur_qp_state);
  in.path_mtu = static_cast<uint8_t>(a.path_mtu);
  in.timeout = a.timeout;
  in.retry_cnt = a.retry_cnt;
  in.rnr_retry = a.rnr_retry;
  in.min_rnr_timer = a.min_rnr_timer;
  in.max_rd_atomic = a.max_rd_atomic;
  in.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if ((mask & qp_attr::kPort) && a.port_num != 1) return -EINVAL;         // one port
  if ((mask & qp_attr::kPkeyIndex) && a.pkey_index != 0) return -EINVAL;  // one partition
  const int rc = ctx_.command(sr::CmdOpcode::kModifyQp, &in, sizeof in, nullptr, 0);
  if (rc != 0) return rc;
  if (mask & qp_attr::kState) {
    if (a.qp_state == QpState::kReset) {
      // The device emptied the queues and zeroed the doorbells: start over, and drop what
      // the QP completed before (its counters would retire slots of the new queues).
      sq_ = WorkQueue{0, 0, sq_.log, sq_.max_sge};
      rq_ = WorkQueue{0, 0, rq_.log, rq_.max_sge};
      clean_cqs();
    }
    state_.store(a.qp_state, std::memory_order_release);
  }
  return 0;
}

int RnicQp::query(QpAttr* out) {
  if (out == nullptr) return -EINVAL;
  if (gen_ != ctx_.generation()) return -EIO;
  const sr::HandleIn in{qpn_};
  sr::QpAttrs q{};
  if (int rc = ctx_.command(sr::CmdOpcode::kQueryQp, &in, sizeof in, &q, sizeof q); rc != 0)
    return rc;
  out->qp_state = out->cur_qp_state = static_cast<QpState>(q.state);
  out->path_mtu = static_cast<Mtu>(q.path_mtu);
  out->qp_access_flags = q.access_flags;
  out->dest_address = q.dest_address;
  out->dest_qp_num = q.dest_qpn;
  out->rq_psn = q.rq_psn;
  out->sq_psn = q.sq_psn;
  out->timeout = q.timeout;
  out->retry_cnt = q.retry_cnt;
  out->rnr_retry = q.rnr_retry;
  out->min_rnr_timer = q.min_rnr_timer;
  out->max_rd_atomic = q.max_rd_atomic;
  out->max_dest_rd_atomic = q.max_dest_rd_atomic;
  state_.store(out->qp_state, std::memory_order_release);
  return 0;
}

int RnicQp::post_send(const SendWr& first, const SendWr** bad_wr) {
  const QpState s = state_.load(std::memory_order_acquire);
  int rc = ctx_.check(gen_);
  if (rc == 0 && s != QpState::kRts && s != QpState::kErr) rc = -EINVAL;
  const uint32_t before = sq_.produced;
  const SendWr* wr = &first;
  for (; rc == 0 && wr != nullptr; wr = wr->next) {
    const auto op = static_cast<uint8_t>(wr->opcode);
    if (op > static_cast<uint8_t>(WrOpcode::kRdmaRead) || wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > sq_.max_sge ||
        (wr->send_flags & ~(send_flag::kSignaled | send_flag::kSolicited | send_flag::kFence))) {
      rc = -EINVAL;
      break;
    }
    if (sq_.free_slots() == 0) {
      rc = -ENOMEM;
      break;
    }
    sr::SendWqe* w = sq_ring_.at(sq_.produced);
    std::memset(w, 0, sizeof *w);
    if (!copy_sges(w->sge, wr->sg_list, wr->num_sge)) {
      rc = -EINVAL;
      break;
    }
    w->opcode = op;
    w->flags = static_cast<uint8_t>(
        ((wr->send_flags & send_flag::kSignaled) || sig_all_ ? sr::wqe_flag::kSignaled : 0) |
        (wr->send_flags & send_flag::kSolicited ? sr::wqe_flag::kSolicited : 0) |
        (wr->send_flags & send_flag::kFence ? sr::wqe_flag::kFence : 0));
    w->num_sge = static_cast<uint8_t>(wr->num_sge);
    w->imm_data = wr->imm_data;
    w->wr_id = wr->wr_id;
    w->remote_addr = wr->remote_addr;
    w->rkey = wr->rkey;
    ++sq_.produced;
  }
  if (rc != 0 && bad_wr != nullptr) *bad_wr = wr;
  if (sq_.produced == before) return rc;
  if (sq_.produced - before == 1 && push_slots_ != nullptr && sq_.produced != 0)
    push_wqe(push_slots_, *sq_ring_.at(before), sq_.produced);
  ring_doorbell(sq_doorbell_, sq_.produced);
  return rc;
}

int RnicQp::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  const QpState s = state_.load(std::memory_order_acquire);
  if (const int rc = ctx_.check(gen_); rc != 0) {
    if (bad_wr != nullptr) *bad_wr = &wr;
    return rc;
  }
  if (srq_ != nullptr || s == QpState::kReset || s == QpState::kSqd || s == QpState::kSqe) {
    if (bad_wr != nullptr) *bad_wr = &wr;
    return -EINVAL;
  }
  return post_recv_chain(wr, bad_wr, rq_ring_, rq_, rq_doorbell_);
}

}  // namespace pollux::rdma::rnic
