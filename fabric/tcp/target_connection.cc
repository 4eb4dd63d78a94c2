#include "fabric/tcp/target_connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabric/target/poll_group.h"
#include "fabric/tcp/target_transport.h"
#include "isa-l/crc.h"
#include "spec/nvme_fabrics.h"

namespace pollux::fabric::tcp {

namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;
namespace sn = spec::nvme;

namespace {

uint32_t crc_update(uint32_t raw, const void* p, std::size_t n) {
  return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(p)), static_cast<int>(n), raw);
}
constexpr uint32_t kCrcSeed = ~0u;
constexpr uint32_t kRxBytes = 64 * 1024;
constexpr uint32_t kDirectRead =
    4096;  // data this large goes from the socket straight to its buffer
// Offset of SGL1's fields in a CapsuleCmd PDU (FEI of a C2HTermReq).
constexpr uint32_t kSglAddressFei =
    offsetof(nt::CapsuleCmd, sqe) + offsetof(sn::SubmissionEntry, dptr);
constexpr uint32_t kSglIdFei = kSglAddressFei + offsetof(sn::SglDescriptor, id);

bool carries_digest(uint8_t type) {
  return type == nt::pdu::kCapsuleCmd || type == nt::pdu::kH2cData;
}

}  // namespace

TcpConnection::TcpConnection(TcpTargetGroup& group, std::unique_ptr<net::Socket> socket,
                             target::ListenAddress listen)
    : Qpair(group.group(), group.transport()),
      tg_(group),
      transport_(group.transport()),
      sock_(std::move(socket)),
      listen_(std::move(listen)),
      peer_(sock_->peer()) {
  rx_.resize(kRxBytes);
  boot_icd_.resize(nt::kAdminInCapsuleDataSize);
  boot_.index = kBootIndex;
  boot_.icd = boot_icd_.data();
  boot_.qpair = this;
  items_.resize(64);
}

TcpConnection::~TcpConnection() = default;

// ---------------------------------------------------------------------- sizing ---

bool TcpConnection::prepare(uint16_t qid, uint32_t entries) {
  if (entries == 0 || entries >= kBootIndex) return false;
  for (const TcpRequest& r : reqs_)
    if (r.state != TcpRequest::State::kFree) return false;  // a second Connect with I/O out
  const TcpTargetOptions& o = transport_.options();
  icd_size_ = qid == 0 ? std::max(o.in_capsule_data_size, nt::kAdminInCapsuleDataSize)
                       : o.in_capsule_data_size;
  const std::size_t stride = (icd_size_ + 63) / 64 * 64;
  icd_region_.reset();
  if (stride != 0) {
    env::DmaOptions dopt;
    dopt.allow_hugepages = false;  // a few hundred KiB per queue: 4 KiB pages
    auto region = env::DmaRegion::create(transport_.registry(), stride * entries, dopt);
    if (!region) {
      fmt::print(stderr, "nvmf/tcp {}: in-capsule buffers: {}\n", peer_, region.error().message);
      return false;
    }
    icd_region_ = std::move(region).value();
  }
  reqs_.assign(entries, TcpRequest{});
  free_.clear();
  for (uint32_t i = 0; i < entries; ++i) {
    TcpRequest& r = reqs_[i];
    r.index = static_cast<uint16_t>(i);
    r.qpair = this;
    r.icd = icd_region_ ? static_cast<uint8_t*>(icd_region_->data()) + stride * i : nullptr;
    free_.push_back(static_cast<uint16_t>(entries - 1 - i));
  }
  // Room for every request's PDUs at once (C2HData header, data, digest, CapsuleResp; or its
  // R2Ts), plus the connection's own.
  std::vector<Item> ring(std::size_t{entries} * 6 + 16);
  for (uint32_t i = 0; i < item_count_; ++i) ring[i] = items_[(item_head_ + i) % items_.size()];
  items_ = std::move(ring);
  item_head_ = 0;
  return true;
}

namespace {
constexpr uint64_t kTermLingerMs = 2000;  // for the host to read a C2HTermReq and close
}  // namespace

bool TcpConnection::lingering() const {
  return terminating_ && !socket_dead_ &&
         transport_.target().framework().clock().now() < linger_until_;
}

// After the C2HTermReq: FIN once it is all sent, then read and drop until the host closes.
void TcpConnection::drain_after_term() {
  if (socket_dead_) return;
  if (item_count_ == 0 && !write_shut_) {
    sock_->shutdown_write();
    write_shut_ = true;
  }
  uint8_t sink[4096];
  for (;;) {
    const ssize_t n = sock_->recv(sink, sizeof sink);
    if (n > 0) continue;
    if (n == net::kAgain) return;
    // The host closed (or reset): nothing more to say. What it never read (a response queued
    // ahead of the C2HTermReq, its window full) is dropped, and its requests freed with it —
    // else they would hold the connection, and its controller, for ever.
    begin_close(true);
    return;
  }
}

// ---------------------------------------------------------------------- requests ---

TcpRequest* TcpConnection::take_request() {
  TcpRequest* r = nullptr;
  if (state != State::kActive) {
    if (boot_.state == TcpRequest::State::kFree) r = &boot_;
  } else if (!free_.empty()) {
    r = &reqs_[free_.back()];
    free_.pop_back();
  }
  if (r == nullptr) return nullptr;
  ++in_core_;
  r->transport_error = false;
  r->pool_buffer = false;
  r->data = nullptr;
  r->length = 0;
  r->h2c_received = r->r2t_next = r->r2t_active = 0;
  for (auto& s : r->r2t) s = TcpRequest::R2tRange{};
  return r;
}

TcpRequest* TcpConnection::request_at(uint16_t index) {
  if (index == kBootIndex) return &boot_;
  return index < reqs_.size() ? &reqs_[index] : nullptr;
}

void TcpConnection::release(TcpRequest& r) {
  if (r.state == TcpRequest::State::kFree) return;
  if (r.pool_buffer) tg_.put_buffer(r.data);
  r.pool_buffer = false;
  r.state = TcpRequest::State::kFree;
  if (&r != &boot_) free_.push_back(r.index);
  --in_core_;
}

void TcpConnection::need_data_buffer(TcpRequest& r) {
  const uint32_t small = &r == &boot_ ? static_cast<uint32_t>(boot_icd_.size()) : icd_size_;
  if (r.length <= small) {
    r.data = r.icd;  // small enough for its own in-capsule buffer
  } else {
    void* b = tg_.get_buffer();
    if (b == nullptr) {
      r.state = TcpRequest::State::kNeedBuffer;
      ++stats_.buffer_waits;
      tg_.wait_for_buffer(r, *this);
      return;
    }
    r.data = b;
    r.pool_buffer = true;
  }
  if (r.xfer == target::Xfer::kHostToController) return start_h2c(r);
  to_core(r);
}

void TcpConnection::buffer_ready(TcpRequest& r, void* buf) {
  r.data = buf;
  r.pool_buffer = true;
  if (r.xfer == target::Xfer::kHostToController) return start_h2c(r);
  to_core(r);
}

void TcpConnection::start_h2c(TcpRequest& r) {
  r.state = TcpRequest::State::kH2c;
  send_r2ts(r);
}

// R2Ts of at most MAXH2CDATA each, as many outstanding as the host's MAXR2T allows.
void TcpConnection::send_r2ts(TcpRequest& r) {
  const uint32_t chunk = transport_.options().max_h2c_data_size;
  while (r.r2t_active < maxr2t_ && r.r2t_next < r.length) {
    uint32_t k = 0;
    while (r.r2t[k].active) ++k;
    const uint32_t len = std::min(chunk, r.length - r.r2t_next);
    r.r2t[k] = TcpRequest::R2tRange{r.r2t_next, r.r2t_next + len, true};
    nt::R2t h{};
    h.ch.type = nt::pdu::kR2t;
    h.ch.flags = hd_ ? nt::flags::kHdgst : 0;
    h.ch.hlen = nt::kR2tHlen;
    h.ch.plen = nt::kR2tHlen + (hd_ ? nt::kDigestSize : 0);
    h.cccid = r.cmd.cid;
    h.ttag = static_cast<uint16_t>(r.index * TcpRequest::kMaxR2t + k);
    h.r2to = r.r2t_next;
    h.r2tl = len;
    uint8_t* out = r.r2t_hdr[k];
    std::memcpy(out, &h, sizeof h);
    if (hd_) {
      const uint32_t d = ~crc_update(kCrcSeed, out, nt::kR2tHlen);
      std::memcpy(out + nt::kR2tHlen, &d, 4);
    }
    push(out, h.ch.plen);
    urgent_ = true;  // the host waits for it
    ++stats_.pdus_out;
    r.r2t_next += len;
    ++r.r2t_active;
  }
}

void TcpConnection::to_core(TcpRequest& r) {
  r.state = TcpRequest::State::kCore;
  if (r.transport_error) {
    // A data digest failed: the command does not run (its data is not what the host sent).
    r.rsp = sn::CompletionEntry{};
    r.rsp.cid = r.cmd.cid;
    r.rsp.sqid = qid;
    sq_head = static_cast<uint16_t>(entries ? (sq_head + 1) % entries : sq_head + 1);
    r.rsp.sqhd = sq_flow_control ? sq_head : nf::connect::kSqhdFlowControlDisabled;
    r.rsp.status = sn::status::make(sn::sct::kGeneric, sn::sc::kTransientTransportError);
    r.length = 0;
    return complete(r);
  }
  target::execute(r);
}

// ---------------------------------------------------------------------- completions ---

void TcpConnection::complete(target::Request& base) {
  auto& r = static_cast<TcpRequest&>(base);
  if (closing_) return release(r);  // nobody to tell
  r.state = TcpRequest::State::kSending;
  const bool data = r.xfer == target::Xfer::kControllerToHost && r.rsp.status == 0 && r.length > 0;
  if (data) {
    const bool success = transport_.options().c2h_success && !sq_flow_control;
    queue_c2h(r, success);
    if (success) return;
  }
  queue_resp(r);
}

void TcpConnection::queue_c2h(TcpRequest& r, bool success) {
  nt::C2hData h{};
  h.ch.type = nt::pdu::kC2hData;
  h.ch.flags = static_cast<uint8_t>((hd_ ? nt::flags::kHdgst : 0) | (dd_ ? nt::flags::kDdgst : 0) |
                                    nt::flags::kLastPdu | (success ? nt::flags::kSuccess : 0));
  h.ch.hlen = nt::kDataHlen;
  const uint32_t pdo = nt::data_offset(nt::kDataHlen, hd_, hpda_);
  h.ch.pdo = static_cast<uint8_t>(pdo);
  h.ch.plen = nt::pdu_length(nt::kDataHlen, hd_, pdo, r.length, dd_);
  h.cccid = r.cmd.cid;
  h.datao = 0;
  h.datal = r.length;
  uint8_t* out = r.c2h_hdr;
  std::memcpy(out, &h, sizeof h);
  uint32_t at = nt::kDataHlen;
  if (hd_) {
    const uint32_t d = ~crc_update(kCrcSeed, out, nt::kDataHlen);
    std::memcpy(out + at, &d, 4);
    at += 4;
  }
  std::memset(out + at, 0, pdo - at);
  const int rel = success ? r.index : -1;
  push(out, pdo);
  push(r.data, r.length, dd_ ? -1 : rel);
  if (dd_) {
    r.ddgst = ~crc_update(kCrcSeed, r.data, r.length);
    push(&r.ddgst, 4, rel);
  }
  ++stats_.pdus_out;
}

void TcpConnection::queue_resp(TcpRequest& r) {
  nt::CapsuleResp p{};
  p.ch.type = nt::pdu::kCapsuleResp;
  p.ch.flags = hd_ ? nt::flags::kHdgst : 0;
  p.ch.hlen = nt::kCapsuleRespHlen;
  p.ch.plen = nt::kCapsuleRespHlen + (hd_ ? nt::kDigestSize : 0);
  p.cqe = r.rsp;
  std::memcpy(r.resp_hdr, &p, sizeof p);
  if (hd_) {
    const uint32_t d = ~crc_update(kCrcSeed, r.resp_hdr, nt::kCapsuleRespHlen);
    std::memcpy(r.resp_hdr + nt::kCapsuleRespHlen, &d, 4);
  }
  push(r.resp_hdr, p.ch.plen, r.index);
  ++stats_.pdus_out;
}

// ---------------------------------------------------------------------- send ---

void TcpConnection::push(const void* base, std::size_t len, int release_index) {
  if (item_count_ == items_.size()) {  // never on a sized queue; grows rather than loses
    std::vector<Item> ring(items_.size() * 2);
    for (uint32_t i = 0; i < item_count_; ++i) ring[i] = items_[(item_head_ + i) % items_.size()];
    items_ = std::move(ring);
    item_head_ = 0;
  }
  items_[(item_head_ + item_count_) % items_.size()] =
      Item{iovec{const_cast<void*>(base), len}, release_index};
  ++item_count_;
  queued_bytes_ += len;
}

bool TcpConnection::flush() {
  // A big batch (the host keeps its queue full) may leave its last partial segment for the
  // next batch to fill: the kernel holds it until a plain send or push().
  const bool more = queued_bytes_ >= kCorkBytes && !urgent_ && !closing_;
  bool moved = false;
  while (item_count_ > 0 && !socket_dead_) {
    constexpr uint32_t kBatch = 256;  // iovecs per sendmsg (IOV_MAX is 1024)
    const uint32_t n = std::min<uint32_t>(
        {item_count_, static_cast<uint32_t>(items_.size()) - item_head_, kBatch});
    iovec v[kBatch];
    for (uint32_t i = 0; i < n; ++i) v[i] = items_[item_head_ + i].v;
    const ssize_t sent =
        more ? sock_->send_more(v, static_cast<int>(n)) : sock_->send(v, static_cast<int>(n));
    if (sent <= 0) {  // full (kAgain), or broken
      if (sent == net::kAgain && (!closing_ || lingering())) return moved;
      begin_close(true);  // a closing connection waits for nobody: what is left is dropped
      return true;
    }
    moved = true;
    corked_ = more;
    if (more) {
      corked_this_poll_ = true;
      ++stats_.corked_sends;
      ++tg_.mutable_stats().corked_sends;
    }
    std::size_t left = static_cast<std::size_t>(sent);
    queued_bytes_ -= left;
    while (left > 0 && item_count_ > 0) {
      Item& it = items_[item_head_];
      if (left < it.v.iov_len) {  // the socket is full: the rest goes next time
        it.v.iov_base = static_cast<uint8_t*>(it.v.iov_base) + left;
        it.v.iov_len -= left;
        return true;
      }
      left -= it.v.iov_len;
      const int rel = it.release;
      item_head_ = item_head_ + 1 == items_.size() ? 0 : item_head_ + 1;
      --item_count_;
      if (rel >= 0) {
        if (TcpRequest* r = request_at(static_cast<uint16_t>(rel))) release(*r);
      }
    }
  }
  if (item_count_ == 0) urgent_ = false;
  if (terminating_ && item_count_ == 0) drain_after_term();  // the C2HTermReq is out: FIN
  return moved;
}

void TcpConnection::end_poll() {
  if (corked_ && !corked_this_poll_ && !socket_dead_) {
    sock_->push();
    corked_ = false;
    ++stats_.pushes;
    ++tg_.mutable_stats().pushes;
  }
  corked_this_poll_ = false;
}

// ---------------------------------------------------------------------- receive ---

void TcpConnection::on_readable() {
  if (terminating_) return drain_after_term();
  if (closing_) return;
  for (int round = 0; round < 8; ++round) {
    if (!parse()) return;
    ssize_t got;
    uint32_t direct = 0;
    std::size_t asked = rx_.size();
    if (stage_ == Rx::kData && data_left_ >= kDirectRead) {
      iovec v[2] = {{data_dst_, data_left_}, {rx_.data(), rx_.size()}};
      asked += data_left_;
      got = sock_->recv(v, 2);
      if (got > 0) {
        direct = static_cast<uint32_t>(std::min<ssize_t>(got, data_left_));
        if (dd_) data_crc_ = crc_update(data_crc_, data_dst_, direct);
        data_dst_ += direct;
        data_left_ -= direct;
      }
    } else {
      got = sock_->recv(rx_.data(), rx_.size());
    }
    if (got == net::kAgain) return;
    if (got < 0) return begin_close(true);  // the host closed the connection, or it broke
    rx_pos_ = 0;
    rx_end_ = static_cast<uint32_t>(got) - direct;
    if (direct != 0 && data_left_ == 0) {
      if (dd_) {
        stage_ = Rx::kDigest;
        digest_have_ = 0;
      } else {
        on_pdu_end();
      }
    }
    // Less than asked for: the socket is empty for now. Parse and stop, rather than pay a
    // recv that would say EAGAIN (epoll tells when more comes).
    if (static_cast<std::size_t>(got) < asked) {
      parse();
      return;
    }
  }
}

bool TcpConnection::parse() {
  while (rx_pos_ < rx_end_) {
    if (closing_) return false;
    const uint32_t avail = rx_end_ - rx_pos_;
    const uint8_t* p = rx_.data() + rx_pos_;
    switch (stage_) {
      case Rx::kHeader: {
        const uint32_t take = std::min(avail, hdr_need_ - hdr_have_);
        std::memcpy(hdr_ + hdr_have_, p, take);
        hdr_have_ += take;
        rx_pos_ += take;
        if (hdr_have_ == nt::kCommonHeaderLength && hdr_need_ == nt::kCommonHeaderLength) {
          if (!on_common_header()) return false;
        }
        if (hdr_have_ == hdr_need_ && hdr_need_ > nt::kCommonHeaderLength) {
          if (!on_header()) return false;
        }
        break;
      }
      case Rx::kPad: {
        const uint32_t take = std::min(avail, pad_left_);
        rx_pos_ += take;
        pad_left_ -= take;
        if (pad_left_ == 0) stage_ = Rx::kData;
        break;
      }
      case Rx::kData: {
        const uint32_t take = std::min(avail, data_left_);
        data_in(p, take);
        rx_pos_ += take;
        if (data_left_ == 0) {
          if (dd_ && pdu_type_ != nt::pdu::kH2cTermReq) {
            stage_ = Rx::kDigest;
            digest_have_ = 0;
          } else {
            on_pdu_end();
          }
        }
        break;
      }
      case Rx::kDigest: {
        const uint32_t take = std::min(avail, 4 - digest_have_);
        std::memcpy(digest_ + digest_have_, p, take);
        digest_have_ += take;
        rx_pos_ += take;
        if (digest_have_ == 4) on_pdu_end();
        break;
      }
    }
  }
  return !closing_;
}

void TcpConnection::data_in(const uint8_t* p, uint32_t n) {
  if (data_dst_ != nullptr) {
    std::memcpy(data_dst_, p, n);
    if (dd_) data_crc_ = crc_update(data_crc_, p, n);
    data_dst_ += n;
  }
  data_left_ -= n;
}

// The common header is in: the PDU's type, lengths and flags must make sense here and now.
bool TcpConnection::on_common_header() {
  nt::CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof ch);
  const bool icreq = ch.type == nt::pdu::kIcReq;
  if ((conn_ == Conn::kAwaitIcReq) != icreq) return fatal(nt::fes::kPduSequenceError, 0);
  switch (ch.type) {
    case nt::pdu::kIcReq:
    case nt::pdu::kCapsuleCmd:
    case nt::pdu::kH2cData:
    case nt::pdu::kH2cTermReq:
      break;
    default:  // undefined, or one only a controller sends
      return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, type));
  }
  if (ch.hlen != nt::hlen_of(ch.type))
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, hlen));
  const bool hd = hd_ && carries_digest(ch.type);
  if (carries_digest(ch.type) && bool(ch.flags & nt::flags::kHdgst) != hd_)
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags));
  const uint32_t header_bytes = ch.hlen + (hd ? nt::kDigestSize : 0);
  const auto bad_plen = [&] {
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen));
  };
  switch (ch.type) {
    case nt::pdu::kIcReq:
      if (ch.plen != nt::kIcReqHlen) return bad_plen();
      break;
    case nt::pdu::kH2cTermReq:
      if (ch.plen < nt::kTermReqHlen || ch.plen > nt::kTermReqMaxPlen) return bad_plen();
      break;
    default: {
      if (ch.plen < header_bytes) return bad_plen();
      const bool has_data = ch.plen > header_bytes;
      if (ch.type == nt::pdu::kH2cData && !has_data) return bad_plen();
      if (!has_data) break;
      const uint32_t align = nt::pda_alignment(0);  // our CPDA
      if (ch.pdo < header_bytes || ch.pdo > ch.plen || ch.pdo % align != 0)
        return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, pdo));
      if (bool(ch.flags & nt::flags::kDdgst) != dd_)
        return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags));
      if (ch.plen - ch.pdo <= (dd_ ? nt::kDigestSize : 0u)) return bad_plen();
      const uint32_t data = ch.plen - ch.pdo - (dd_ ? nt::kDigestSize : 0);
      const uint32_t limit = state == State::kActive ? icd_size_ : nt::kAdminInCapsuleDataSize;
      if (ch.type == nt::pdu::kCapsuleCmd && data > limit)
        return fatal(nt::fes::kDataTransferLimitExceeded, 0);
      break;
    }
  }
  hdr_need_ = header_bytes;
  return true;
}

// The whole header (and its digest) is in.
bool TcpConnection::on_header() {
  nt::CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof ch);
  ++stats_.pdus_in;
  if (hd_ && carries_digest(ch.type)) {
    uint32_t got;
    std::memcpy(&got, hdr_ + ch.hlen, 4);
    if (got != ~crc_update(kCrcSeed, hdr_, ch.hlen)) return fatal(nt::fes::kHeaderDigestError, 0);
  }
  pdu_type_ = ch.type;
  pdu_flags_ = ch.flags;
  switch (ch.type) {
    case nt::pdu::kIcReq:
      return on_icreq();
    case nt::pdu::kCapsuleCmd:
      return on_capsule();
    case nt::pdu::kH2cData:
      return on_h2c_data();
    default: {  // H2CTermReq: the host ends the connection
      nt::TermReq t;
      std::memcpy(&t, hdr_, sizeof t);
      fmt::print(stderr,
                 "nvmf/tcp {}: the host terminated the connection (H2CTermReq FES {:#x}, FEI {})\n",
                 peer_, uint16_t{t.fes}, uint32_t{t.fei});
      begin_close(false);
      return false;
    }
  }
}

bool TcpConnection::on_icreq() {
  nt::IcReq req;
  std::memcpy(&req, hdr_, sizeof req);
  if (req.pfv != nt::kPfv10) return fatal(nt::fes::kUnsupportedParameter, offsetof(nt::IcReq, pfv));
  if (req.hpda > nt::kMaxPda)
    return fatal(nt::fes::kUnsupportedParameter, offsetof(nt::IcReq, hpda));
  hd_ = req.dgst & nt::dgst::kHdgstEnable;
  dd_ = req.dgst & nt::dgst::kDdgstEnable;
  hpda_ = req.hpda;
  maxr2t_ =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{req.maxr2t} + 1, TcpRequest::kMaxR2t));
  nt::IcResp resp{};
  resp.ch.type = nt::pdu::kIcResp;
  resp.ch.hlen = nt::kIcRespHlen;
  resp.ch.plen = nt::kIcRespHlen;
  resp.pfv = nt::kPfv10;
  resp.cpda = 0;
  resp.dgst =
      static_cast<uint8_t>((hd_ ? nt::dgst::kHdgstEnable : 0) | (dd_ ? nt::dgst::kDdgstEnable : 0));
  resp.maxh2cdata = transport_.options().max_h2c_data_size;
  std::memcpy(icresp_, &resp, sizeof resp);
  push(icresp_, sizeof resp);
  urgent_ = true;
  ++stats_.pdus_out;
  conn_ = Conn::kRunning;
  hdr_have_ = 0;
  hdr_need_ = nt::kCommonHeaderLength;
  return true;
}

bool TcpConnection::on_capsule() {
  nt::CapsuleCmd pdu;
  std::memcpy(&pdu, hdr_, sizeof pdu);
  const uint32_t header_bytes = nt::kCapsuleCmdHlen + (hd_ ? nt::kDigestSize : 0);
  const bool has_data = pdu.ch.plen > header_bytes;
  const uint32_t data_len = has_data ? pdu.ch.plen - pdu.ch.pdo - (dd_ ? nt::kDigestSize : 0) : 0;
  const sn::SglDescriptor& sgl = pdu.sqe.dptr.sgl1;
  const target::Xfer xfer = target::xfer_of(pdu.sqe);
  if (has_data) {
    if (sgl.id != nf::sgl::kIdInCapsule) return fatal(nt::fes::kUnsupportedParameter, kSglIdFei);
    if (sgl.address != 0) return fatal(nt::fes::kUnsupportedParameter, kSglAddressFei);
    if (sgl.length != data_len)
      return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen));
  } else if (xfer != target::Xfer::kNone && sgl.length != 0) {
    if (sgl.id == nf::sgl::kIdInCapsule)  // says in-capsule, carries none
      return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen));
    if (sgl.id != nf::sgl::kIdTransport) return fatal(nt::fes::kUnsupportedParameter, kSglIdFei);
    if (sgl.length > transport_.options().max_io_size)
      return fatal(nt::fes::kDataTransferLimitExceeded, 0);
  }
  TcpRequest* r = take_request();
  if (r == nullptr) {
    // One request per SQ entry, and an entry is held until its command completes: the host
    // sent more commands than its queue has (or one before its Connect completed). Waiting
    // for a request would leave what follows unread — H2CData that would free one, or the
    // host's close — so this ends the connection, as Linux's nvmet does.
    fmt::print(stderr, "nvmf/tcp {}: a command beyond the queue's {} entries\n", peer_,
               state == State::kActive ? entries : 1u);
    return fatal(nt::fes::kPduSequenceError, 0);
  }
  hdr_have_ = 0;
  hdr_need_ = nt::kCommonHeaderLength;
  r->cmd = pdu.sqe;
  r->xfer = xfer;
  if (has_data) {
    r->state = TcpRequest::State::kCapsuleData;
    r->data = r->icd;
    r->length = data_len;
    data_req_ = r;
    data_dst_ = r->icd;
    data_left_ = data_len;
    data_crc_ = kCrcSeed;
    pad_left_ = pdu.ch.pdo - header_bytes;
    stage_ = pad_left_ ? Rx::kPad : Rx::kData;
    return true;
  }
  stage_ = Rx::kHeader;
  if (xfer == target::Xfer::kNone || sgl.length == 0) {
    to_core(*r);
    return !closing_;
  }
  r->length = sgl.length;
  need_data_buffer(*r);
  return !closing_;
}

bool TcpConnection::on_h2c_data() {
  nt::H2cData h;
  std::memcpy(&h, hdr_, sizeof h);
  const uint32_t header_bytes = nt::kDataHlen + (hd_ ? nt::kDigestSize : 0);
  TcpRequest* r = request_at(static_cast<uint16_t>(h.ttag / TcpRequest::kMaxR2t));
  const uint32_t k = h.ttag % TcpRequest::kMaxR2t;
  if (r == nullptr || r->state != TcpRequest::State::kH2c || !r->r2t[k].active)
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::H2cData, ttag));
  if (h.cccid != r->cmd.cid)
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::H2cData, cccid));
  if (h.datal > transport_.options().max_h2c_data_size)
    return fatal(nt::fes::kDataTransferLimitExceeded, 0);
  TcpRequest::R2tRange& range = r->r2t[k];
  if (h.datal == 0 || h.datao != range.next || h.datao + h.datal > range.end)
    return fatal(nt::fes::kDataTransferOutOfRange, 0);
  if (h.ch.plen - h.ch.pdo - (dd_ ? nt::kDigestSize : 0) != h.datal)
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen));
  if (bool(h.ch.flags & nt::flags::kLastPdu) != (h.datao + h.datal == range.end))
    return fatal(nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags));
  hdr_have_ = 0;
  hdr_need_ = nt::kCommonHeaderLength;
  data_req_ = r;
  data_dst_ = static_cast<uint8_t*>(r->data) + h.datao;
  data_left_ = h.datal;
  data_crc_ = kCrcSeed;
  h2c_slot_ = k;
  h2c_len_ = h.datal;
  pad_left_ = h.ch.pdo - header_bytes;
  stage_ = pad_left_ ? Rx::kPad : Rx::kData;
  return true;
}

// A PDU's data (and digest) is in.
void TcpConnection::on_pdu_end() {
  stage_ = Rx::kHeader;
  TcpRequest* r = data_req_;
  data_req_ = nullptr;
  data_dst_ = nullptr;
  if (r == nullptr) return;
  if (dd_) {
    uint32_t got;
    std::memcpy(&got, digest_, 4);
    if (got != ~data_crc_) {
      ++stats_.digest_errors;
      r->transport_error = true;  // not fatal: the command ends with Transient Transport Error
    }
  }
  if (pdu_type_ == nt::pdu::kCapsuleCmd) return to_core(*r);
  TcpRequest::R2tRange& range = r->r2t[h2c_slot_];
  range.next += h2c_len_;
  r->h2c_received += h2c_len_;
  if (range.next == range.end) {
    range.active = false;
    --r->r2t_active;
  }
  if (r->h2c_received == r->length) return to_core(*r);
  send_r2ts(*r);
}

// ---------------------------------------------------------------------- errors, end ---

bool TcpConnection::fatal(uint16_t fes, uint32_t fei) {
  if (closing_) return false;
  nt::TermReq t{};
  t.ch.type = nt::pdu::kC2hTermReq;
  t.ch.hlen = nt::kTermReqHlen;
  const uint32_t copy = std::min<uint32_t>(hdr_have_, nt::kTermReqMaxDataLength);
  t.ch.plen = nt::kTermReqHlen + copy;
  t.fes = fes;
  t.fei = fei;
  std::memcpy(termreq_, &t, sizeof t);
  std::memcpy(termreq_ + sizeof t, hdr_, copy);
  push(termreq_, t.ch.plen);
  urgent_ = true;
  ++stats_.term_reqs_sent;
  fmt::print(stderr, "nvmf/tcp {}: protocol error: C2HTermReq FES {:#x} FEI {}\n", peer_, fes, fei);
  terminating_ = true;
  const env::Clock& clock = transport_.target().framework().clock();
  linger_until_ = clock.now() + clock.us_to_ticks(kTermLingerMs * 1000);
  begin_close(false);
  return false;
}

void TcpConnection::disconnect() {
  begin_close(false);
}

void TcpConnection::begin_close(bool socket_dead) {
  if (socket_dead) socket_dead_ = true;
  if (!closing_) {
    closing_ = true;
    state = State::kClosing;
    tg_.forget_waits(*this);
    target::qpair_closing(*this);  // held AERs come back through complete()
    // Requests the core has not seen end here.
    auto drop = [this](TcpRequest& r) {
      if (r.state == TcpRequest::State::kCapsuleData || r.state == TcpRequest::State::kNeedBuffer ||
          r.state == TcpRequest::State::kH2c)
        release(r);
    };
    drop(boot_);
    for (TcpRequest& r : reqs_) drop(r);
  }
  if (socket_dead_) {
    // Nothing more can be sent: what waits in the send stream is dropped.
    queued_bytes_ = 0;
    while (item_count_ > 0) {
      const int rel = items_[item_head_].release;
      item_head_ = item_head_ + 1 == items_.size() ? 0 : item_head_ + 1;
      --item_count_;
      if (rel >= 0) {
        if (TcpRequest* r = request_at(static_cast<uint16_t>(rel))) release(*r);
      }
    }
  }
}

void TcpConnection::finalize() {
  // Responses still queued (a graceful close) have had their chance in the last flush.
  socket_dead_ = true;
  begin_close(true);
  target::qpair_closed(*this);
}

}  // namespace pollux::fabric::tcp
