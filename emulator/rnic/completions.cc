// Completion and event queues, the error state and flushing.
#include <algorithm>
#include <cstring>

#include "emulator/rnic/rnic.h"

namespace pollux::emu::rnic {

uint32_t Rnic::doorbell(uint32_t offset) const {
  const volatile uint8_t* p = doorbells_ + (offset - sr::reg::kDoorbellBase);
  // A plain 32-bit load of what the host stored (the page is shared memory).
  return __atomic_load_n(reinterpret_cast<const volatile uint32_t*>(p), __ATOMIC_ACQUIRE);
}

namespace {
// Writes an entry whose last byte is the owner/phase byte: body first, owner last, so a host
// that sees the new phase sees the whole entry.
void publish(uint8_t* slot, const void* entry, std::size_t size, uint8_t phase) {
  std::memcpy(slot, entry, size - 1);
  __atomic_store_n(slot + size - 1, phase, __ATOMIC_RELEASE);
}
}  // namespace

bool Rnic::post_cqe(uint32_t cqn, const sr::Cqe& cqe) {
  Cq& cq = cqs_[cqn];
  if (!cq.valid || cq.overflowed) return false;
  const uint32_t consumed = doorbell(sr::reg::cq_doorbell(cqn));
  if (cq.ring.produced - consumed >= cq.ring.size()) {
    // The host did not free entries in time: the CQ is in error and says so once.
    cq.overflowed = true;
    ++counters_.cq_overflows;
    post_event(sr::EventType::kCqErr, cqn);
    return false;
  }
  uint8_t* slot = mem_.translate(
      cq.ring.iova + uint64_t{cq.ring.produced & (cq.ring.size() - 1)} * sizeof(sr::Cqe),
      sizeof(sr::Cqe));
  if (slot == nullptr) {
    ++counters_.dma_faults;
    return false;
  }
  publish(slot, &cqe, sizeof cqe, sr::phase_for(cq.ring.produced, cq.ring.log_size));
  ++cq.ring.produced;
  return true;
}

void Rnic::post_event(sr::EventType type, uint32_t resource, uint32_t detail) {
  if (!eq_valid_) return;
  // The event queue has no consumer doorbell: the driver sizes it (1,024 entries) far beyond
  // the events its resources can raise between two reads; a host that never reads it finds
  // the oldest entries overwritten.
  uint8_t* slot =
      mem_.translate(eq_.iova + uint64_t{eq_.produced & (eq_.size() - 1)} * sizeof(sr::EventEntry),
                     sizeof(sr::EventEntry));
  if (slot == nullptr) {
    ++counters_.dma_faults;
    return;
  }
  sr::EventEntry e{};
  e.type = static_cast<uint8_t>(type);
  e.resource = resource;
  e.detail = detail;
  publish(slot, &e, sizeof e, sr::phase_for(eq_.produced, eq_.log_size));
  ++eq_.produced;
}

namespace {
sr::WcOpcode send_wc_opcode(uint8_t wr_opcode) {
  switch (static_cast<sr::WrOpcode>(wr_opcode)) {
    case sr::WrOpcode::kRdmaWrite:
    case sr::WrOpcode::kRdmaWriteWithImm:
      return sr::WcOpcode::kRdmaWrite;
    case sr::WrOpcode::kRdmaRead:
      return sr::WcOpcode::kRdmaRead;
    default:
      return sr::WcOpcode::kSend;
  }
}
}  // namespace

void Rnic::complete_send(Qp& qp, uint32_t qpn, const SendOp& op, sr::WcStatus status,
                         uint8_t vendor_err) {
  if (status == sr::WcStatus::kSuccess) {
    const uint64_t took = now_ - std::min(now_, op.fetched_ns);
    ++qp.counters.messages;
    qp.counters.latency_ns_sum += took;
    qp.counters.latency_ns_max = std::max(qp.counters.latency_ns_max, took);
  } else {
    ++qp.counters.error_completions;
  }
  // Successful unsignaled WQEs complete silently; errors always produce an entry.
  if (status == sr::WcStatus::kSuccess && !(op.wqe.flags & sr::wqe_flag::kSignaled)) return;
  sr::Cqe c{};
  c.wr_id = op.wqe.wr_id;
  c.byte_len = op.length;
  c.qpn = qpn;
  c.wqe_counter = static_cast<uint16_t>(op.wqe_counter);
  c.status = static_cast<uint8_t>(status);
  c.opcode = static_cast<uint8_t>(send_wc_opcode(op.wqe.opcode));
  c.vendor_err = vendor_err;
  deliver_completion(qpn, qp.send_cqn, c);
}

void Rnic::complete_recv(Qp& qp, uint32_t qpn, sr::WcStatus status, uint32_t byte_len,
                         bool with_imm, uint32_t imm, bool rdma_with_imm) {
  if (!qp.have_rwqe) return;
  qp.have_rwqe = false;
  if (status != sr::WcStatus::kSuccess) ++qp.counters.error_completions;
  sr::Cqe c{};
  c.wr_id = qp.rwqe.wr_id;
  c.byte_len = byte_len;
  c.imm_data = with_imm ? imm : 0;
  c.qpn = qpn;
  c.wqe_counter = static_cast<uint16_t>(qp.rwqe_counter);
  c.status = static_cast<uint8_t>(status);
  c.opcode =
      static_cast<uint8_t>(rdma_with_imm ? sr::WcOpcode::kRecvRdmaWithImm : sr::WcOpcode::kRecv);
  c.flags = static_cast<uint8_t>(sr::cqe_flag::kRecv | (with_imm ? sr::cqe_flag::kWithImm : 0));
  deliver_completion(qpn, qp.recv_cqn, c);
}

// Functional: the CQE is written now. Timed: its DMA write is booked on the link behind the
// data it completes (written before it), and the entry is posted when the write lands, in
// the order the completions were made.
void Rnic::deliver_completion(uint32_t qpn, uint32_t cqn, const sr::Cqe& cqe) {
  if (!timing_) {
    post_completion(qpn, cqn, cqe);
    return;
  }
  const SimTime due = std::max(timing_->write(now_ps(), sizeof(sr::Cqe)), last_completion_);
  last_completion_ = due;
  completions_.push_back(PendingCompletion{due, qpn, cqn, cqe});
}

void Rnic::post_completion(uint32_t qpn, uint32_t cqn, const sr::Cqe& cqe) {
  if (post_cqe(cqn, cqe) || !cqs_[cqn].overflowed) return;
  // The CQ overflowed: the QP whose completion was lost can go on no longer.
  if (qpn < qps_.size() && qps_[qpn].valid && qps_[qpn].state != sr::QpState::kErr) {
    post_event(sr::EventType::kQpFatal, qpn);
    enter_error(qpn);
  }
}

void Rnic::drop_completions(uint32_t qpn) {
  std::erase_if(completions_, [qpn](const PendingCompletion& c) { return c.qpn == qpn; });
}

bool Rnic::force_qp_error(uint32_t qpn) {
  if (qpn >= qps_.size() || !qps_[qpn].valid) return false;
  const sr::QpState st = qps_[qpn].state;
  if (st == sr::QpState::kReset || st == sr::QpState::kErr) return false;
  post_event(sr::EventType::kQpFatal, qpn);
  enter_error(qpn);
  return true;
}

void Rnic::enter_error(uint32_t qpn) {
  Qp& qp = qps_[qpn];
  if (qp.state == sr::QpState::kErr) return;
  qp.state = sr::QpState::kErr;
  ++qp.counters.errors;
  qp.ack_deadline = qp.rnr_deadline = 0;
  qp.in_progress = Incoming::kNone;
  qp.responses.clear();  // READ responses still owed are abandoned
  flush_queues(qp, qpn);
}

// In the error state every outstanding and newly posted work request completes with a flush
// error, in order: first what the requester had fetched, then the rest of the send queue, then
// the receive queue (not a shared receive queue: its WQEs belong to other QPs too).
void Rnic::flush_queues(Qp& qp, uint32_t qpn) {
  while (!qp.ops.empty()) {
    const SendOp op = qp.ops.front();
    qp.ops.pop_front();
    complete_send(qp, qpn, op, sr::WcStatus::kWrFlushErr);
  }
  qp.tx_op = qp.tx_pkt = 0;
  const uint32_t sq_size = 1u << qp.log_sq;
  const uint32_t sq_posted = doorbell(sr::reg::sq_doorbell(qpn));
  // A producer count more than a ring ahead is a host bug; flush what the ring can hold.
  if (sq_posted - qp.sq_fetched > sq_size) qp.sq_fetched = sq_posted - sq_size;
  while (qp.sq_fetched != sq_posted) {
    SendOp op;
    op.wqe_counter = qp.sq_fetched;
    const uint8_t* w =
        mem_.translate(qp.sq_iova + uint64_t{qp.sq_fetched & (sq_size - 1)} * sizeof(sr::SendWqe),
                       sizeof(sr::SendWqe));
    if (w != nullptr) std::memcpy(&op.wqe, w, sizeof op.wqe);
    ++qp.sq_fetched;
    complete_send(qp, qpn, op, sr::WcStatus::kWrFlushErr);
  }
  if (qp.have_rwqe) complete_recv(qp, qpn, sr::WcStatus::kWrFlushErr, 0, false, 0, false);
  if (qp.srqn != sr::kNone) return;
  const uint32_t rq_size = 1u << qp.log_rq;
  const uint32_t rq_posted = doorbell(sr::reg::rq_doorbell(qpn));
  if (rq_posted - qp.rq_consumed > rq_size) qp.rq_consumed = rq_posted - rq_size;
  while (qp.rq_consumed != rq_posted) {
    const uint8_t* w =
        mem_.translate(qp.rq_iova + uint64_t{qp.rq_consumed & (rq_size - 1)} * sizeof(sr::RecvWqe),
                       sizeof(sr::RecvWqe));
    qp.rwqe = {};
    if (w != nullptr) std::memcpy(&qp.rwqe, w, sizeof qp.rwqe);
    qp.rwqe_counter = qp.rq_consumed++;
    qp.have_rwqe = true;
    complete_recv(qp, qpn, sr::WcStatus::kWrFlushErr, 0, false, 0, false);
  }
}

}  // namespace pollux::emu::rnic
