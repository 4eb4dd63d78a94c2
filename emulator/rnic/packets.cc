// Packet assembly and parsing (BTH, extension headers, pad, ICRC), host memory access
// through memory regions, and the device's work loop.
#include <isa-l/crc.h>

#include <algorithm>
#include <cstring>

#include "emulator/rnic/rnic.h"

namespace pollux::emu::rnic {

namespace roce = spec::roce;
namespace op = spec::roce::opcode;

namespace {
// The ICRC is CRC-32 (reflected polynomial 0xedb88320, Ethernet's and gzip's): isa-l's
// crc32_gzip_refl (PCLMULQDQ folding). It takes and returns the inverted register, so a running
// register c continues as ~crc32_gzip_refl(~c, ...).
uint32_t crc_run(uint32_t c, const uint8_t* p, std::size_t n) {
  return ~crc32_gzip_refl(~c, const_cast<unsigned char*>(p), n);
}
}  // namespace

// The ICRC covers the packet with the BTH's reserved/FECN/BECN byte taken as all ones: a
// switch may set congestion bits in flight without invalidating it.
uint32_t packet_icrc(const uint8_t* p, std::size_t len) {
  if (len <= 4) return ~crc_run(~0u, p, len);
  const uint8_t masked = 0xff;
  uint32_t c = crc_run(~0u, p, 4);
  c = crc_run(c, &masked, 1);
  return ~crc_run(c, p + 5, len - 5);
}

void Rnic::emit(const Qp& qp, uint8_t opcode, uint32_t psn, bool ack_req, bool solicited,
                const roce::Reth* reth, const roce::Aeth* aeth, const uint32_t* imm,
                const uint8_t* payload, uint32_t len, SimTime ready) {
  if (wire_ == nullptr) return;
  const uint8_t pad = static_cast<uint8_t>((4 - len % 4) % 4);
  roce::Bth bth{};
  bth.set_opcode(opcode);
  bth.set_flags(solicited, false, pad, 0);
  bth.set_pkey(roce::kDefaultPkey);
  bth.set_dest_qp(qp.attrs.dest_qpn);
  bth.set_ack_req(ack_req);
  bth.set_psn(psn);
  tx_buf_.clear();
  tx_buf_.insert(tx_buf_.end(), bth.b, bth.b + sizeof bth.b);
  if (reth != nullptr) tx_buf_.insert(tx_buf_.end(), reth->b, reth->b + sizeof reth->b);
  if (aeth != nullptr) tx_buf_.insert(tx_buf_.end(), aeth->b, aeth->b + sizeof aeth->b);
  if (imm != nullptr) {
    roce::ImmDt i{};
    i.set(*imm);
    tx_buf_.insert(tx_buf_.end(), i.b, i.b + sizeof i.b);
  }
  if (len > 0) tx_buf_.insert(tx_buf_.end(), payload, payload + len);
  tx_buf_.insert(tx_buf_.end(), pad, 0);
  uint8_t crc[4];
  roce::store_be32(crc, packet_icrc(tx_buf_.data(), tx_buf_.size()));
  tx_buf_.insert(tx_buf_.end(), crc, crc + 4);
  ++counters_.tx_packets;
  counters_.tx_bytes += tx_buf_.size();
  ++qp.counters.tx_packets;
  qp.counters.tx_bytes += tx_buf_.size();
  wire_->transmit_at(ready, port_address_, qp.attrs.dest_address, tx_buf_.data(),
                     tx_buf_.size());
}

bool Rnic::tx_room() const {
  return timing_ == nullptr || wire_ == nullptr ||
         wire_->queued(port_address_) < timing_->profile().nic.tx_window;
}

void Rnic::receive(uint64_t src_address, const uint8_t* packet, std::size_t len) {
  if (!(control_ & sr::control::kEnable)) return;  // a disabled port drops everything
  // Timed: the packet's last bit arrived at the wire's delivery time; the receive pipeline
  // hands it on later.
  const SimTime due =
      timing_ && wire_ != nullptr ? timing_->receive(wire_->delivery_time_ps()) : 0;
  rx_.push_back(RxPacket{src_address, std::vector<uint8_t>(packet, packet + len), due});
}

void Rnic::handle_packet(const RxPacket& rx) {
  const uint8_t* b = rx.bytes.data();
  const std::size_t n = rx.bytes.size();
  ++counters_.rx_packets;
  counters_.rx_bytes += n;
  if (n < sizeof(roce::Bth) + roce::kIcrcBytes) {
    ++counters_.dropped_packets;
    return;
  }
  if (packet_icrc(b, n - 4) != roce::load_be32(b + n - 4)) {
    ++counters_.icrc_errors;  // corrupted on the wire: dropped silently, as RoCE NICs do
    return;
  }
  Packet p;
  p.src = rx.src;
  p.bth = reinterpret_cast<const roce::Bth*>(b);
  const uint8_t code = p.bth->opcode();
  std::size_t hdr = sizeof(roce::Bth);
  if (op::transport(code) != op::kTransportRc || code > op::kAcknowledge || p.bth->tver() != 0) {
    ++counters_.dropped_packets;
    return;
  }
  if (op::has_reth(code)) {
    p.reth = reinterpret_cast<const roce::Reth*>(b + hdr);
    hdr += sizeof(roce::Reth);
  }
  if (op::has_aeth(code)) {
    p.aeth = reinterpret_cast<const roce::Aeth*>(b + hdr);
    hdr += sizeof(roce::Aeth);
  }
  if (op::has_immediate(code)) {
    if (hdr + 4 > n) {
      ++counters_.dropped_packets;
      return;
    }
    p.imm = roce::load_be32(b + hdr);
    hdr += 4;
  }
  const std::size_t tail = roce::kIcrcBytes + p.bth->pad_count();
  if (hdr + tail > n || (!op::has_payload(code) && hdr + tail != n)) {
    ++counters_.dropped_packets;
    return;
  }
  p.payload = b + hdr;
  p.payload_len = static_cast<uint32_t>(n - hdr - tail);

  const uint32_t qpn = p.bth->dest_qp();
  if (qpn >= qps_.size() || !qps_[qpn].valid) {
    ++counters_.dropped_packets;
    return;
  }
  Qp& qp = qps_[qpn];
  // An RC QP talks to its one peer, and only once it is ready to receive.
  const bool ready = qp.state == sr::QpState::kRtr || qp.state == sr::QpState::kRts;
  if (!ready || rx.src != qp.attrs.dest_address) {
    ++counters_.dropped_packets;
    return;
  }
  ++qp.counters.rx_packets;
  qp.counters.rx_bytes += n;
  if (op::is_request(code)) {
    handle_request(qp, qpn, p);
  } else {
    handle_response(qp, qpn, p);
  }
}

Mr* Rnic::find_mr(uint32_t key) {
  const uint32_t index = key >> 8;
  if (index == 0 || index >= mrs_.size()) return nullptr;
  Mr& mr = mrs_[index];
  return mr.valid && mr.tag == (key & 0xff) ? &mr : nullptr;
}

uint8_t* Rnic::local_ptr(const Qp& qp, uint32_t lkey, uint64_t addr, uint32_t len,
                         uint32_t access) {
  const Mr* mr = find_mr(lkey);
  if (mr == nullptr || mr->pdn != qp.pdn || (mr->access & access) != access ||
      !mr->contains(addr, len))
    return nullptr;
  uint8_t* p = mem_.translate(mr->iova + (addr - mr->va), len);
  if (p == nullptr) ++counters_.dma_faults;
  return p;
}

bool Rnic::gather(const Qp& qp, const sr::Sge* sge, uint32_t nsge, uint32_t offset, uint8_t* buf,
                  uint32_t n) {
  for (uint32_t i = 0; i < nsge && n > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const uint32_t chunk = std::min(n, sge[i].length - offset);
    const uint8_t* src = local_ptr(qp, sge[i].lkey, sge[i].addr + offset, chunk, 0);
    if (src == nullptr) return false;
    std::memcpy(buf, src, chunk);
    buf += chunk;
    n -= chunk;
    offset = 0;
  }
  return n == 0;
}

bool Rnic::scatter(const Qp& qp, const sr::Sge* sge, uint32_t nsge, uint32_t offset,
                   const uint8_t* buf, uint32_t n) {
  for (uint32_t i = 0; i < nsge && n > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const uint32_t chunk = std::min(n, sge[i].length - offset);
    uint8_t* dst = local_ptr(qp, sge[i].lkey, sge[i].addr + offset, chunk, sr::access::kLocalWrite);
    if (dst == nullptr) return false;
    std::memcpy(dst, buf, chunk);
    if (timing_) timing_->write(now_ps(), chunk);  // the DMA write's share of the link
    buf += chunk;
    n -= chunk;
    offset = 0;
  }
  return n == 0;
}

bool Rnic::process(uint64_t now_ns, uint64_t stores_at_ns) {
  now_ = std::max(now_, now_ns);
  stores_at_ = stores_at_ns;
  if (!(control_ & sr::control::kEnable)) return false;
  bool did = false;
  while (!rx_.empty() && rx_.front().due <= now_ps()) {
    const RxPacket rx = std::move(rx_.front());
    rx_.pop_front();
    handle_packet(rx);
    did = true;
  }
  while (!completions_.empty() && completions_.front().due <= now_ps()) {
    const PendingCompletion c = completions_.front();
    completions_.pop_front();
    post_completion(c.qpn, c.cqn, c.cqe);
    did = true;
  }
  // Timed, the QPs take turns to go first: the transmit window is shared. (Indexing, not
  // iterators: a QP's error path never creates or destroys QPs, but stay safe.)
  const std::size_t nqp = live_qps_.size();
  const std::size_t first = timing_ && nqp > 0 ? rr_next_++ % nqp : 0;
  for (std::size_t k = 0; k < nqp && k < live_qps_.size(); ++k) {
    const uint32_t qpn = live_qps_[(first + k) % live_qps_.size()];
    Qp& qp = qps_[qpn];
    if (!qp.valid) continue;
    if (qp.state == sr::QpState::kErr) {
      // Work posted to a QP in Error completes at once with flush errors.
      const bool posted =
          doorbell(sr::reg::sq_doorbell(qpn)) != qp.sq_fetched ||
          (qp.srqn == sr::kNone && doorbell(sr::reg::rq_doorbell(qpn)) != qp.rq_consumed);
      if (posted) {
        flush_queues(qp, qpn);
        did = true;
      }
      continue;
    }
    if (!qp.responses.empty()) did |= send_responses(qp);
    if (qp.state != sr::QpState::kRts) continue;
    check_timers(qp, qpn);
    did |= fetch_send_wqes(qp, qpn);
    did |= transmit(qp, qpn);
  }
  return did;
}

uint64_t Rnic::next_timer_ns() const {
  uint64_t t = UINT64_MAX;
  for (uint32_t qpn : live_qps_) {
    const Qp& qp = qps_[qpn];
    if (qp.state != sr::QpState::kRts) continue;
    if (qp.ack_deadline != 0) t = std::min(t, qp.ack_deadline);
    if (qp.rnr_deadline != 0) t = std::min(t, qp.rnr_deadline);
  }
  auto ns = [](SimTime ps) { return (ps + timing::kNs - 1) / timing::kNs; };
  if (timing_ && !rx_.empty()) t = std::min(t, ns(rx_.front().due));
  if (!completions_.empty()) t = std::min(t, ns(completions_.front().due));
  return t;
}

}  // namespace pollux::emu::rnic
