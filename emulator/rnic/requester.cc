// The requester half of an RC QP: fetching send WQEs, segmenting them into packets at the
// path MTU with PSNs, go-back-N retransmission on timeout or NAK, RNR waits, READ responses
// and the outstanding-READ limit.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "emulator/rnic/rnic.h"

namespace pollux::emu::rnic {

namespace roce = spec::roce;
namespace op = spec::roce::opcode;

namespace {
uint32_t path_mtu(const Qp& qp) {
  return roce::mtu_bytes(static_cast<roce::Mtu>(qp.attrs.path_mtu));
}
bool is_read(uint8_t wr) {
  return wr == static_cast<uint8_t>(sr::WrOpcode::kRdmaRead);
}
}  // namespace

// Takes newly posted WQEs off the send queue, checks them as the hardware does before it
// sends anything (opcode, SGE count, local keys) and gives each its PSNs.
bool Rnic::fetch_send_wqes(Qp& qp, uint32_t qpn) {
  const uint32_t size = 1u << qp.log_sq;
  const uint32_t posted = doorbell(sr::reg::sq_doorbell(qpn));
  bool did = false;
  while (qp.sq_fetched != posted && qp.ops.size() < size && qp.state == sr::QpState::kRts) {
    if (posted - qp.sq_fetched > size) {  // the host claims more WQEs than the ring holds
      post_event(sr::EventType::kQpFatal, qpn, 1);
      enter_error(qpn);
      return true;
    }
    SendOp o;
    o.wqe_counter = qp.sq_fetched;
    o.fetched_ns = now_;
    const bool pushed = take_pushed_wqe(qpn, qp.sq_fetched + 1, &o.wqe);
    const uint8_t* w =
        pushed ? reinterpret_cast<const uint8_t*>(&o.wqe)
               : mem_.translate(
                     qp.sq_iova + uint64_t{qp.sq_fetched & (size - 1)} * sizeof(sr::SendWqe),
                     sizeof(sr::SendWqe));
    ++qp.sq_fetched;
    did = true;
    sr::WcStatus bad = sr::WcStatus::kSuccess;
    if (w == nullptr) {
      ++counters_.dma_faults;
      bad = sr::WcStatus::kLocQpOpErr;
    } else {
      if (!pushed) std::memcpy(&o.wqe, w, sizeof o.wqe);
      if (o.wqe.opcode > static_cast<uint8_t>(sr::WrOpcode::kRdmaRead) ||
          o.wqe.num_sge > sr::kMaxSge)
        bad = sr::WcStatus::kLocQpOpErr;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; bad == sr::WcStatus::kSuccess && i < o.wqe.num_sge; ++i) {
      const sr::Sge& s = o.wqe.sge[i];
      total += s.length;
      if (s.length == 0) continue;
      const uint32_t need = is_read(o.wqe.opcode) ? sr::access::kLocalWrite : 0;
      if (local_ptr(qp, s.lkey, s.addr, s.length, need) == nullptr) bad = sr::WcStatus::kLocProtErr;
    }
    if (bad == sr::WcStatus::kSuccess && total > sr::kMaxMessageBytes)
      bad = sr::WcStatus::kLocLenErr;
    if (bad != sr::WcStatus::kSuccess) {
      complete_send(qp, qpn, o, bad);
      enter_error(qpn);
      return true;
    }
    o.length = static_cast<uint32_t>(total);
    o.is_read = is_read(o.wqe.opcode);
    o.npkts = roce::packets_for(o.length, path_mtu(qp));
    o.first_psn = qp.next_psn;
    qp.next_psn = roce::psn_add(qp.next_psn, o.npkts);
    // Timed: the doorbell crossed PCIe, then the WQE was read (unless it came with the
    // doorbell) and checked (the checks above use its bytes at once; nothing of it leaves
    // before this time).
    if (timing_) {
      const SimTime stored = stores_ps();
      o.ready_ps = pushed ? timing_->pushed_wqe(stored)
                          : timing_->fetch_wqe(now_ps(), timing_->doorbell(stored));
    }
    qp.ops.push_back(o);
  }
  return did;
}

// The slot is the host's memory as much as ours: it may be filling it for a later post while
// we read. A slot counts only if its count is the one asked for both before and after the
// copy (the host zeroes the count before it rewrites a slot); anything else, and the WQE is
// read from the ring as usual.
bool Rnic::take_pushed_wqe(uint32_t qpn, uint32_t count, sr::SendWqe* out) {
  if (push_ == nullptr || count == 0 || qpn >= sr::kMaxQp) return false;
  volatile uint8_t* slot = push_ + (sr::reg::push_slot(qpn, count) - sr::reg::kPushBase);
  auto* tag = reinterpret_cast<volatile uint32_t*>(slot + offsetof(sr::SendWqe, push_count));
  if (__atomic_load_n(tag, __ATOMIC_ACQUIRE) != count) return false;
  uint64_t words[sizeof *out / 8];
  for (std::size_t i = 0; i < sizeof *out / 8; ++i)
    words[i] = reinterpret_cast<volatile const uint64_t*>(slot)[i];
  std::memcpy(out, words, sizeof *out);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(tag, __ATOMIC_RELAXED) != count) return false;
  out->push_count = 0;
  ++counters_.pushed_wqes;
  return true;
}

void Rnic::clear_push_slots(uint32_t qpn) {
  if (push_ == nullptr || qpn >= sr::kMaxQp) return;
  for (uint32_t count : {0u, 1u}) {
    volatile uint8_t* slot = push_ + (sr::reg::push_slot(qpn, count) - sr::reg::kPushBase);
    __atomic_store_n(reinterpret_cast<volatile uint32_t*>(slot + offsetof(sr::SendWqe, push_count)),
                     0u, __ATOMIC_RELEASE);
  }
}

void Rnic::arm_ack_timer(Qp& qp) {
  if (qp.ack_deadline == 0 && qp.attrs.timeout != 0)
    qp.ack_deadline = now_ + roce::local_ack_timeout_ns(qp.attrs.timeout);
}

bool Rnic::transmit(Qp& qp, uint32_t qpn) {
  if (qp.rnr_deadline != 0) return false;  // waiting out an RNR NAK
  bool did = false;
  const uint32_t max_reads = std::max<uint32_t>(1, qp.attrs.max_rd_atomic);
  while (qp.state == sr::QpState::kRts && qp.tx_op < qp.ops.size() && tx_room()) {
    SendOp& o = qp.ops[qp.tx_op];
    const uint32_t psn = roce::psn_add(o.first_psn, qp.tx_pkt);
    if (roce::psn_diff(psn, qp.una_psn) >= static_cast<int32_t>(config_.max_inflight_packets))
      break;
    // READs still to return before this one: the outstanding-READ limit and the fence.
    uint32_t reads_before = 0;
    for (std::size_t i = 0; i < qp.tx_op; ++i) reads_before += qp.ops[i].is_read;
    if (o.is_read && reads_before >= max_reads) break;
    if ((o.wqe.flags & sr::wqe_flag::kFence) && reads_before > 0 && qp.tx_pkt == 0) break;
    if (roce::psn_diff(psn, qp.tx_high) < 0) {
      ++counters_.retransmitted_packets;
      ++qp.counters.retransmitted_packets;
    }
    send_request_packet(qp, qpn, o, qp.tx_pkt);
    if (qp.state != sr::QpState::kRts) return true;  // a local error ended the QP
    did = true;
    arm_ack_timer(qp);
    // A READ request covers all its response PSNs at once.
    const uint32_t sent_to = o.is_read ? o.npkts : qp.tx_pkt + 1;
    if (roce::psn_diff(roce::psn_add(o.first_psn, sent_to), qp.tx_high) > 0)
      qp.tx_high = roce::psn_add(o.first_psn, sent_to);
    if (sent_to >= o.npkts) {
      ++qp.tx_op;
      qp.tx_pkt = 0;
    } else {
      qp.tx_pkt = sent_to;
    }
  }
  return did;
}

void Rnic::send_request_packet(Qp& qp, uint32_t qpn, SendOp& o, uint32_t pkt) {
  const uint32_t mtu = path_mtu(qp);
  const uint32_t psn = roce::psn_add(o.first_psn, pkt);
  const auto wr = static_cast<sr::WrOpcode>(o.wqe.opcode);
  // Timed: a packet starts once its WQE is in; its payload is read by DMA, then it goes
  // through the transmit pipeline.
  const SimTime start = std::max(now_ps(), o.ready_ps);
  if (wr == sr::WrOpcode::kRdmaRead) {
    // A (re)issued READ asks for the rest of the data from this packet on.
    roce::Reth reth{};
    const uint32_t off = pkt * mtu;
    reth.set(o.wqe.remote_addr + off, o.wqe.rkey, o.length - off);
    emit(qp, op::kRdmaReadRequest, psn, true, false, &reth, nullptr, nullptr, nullptr, 0,
         timing_ ? timing_->transmit(start) : start);
    return;
  }
  const uint32_t off = pkt * mtu;
  const uint32_t n = std::min(mtu, o.length - off);
  const SimTime ready =
      timing_ ? timing_->transmit(timing_->read_payload(now_ps(), start, n)) : start;
  const bool only = o.npkts == 1, first = pkt == 0, last = pkt + 1 == o.npkts;
  const bool send = wr == sr::WrOpcode::kSend || wr == sr::WrOpcode::kSendWithImm;
  const bool imm = wr == sr::WrOpcode::kSendWithImm || wr == sr::WrOpcode::kRdmaWriteWithImm;
  uint8_t code;
  if (send) {
    code = only    ? (imm ? op::kSendOnlyWithImmediate : op::kSendOnly)
           : first ? op::kSendFirst
           : last  ? (imm ? op::kSendLastWithImmediate : op::kSendLast)
                   : op::kSendMiddle;
  } else {
    code = only    ? (imm ? op::kRdmaWriteOnlyWithImmediate : op::kRdmaWriteOnly)
           : first ? op::kRdmaWriteFirst
           : last  ? (imm ? op::kRdmaWriteLastWithImmediate : op::kRdmaWriteLast)
                   : op::kRdmaWriteMiddle;
  }
  scratch_.resize(n);
  if (n > 0 && !gather(qp, o.wqe.sge, o.wqe.num_sge, off, scratch_.data(), n)) {
    // The MR went away (or lost its mapping) after the WQE was fetched.
    const SendOp failed = o;
    qp.ops.erase_at(qp.tx_op);
    complete_send(qp, qpn, failed, sr::WcStatus::kLocProtErr);
    enter_error(qpn);
    return;
  }
  roce::Reth reth{};
  const bool with_reth = !send && (first || only);
  if (with_reth) reth.set(o.wqe.remote_addr, o.wqe.rkey, o.length);
  const uint32_t imm_value = o.wqe.imm_data;
  // An ACK is asked for at the end of each message and, within long messages, often enough
  // that the window of unacknowledged packets keeps moving.
  const uint32_t ack_every = std::max<uint32_t>(1, config_.max_inflight_packets / 4);
  const bool ack_req = last || only || (pkt + 1) % ack_every == 0;
  emit(qp, code, psn, ack_req, (last || only) && (o.wqe.flags & sr::wqe_flag::kSolicited),
       with_reth ? &reth : nullptr, nullptr, (imm && (last || only)) ? &imm_value : nullptr,
       scratch_.data(), n, ready);
}

void Rnic::rewind_to(Qp& qp, uint32_t psn) {
  // Only ever backwards: an ACK beyond an incomplete READ may already have sent the cursor
  // back to the READ, and a NAK for a later PSN in the same packet train must not skip it.
  const uint32_t cursor =
      qp.tx_op < qp.ops.size() ? roce::psn_add(qp.ops[qp.tx_op].first_psn, qp.tx_pkt) : qp.next_psn;
  if (roce::psn_diff(psn, cursor) >= 0) return;
  for (std::size_t i = 0; i < qp.ops.size(); ++i) {
    const SendOp& o = qp.ops[i];
    if (roce::psn_diff(psn, o.last_psn()) <= 0) {
      const int32_t d = roce::psn_diff(psn, o.first_psn);
      qp.tx_op = i;
      qp.tx_pkt = d > 0 ? static_cast<uint32_t>(d) : 0;
      return;
    }
  }
  qp.tx_op = qp.ops.size();
  qp.tx_pkt = 0;
}

// Every request packet up to and including `psn` arrived: complete the WQEs that ends.
void Rnic::acknowledge_through(Qp& qp, uint32_t qpn, uint32_t psn) {
  while (!qp.ops.empty() && qp.state == sr::QpState::kRts) {
    SendOp& o = qp.ops.front();
    if (o.is_read) {
      // An acknowledgement beyond a READ whose responses have not all come means they were
      // lost (responses are sent in order): ask again from the first missing one.
      if (roce::psn_diff(psn, o.last_psn()) >= 0) rewind_to(qp, qp.una_psn);
      break;
    }
    if (roce::psn_diff(o.last_psn(), psn) > 0) {
      if (roce::psn_diff(psn, qp.una_psn) >= 0) {
        // Progress inside a message restores the retry count as a completed one does.
        qp.una_psn = roce::psn_add(psn, 1);
        qp.retry_left = qp.attrs.retry_cnt;
      }
      break;
    }
    const SendOp done = o;
    qp.ops.pop_front();
    if (qp.tx_op > 0) {
      --qp.tx_op;
    } else {
      qp.tx_pkt = 0;
    }
    qp.una_psn = roce::psn_add(done.last_psn(), 1);
    qp.retry_left = qp.attrs.retry_cnt;
    qp.rnr_retry_left = qp.attrs.rnr_retry;
    complete_send(qp, qpn, done, sr::WcStatus::kSuccess);
  }
}

void Rnic::handle_response(Qp& qp, uint32_t qpn, const Packet& p) {
  if (qp.state != sr::QpState::kRts || qp.ops.empty()) {
    ++counters_.dropped_packets;  // nothing outstanding: a stale or stray response
    return;
  }
  const uint8_t code = p.bth->opcode();
  if (code == op::kAcknowledge) {
    handle_ack(qp, qpn, p);
  } else {
    handle_read_response(qp, qpn, p);
  }
  // Progress restarts the retransmission timer; nothing outstanding stops it.
  if (qp.state == sr::QpState::kRts) {
    const uint32_t sent = qp.tx_op < qp.ops.size()
                              ? roce::psn_add(qp.ops[qp.tx_op].first_psn, qp.tx_pkt)
                              : qp.next_psn;
    qp.ack_deadline = 0;
    if (!qp.ops.empty() && roce::psn_diff(sent, qp.una_psn) > 0) arm_ack_timer(qp);
  }
}

void Rnic::handle_ack(Qp& qp, uint32_t qpn, const Packet& p) {
  if (p.aeth == nullptr) return;
  const uint32_t psn = p.bth->psn();
  // Only PSNs in [una - 1, tx_high) can be acknowledged; anything else is stale.
  if (roce::psn_diff(psn, qp.una_psn) < -1 || roce::psn_diff(psn, qp.tx_high) >= 0) {
    ++counters_.dropped_packets;
    return;
  }
  const uint8_t syn = p.aeth->syndrome();
  const uint8_t type = roce::syndrome::type(syn);
  if (type == roce::syndrome::kTypeAck) {
    acknowledge_through(qp, qpn, psn);
    return;
  }
  // NAKs name the PSN that failed: everything before it arrived.
  acknowledge_through(qp, qpn, roce::psn_add(psn, roce::kPsnMask));
  if (qp.state != sr::QpState::kRts || qp.ops.empty()) return;
  if (type == roce::syndrome::kTypeRnrNak) {
    ++counters_.rnr_naks_received;
    ++qp.counters.rnr_naks_received;
    if (qp.rnr_retry_left == 0) {
      const SendOp o = qp.ops.front();
      qp.ops.pop_front();
      complete_send(qp, qpn, o, sr::WcStatus::kRnrRetryExcErr, syn);
      enter_error(qpn);
      return;
    }
    if (qp.attrs.rnr_retry != roce::kRnrRetryInfinite) --qp.rnr_retry_left;
    qp.rnr_deadline = now_ + uint64_t{roce::rnr_timer_us(roce::syndrome::value(syn))} * 1000;
    rewind_to(qp, psn);
    return;
  }
  if (type != roce::syndrome::kTypeNak) return;
  const uint8_t code = roce::syndrome::value(syn);
  if (code == roce::syndrome::kNakPsnSequenceError) {
    // Waiting out an RNR NAK for this very PSN: going back there is already planned.
    if (qp.rnr_deadline != 0 && psn == qp.una_psn) return;
    if (qp.retry_left == 0) {
      const SendOp o = qp.ops.front();
      qp.ops.pop_front();
      complete_send(qp, qpn, o, sr::WcStatus::kRetryExcErr, syn);
      enter_error(qpn);
      return;
    }
    --qp.retry_left;
    rewind_to(qp, psn);
    return;
  }
  sr::WcStatus st = sr::WcStatus::kRemOpErr;
  if (code == roce::syndrome::kNakInvalidRequest || code == roce::syndrome::kNakInvalidRdRequest)
    st = sr::WcStatus::kRemInvReqErr;
  else if (code == roce::syndrome::kNakRemoteAccessError)
    st = sr::WcStatus::kRemAccessErr;
  const SendOp o = qp.ops.front();
  qp.ops.pop_front();
  complete_send(qp, qpn, o, st, syn);
  enter_error(qpn);
}

void Rnic::handle_read_response(Qp& qp, uint32_t qpn, const Packet& p) {
  const uint32_t psn = p.bth->psn();
  const int32_t d = roce::psn_diff(psn, qp.una_psn);
  if (d != 0) {
    // Older: a duplicate. Newer: one went missing; the timer or a later ACK recovers it.
    ++counters_.dropped_packets;
    return;
  }
  // A response to a later READ acknowledges every SEND/WRITE before it.
  acknowledge_through(qp, qpn, roce::psn_add(psn, roce::kPsnMask));
  if (qp.state != sr::QpState::kRts || qp.ops.empty()) return;
  SendOp& o = qp.ops.front();
  const int32_t idx = roce::psn_diff(psn, o.first_psn);
  const uint32_t mtu = path_mtu(qp);
  if (!o.is_read || idx < 0 || static_cast<uint32_t>(idx) >= o.npkts) {
    ++counters_.dropped_packets;
    return;
  }
  const uint32_t off = static_cast<uint32_t>(idx) * mtu;
  const uint32_t want = std::min(mtu, o.length - off);
  const bool last_pkt = static_cast<uint32_t>(idx) + 1 == o.npkts;
  const uint8_t code = p.bth->opcode();
  const bool ends = code == op::kRdmaReadResponseLast || code == op::kRdmaReadResponseOnly;
  if (p.payload_len != want || ends != last_pkt) {
    const SendOp bad = o;
    qp.ops.pop_front();
    complete_send(qp, qpn, bad, sr::WcStatus::kBadRespErr);
    enter_error(qpn);
    return;
  }
  if (want > 0 && !scatter(qp, o.wqe.sge, o.wqe.num_sge, off, p.payload, want)) {
    const SendOp bad = o;
    qp.ops.pop_front();
    complete_send(qp, qpn, bad, sr::WcStatus::kLocProtErr);
    enter_error(qpn);
    return;
  }
  qp.una_psn = roce::psn_add(psn, 1);
  qp.retry_left = qp.attrs.retry_cnt;
  if (!last_pkt) return;
  const SendOp done = o;
  qp.ops.pop_front();
  if (qp.tx_op > 0) {
    --qp.tx_op;
  } else {
    qp.tx_pkt = 0;
  }
  qp.rnr_retry_left = qp.attrs.rnr_retry;
  complete_send(qp, qpn, done, sr::WcStatus::kSuccess);
}

void Rnic::check_timers(Qp& qp, uint32_t qpn) {
  if (qp.rnr_deadline != 0 && now_ >= qp.rnr_deadline) qp.rnr_deadline = 0;
  if (qp.ack_deadline == 0 || now_ < qp.ack_deadline) return;
  qp.ack_deadline = 0;
  if (qp.ops.empty()) return;
  ++counters_.timeouts;
  ++qp.counters.timeouts;
  if (qp.retry_left == 0) {
    const SendOp o = qp.ops.front();
    qp.ops.pop_front();
    complete_send(qp, qpn, o, sr::WcStatus::kRetryExcErr);
    enter_error(qpn);
    return;
  }
  --qp.retry_left;
  rewind_to(qp, qp.una_psn);
}

}  // namespace pollux::emu::rnic
