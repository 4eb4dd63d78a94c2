// The responder half of an RC QP: PSN checks (duplicates re-acknowledged, gaps NAKed once),
// the opcode sequence of multi-packet messages, receive WQEs (RNR NAK when there is none),
// remote key checks, READ responses, and the error classes that move the QP to Error.
#include <algorithm>
#include <cstring>

#include "emulator/rnic/rnic.h"

namespace pollux::emu::rnic {

namespace roce = spec::roce;
namespace op = spec::roce::opcode;
namespace syn = spec::roce::syndrome;

namespace {
uint32_t path_mtu(const Qp& qp) {
  return roce::mtu_bytes(static_cast<roce::Mtu>(qp.attrs.path_mtu));
}
bool needs_recv_wqe(uint8_t code) {
  return op::is_send(code) || code == op::kRdmaWriteLastWithImmediate ||
         code == op::kRdmaWriteOnlyWithImmediate;
}
}  // namespace

void Rnic::send_ack(Qp& qp, uint8_t syndrome, uint32_t psn) {
  Response r;
  r.syndrome = syndrome;
  r.msn = qp.msn;
  r.psn = psn;
  qp.responses.push_back(r);
  send_responses(qp);
}

void Rnic::queue_read_response(Qp& qp, uint64_t va, uint32_t rkey, uint32_t len,
                               uint32_t first_psn) {
  Response r;
  r.read = true;
  r.msn = qp.msn;
  r.psn = first_psn;
  r.va = va;
  r.rkey = rkey;
  r.length = len;
  qp.responses.push_back(r);
  send_responses(qp);
}

// Sends what the responder owes, oldest first: acknowledgements at once (small, made by the
// transport itself), READ responses one packet at a time while the port has room, each read
// from host memory when it is made (functional: all of them now).
bool Rnic::send_responses(Qp& qp) {
  const uint32_t mtu = path_mtu(qp);
  bool did = false;
  while (!qp.responses.empty()) {
    Response& r = qp.responses.front();
    if (!r.read) {
      roce::Aeth aeth{};
      aeth.set(r.syndrome, r.msn);
      emit(qp, op::kAcknowledge, r.psn, false, false, nullptr, &aeth, nullptr, nullptr, 0,
           header_ready());
      qp.responses.pop_front();
      did = true;
      continue;
    }
    if (!tx_room()) break;
    const uint32_t n = roce::packets_for(r.length, mtu);
    const uint32_t i = r.sent;
    const uint32_t off = i * mtu;
    const uint32_t chunk = std::min(mtu, r.length - off);
    const uint32_t psn = roce::psn_add(r.psn, i);
    const uint8_t* data = nullptr;
    if (chunk > 0) {
      data = remote_ptr(qp, r.rkey, r.va + off, chunk, sr::access::kRemoteRead);
      if (data == nullptr) {  // the MR went away while its READ was being answered
        responder_error(qp, qpn_of(qp), syn::kNakRemoteAccessError, psn,
                        sr::WcStatus::kRemAccessErr, sr::EventType::kQpAccessErr);
        return true;
      }
    }
    const uint8_t code = n == 1       ? op::kRdmaReadResponseOnly
                         : i == 0     ? op::kRdmaReadResponseFirst
                         : i + 1 == n ? op::kRdmaReadResponseLast
                                      : op::kRdmaReadResponseMiddle;
    roce::Aeth aeth{};
    aeth.set(syn::ack(), r.msn);
    const SimTime ready =
        timing_ ? timing_->transmit(timing_->read_payload(now_ps(), now_ps(), chunk)) : now_ps();
    emit(qp, code, psn, false, false, nullptr, op::has_aeth(code) ? &aeth : nullptr, nullptr, data,
         chunk, ready);
    did = true;
    if (++r.sent == n) qp.responses.pop_front();
  }
  return did;
}

// Takes the next receive WQE (own RQ or SRQ) into qp.rwqe; false when none is posted.
bool Rnic::take_recv_wqe(Qp& qp) {
  if (qp.have_rwqe) return true;
  uint64_t iova;
  if (qp.srqn != sr::kNone) {
    Srq& s = srqs_[qp.srqn];
    const uint32_t posted = doorbell(sr::reg::srq_doorbell(qp.srqn));
    if (posted == s.consumed) return false;
    iova = s.iova + uint64_t{s.consumed & ((1u << s.log_size) - 1)} * sizeof(sr::RecvWqe);
    qp.rwqe_counter = s.consumed++;
  } else {
    const uint32_t posted = doorbell(sr::reg::rq_doorbell(&qp - qps_.data()));
    if (posted == qp.rq_consumed) return false;
    iova = qp.rq_iova + uint64_t{qp.rq_consumed & ((1u << qp.log_rq) - 1)} * sizeof(sr::RecvWqe);
    qp.rwqe_counter = qp.rq_consumed++;
  }
  const uint8_t* w = mem_.translate(iova, sizeof(sr::RecvWqe));
  if (timing_) timing_->prefetch_recv_wqe(now_ps());
  qp.rwqe = {};
  if (w != nullptr) {
    std::memcpy(&qp.rwqe, w, sizeof qp.rwqe);
  } else {
    ++counters_.dma_faults;
    qp.rwqe.num_sge = 0xff;  // unreadable: treated as malformed
  }
  qp.have_rwqe = true;
  return true;
}

uint8_t* Rnic::remote_ptr(const Qp& qp, uint32_t rkey, uint64_t va, uint32_t len, uint32_t access) {
  const Mr* mr = find_mr(rkey);
  if (mr == nullptr || mr->pdn != qp.pdn || !(mr->access & access) ||
      !(qp.attrs.access_flags & access) || !mr->contains(va, len))
    return nullptr;
  uint8_t* p = mem_.translate(mr->iova + (va - mr->va), len);
  if (p == nullptr) ++counters_.dma_faults;
  return p;
}

// Class A/C errors (IBA 9.9.3): NAK the requester, fail the receive WQE in progress, tell the
// host, and move the QP to Error (which flushes the rest).
void Rnic::responder_error(Qp& qp, uint32_t qpn, uint8_t nak_code, uint32_t psn,
                           sr::WcStatus recv_status, sr::EventType event) {
  qp.responses.clear();  // READ responses still owed are abandoned; the NAK goes now
  send_ack(qp, syn::nak(nak_code), psn);
  if (qp.have_rwqe) complete_recv(qp, qpn, recv_status, qp.rx_offset, false, 0, false);
  post_event(event, qpn);
  enter_error(qpn);
}

void Rnic::handle_request(Qp& qp, uint32_t qpn, const Packet& p) {
  const uint8_t code = p.bth->opcode();
  const uint32_t psn = p.bth->psn();
  const int32_t d = roce::psn_diff(psn, qp.epsn);
  const uint32_t mtu = path_mtu(qp);

  if (d < 0) {
    // A duplicate: its ACK was lost. SEND/WRITE are acknowledged again (up to the last PSN
    // seen); a READ is answered again from the data as it is now (IBA 9.7.5.1.2).
    ++counters_.duplicate_requests;
    ++qp.counters.duplicate_requests;
    if (code == op::kRdmaReadRequest && p.reth != nullptr) {
      const uint32_t len = p.reth->dma_length();
      const uint8_t* src =
          len == 0 ? nullptr
                   : remote_ptr(qp, p.reth->rkey(), p.reth->va(), len, sr::access::kRemoteRead);
      if (len == 0 || src != nullptr)
        queue_read_response(qp, p.reth->va(), p.reth->rkey(), len, psn);
    } else {
      send_ack(qp, syn::ack(), roce::psn_add(qp.epsn, roce::kPsnMask));
    }
    return;
  }
  if (d > 0) {
    // A gap: NAK once; the requester goes back to epsn. Later packets are dropped quietly.
    if (!qp.nak_sent) {
      send_ack(qp, syn::nak(syn::kNakPsnSequenceError), qp.epsn);
      ++counters_.seq_naks_sent;
      ++qp.counters.seq_naks_sent;
      qp.nak_sent = true;
    }
    return;
  }
  qp.nak_sent = false;

  // The opcode must continue the message in progress, or start a new one.
  const bool continues = op::is_middle(code) || op::is_last(code);
  const bool ok_seq = qp.in_progress == Incoming::kSend    ? (op::is_send(code) && continues)
                      : qp.in_progress == Incoming::kWrite ? (op::is_write(code) && continues)
                                                           : !continues;
  const bool ok_len =
      (op::is_first(code) || op::is_middle(code)) ? p.payload_len == mtu : p.payload_len <= mtu;
  if (!ok_seq || (op::has_payload(code) && !ok_len)) {
    responder_error(qp, qpn, syn::kNakInvalidRequest, psn, sr::WcStatus::kRemInvReqErr,
                    sr::EventType::kQpReqErr);
    return;
  }

  if (code == op::kRdmaReadRequest) {
    const uint32_t len = p.reth->dma_length();
    // No responder resources for READs, or longer than any message may be (2^31 bytes).
    if (qp.attrs.max_dest_rd_atomic == 0 || len > sr::kMaxMessageBytes) {
      responder_error(qp, qpn, syn::kNakInvalidRequest, psn, sr::WcStatus::kRemInvReqErr,
                      sr::EventType::kQpReqErr);
      return;
    }
    const uint8_t* src =
        len == 0 ? nullptr
                 : remote_ptr(qp, p.reth->rkey(), p.reth->va(), len, sr::access::kRemoteRead);
    if (len != 0 && src == nullptr) {
      responder_error(qp, qpn, syn::kNakRemoteAccessError, psn, sr::WcStatus::kRemAccessErr,
                      sr::EventType::kQpAccessErr);
      return;
    }
    qp.msn = (qp.msn + 1) & 0xffffff;
    qp.epsn = roce::psn_add(qp.epsn, roce::packets_for(len, mtu));
    queue_read_response(qp, p.reth->va(), p.reth->rkey(), len, psn);
    return;
  }

  // A receive WQE is needed before anything is placed: without one, RNR NAK and wait for
  // the retry (nothing of this packet is consumed).
  if (needs_recv_wqe(code) && (op::is_first(code) || op::is_only(code) || op::is_write(code))) {
    if (!take_recv_wqe(qp)) {
      send_ack(qp, syn::rnr_nak(qp.attrs.min_rnr_timer), psn);
      ++counters_.rnr_naks_sent;
      ++qp.counters.rnr_naks_sent;
      // The packets behind this one are dropped quietly: the requester goes back to it
      // after the RNR wait anyway, and a PSN-sequence NAK would cost it a transport retry.
      qp.nak_sent = true;
      return;
    }
    if (qp.rwqe.num_sge > sr::kMaxSge) {  // malformed receive WQE: a local QP operation error
      responder_error(qp, qpn, syn::kNakRemoteOperationalError, psn, sr::WcStatus::kLocQpOpErr,
                      sr::EventType::kQpFatal);
      return;
    }
    if (op::is_first(code) || op::is_only(code)) qp.rx_offset = 0;
  }

  if (op::is_send(code)) {
    uint64_t room = 0;
    for (uint32_t i = 0; i < qp.rwqe.num_sge; ++i) room += qp.rwqe.sge[i].length;
    if (uint64_t{qp.rx_offset} + p.payload_len > room) {
      responder_error(qp, qpn, syn::kNakInvalidRequest, psn, sr::WcStatus::kLocLenErr,
                      sr::EventType::kQpReqErr);
      return;
    }
    if (p.payload_len > 0 &&
        !scatter(qp, qp.rwqe.sge, qp.rwqe.num_sge, qp.rx_offset, p.payload, p.payload_len)) {
      responder_error(qp, qpn, syn::kNakRemoteOperationalError, psn, sr::WcStatus::kLocProtErr,
                      sr::EventType::kQpAccessErr);
      return;
    }
    qp.rx_offset += p.payload_len;
    if (op::is_last(code) || op::is_only(code)) {
      complete_recv(qp, qpn, sr::WcStatus::kSuccess, qp.rx_offset, op::has_immediate(code), p.imm,
                    false);
      qp.msn = (qp.msn + 1) & 0xffffff;
      qp.in_progress = Incoming::kNone;
    } else {
      qp.in_progress = Incoming::kSend;
    }
  } else {  // RDMA WRITE
    if (p.reth != nullptr) {
      qp.write_va = p.reth->va();
      qp.write_left = qp.write_total = p.reth->dma_length();
      qp.write_rkey = p.reth->rkey();
      // The whole target range is checked on the first packet, as the responder must.
      if (qp.write_left != 0 && remote_ptr(qp, qp.write_rkey, qp.write_va, qp.write_left,
                                           sr::access::kRemoteWrite) == nullptr) {
        responder_error(qp, qpn, syn::kNakRemoteAccessError, psn, sr::WcStatus::kRemAccessErr,
                        sr::EventType::kQpAccessErr);
        return;
      }
    }
    const bool ends = op::is_last(code) || op::is_only(code);
    if (p.payload_len > qp.write_left || (ends && p.payload_len != qp.write_left)) {
      responder_error(qp, qpn, syn::kNakInvalidRequest, psn, sr::WcStatus::kRemInvReqErr,
                      sr::EventType::kQpReqErr);
      return;
    }
    if (p.payload_len > 0) {
      uint8_t* dst =
          remote_ptr(qp, qp.write_rkey, qp.write_va, p.payload_len, sr::access::kRemoteWrite);
      if (dst == nullptr) {  // deregistered mid-message
        responder_error(qp, qpn, syn::kNakRemoteAccessError, psn, sr::WcStatus::kRemAccessErr,
                        sr::EventType::kQpAccessErr);
        return;
      }
      std::memcpy(dst, p.payload, p.payload_len);
      if (timing_) timing_->write(now_ps(), p.payload_len);  // the DMA write's share of the link
      qp.write_va += p.payload_len;
      qp.write_left -= p.payload_len;
    }
    if (ends) {
      if (op::has_immediate(code))
        complete_recv(qp, qpn, sr::WcStatus::kSuccess, qp.write_total, true, p.imm, true);
      qp.msn = (qp.msn + 1) & 0xffffff;
      qp.in_progress = Incoming::kNone;
    } else {
      qp.in_progress = Incoming::kWrite;
    }
  }
  qp.epsn = roce::psn_add(qp.epsn, 1);
  if (p.bth->ack_req()) send_ack(qp, syn::ack(), psn);
}

}  // namespace pollux::emu::rnic
