#include "fabric/tcp/queue.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabric/net/posix.h"
#include "isa-l/crc.h"
#include "spec/nvme_fabrics.h"

namespace pollux::fabric::tcp {

namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;

namespace {

// CRC32C as NVMe/TCP digests use it: seed ~0, result inverted; chained through the raw value.
uint32_t crc_update(uint32_t raw, const void* p, std::size_t n) {
  return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(p)), static_cast<int>(n), raw);
}
constexpr uint32_t kCrcSeed = ~0u;

// Data direction of a command: opcode bits [1:0], or for a fabrics command its FCTYPE's.
bool writes(const sn::SubmissionEntry& cmd) {
  if (cmd.opcode == nf::kOpcodeFabrics) {
    uint8_t fctype;
    std::memcpy(&fctype, reinterpret_cast<const uint8_t*>(&cmd) + 4, 1);
    return fctype & 1;
  }
  return cmd.opcode & 1;
}

constexpr uint32_t kRxBytes = 256 * 1024;
constexpr uint32_t kItemsPerSlot = 8;  // typical PDU: header, a few data segments, digest

}  // namespace

TcpQueue::TcpQueue(std::shared_ptr<Paths> paths, const nvme::QueueParams& params,
                   TcpOptions options, uint32_t in_capsule)
    : paths_(std::move(paths)), params_(params), options_(options), in_capsule_(in_capsule) {}

TcpQueue::~TcpQueue() {
  close_socket();
}

void TcpQueue::close_socket() {
  sock_.reset();
}

// ----------------------------------------------------------------------- connection ---

// The handshake runs without blocking (start_connect, then poll_connect until it is done);
// open() is the same, waiting on the socket between polls.
std::string TcpQueue::open() {
  (void)start_connect();
  for (;;) {
    const int rc = poll_connect();
    if (rc != -EAGAIN) return rc == 0 ? "" : connect_error_;
    sock_->wait(hs_ != Handshake::kRecvIcResp, hs_deadline_);
  }
}

int TcpQueue::start_connect() {
  // Nothing in flight survives: the controller connects the queue again (Connect). Requests
  // not sent yet keep what map_data described: the queue pair submits them after the Connect.
  for (Request& r : reqs_) {
    if (r.sent) r = Request{};
  }
  produced_ = tail_ = 0;
  slot_next_ = slots_used_ = 0;
  item_head_ = item_count_ = 0;
  r2t_head_ = r2t_count_ = 0;
  data_req_ = nullptr;
  // The admin queue leads a failover: when the active path does not answer, the others are
  // tried in turn.
  hs_paths_left_ = params_.qid == 0 ? paths_->size() - 1 : 0;
  begin_attempt();
  return 0;
}

void TcpQueue::begin_attempt() {
  close_socket();
  broken_.store(true, std::memory_order_release);  // until the handshake is done
  net::Network& net = options_.network != nullptr ? *options_.network : net::posix_network();
  hs_endpoint_ = paths_->active();
  hs_deadline_ = net.now_ns() + uint64_t{options_.connect_timeout_ms} * 1'000'000;
  hs_pos_ = 0;
  hs_ = Handshake::kConnecting;
  auto s = net.connect(hs_endpoint_.traddr, hs_endpoint_.trsvcid);
  if (!s) {
    hs_error_ = "cannot connect: " + s.error().message;
    return;  // poll_connect() sees no socket: this attempt failed
  }
  sock_ = std::move(s).value();
  hs_req_ = nt::IcReq{};
  hs_req_.ch.type = nt::pdu::kIcReq;
  hs_req_.ch.hlen = nt::kIcReqHlen;
  hs_req_.ch.plen = nt::kIcReqHlen;
  hs_req_.pfv = nt::kPfv10;
  hs_req_.hpda = 0;
  hs_req_.dgst = static_cast<uint8_t>((options_.header_digest ? nt::dgst::kHdgstEnable : 0) |
                                      (options_.data_digest ? nt::dgst::kDdgstEnable : 0));
  hs_req_.maxr2t = 0;  // one R2T per command at a time
}

// This attempt failed: the next path (admin queue, paths left) or the end.
int TcpQueue::attempt_failed(const std::string& why) {
  close_socket();
  connect_error_ = "NVMe/TCP " + hs_endpoint_.traddr + ":" + hs_endpoint_.trsvcid + ": " + why;
  if (hs_paths_left_ > 0) {
    --hs_paths_left_;
    paths_->fail_over();
    begin_attempt();
    return -EAGAIN;
  }
  hs_ = Handshake::kFailed;
  return -ECONNREFUSED;
}

int TcpQueue::poll_connect() {
  net::Network& net = options_.network != nullptr ? *options_.network : net::posix_network();
  for (;;) {
    switch (hs_) {
      case Handshake::kIdle:
        return broken() ? -ENOTCONN : 0;
      case Handshake::kDone:
        return 0;
      case Handshake::kFailed:
        return -ECONNREFUSED;
      case Handshake::kConnecting: {
        if (!sock_) {
          if (attempt_failed(hs_error_) == -EAGAIN) continue;
          return -ECONNREFUSED;
        }
        int err = 0;
        if (sock_->connected(&err)) {
          hs_ = Handshake::kSendIcReq;
          hs_pos_ = 0;
          continue;
        }
        if (err != 0 || net.now_ns() >= hs_deadline_) {
          if (attempt_failed(std::string("cannot connect: ") +
                             std::strerror(err != 0 ? err : ETIMEDOUT)) == -EAGAIN)
            continue;
          return -ECONNREFUSED;
        }
        return -EAGAIN;
      }
      case Handshake::kSendIcReq:
      case Handshake::kRecvIcResp: {
        const bool sending = hs_ == Handshake::kSendIcReq;
        auto* base = sending ? reinterpret_cast<uint8_t*>(&hs_req_)
                             : reinterpret_cast<uint8_t*>(&hs_resp_);
        const uint32_t size = sending ? sizeof hs_req_ : sizeof hs_resp_;
        const iovec v{base + hs_pos_, size - hs_pos_};
        const ssize_t r = sending ? sock_->send(&v, 1) : sock_->recv(&v, 1);
        if (r > 0) {
          hs_pos_ += static_cast<uint32_t>(r);
          if (hs_pos_ < size) continue;
          hs_pos_ = 0;
          if (sending) {
            hs_ = Handshake::kRecvIcResp;
            continue;
          }
          return finish_handshake();
        }
        if (r < 0 || net.now_ns() >= hs_deadline_) {
          if (attempt_failed("no ICResp within " + std::to_string(options_.connect_timeout_ms) +
                             " ms") == -EAGAIN)
            continue;
          return -ECONNREFUSED;
        }
        return -EAGAIN;
      }
    }
  }
}

int TcpQueue::finish_handshake() {
  const nt::IcResp& resp = hs_resp_;
  if (resp.ch.type != nt::pdu::kIcResp || resp.ch.hlen != nt::kIcRespHlen ||
      resp.ch.plen != nt::kIcRespHlen || resp.pfv != nt::kPfv10 || resp.cpda > nt::kMaxPda ||
      resp.maxh2cdata < nt::kMinMaxH2cData || resp.maxh2cdata % 4 != 0 ||
      (resp.dgst & ~hs_req_.dgst) != 0) {
    const std::string why = "bad ICResp (type " + std::to_string(resp.ch.type) + ", PFV " +
                            std::to_string(resp.pfv) + ", MAXH2CDATA " +
                            std::to_string(resp.maxh2cdata) + ")";
    return attempt_failed(why) == -EAGAIN ? poll_connect() : -ECONNREFUSED;
  }
  digests_ = resp.dgst;
  cpda_ = resp.cpda;
  max_h2c_ = resp.maxh2cdata;
  stage_ = Rx::kHeader;
  hdr_have_ = 0;
  hdr_need_ = nt::kCommonHeaderLength;
  rx_pos_ = rx_end_ = 0;
  hs_ = Handshake::kDone;
  connect_error_.clear();
  broken_.store(false, std::memory_order_release);
  return 0;
}

void TcpQueue::reset() {
  (void)open();  // a failure leaves the queue broken(): the reset fails and is tried again
}

void TcpQueue::leave_path() {
  if (params_.qid != 0) paths_->fail_over_from(hs_endpoint_);
}

int TcpQueue::init_requests(uint32_t n) {
  uint32_t bits = 1;
  while ((1u << bits) < n) ++bits;  // the Qpair's CIDs: the request index in the low bits
  cid_mask_ = (1u << bits) - 1;
  reqs_.assign(n, Request{});
  iovs_.assign(std::size_t{n} * kMaxIov, iovec{});
  sq_.assign(params_.entries, sn::SubmissionEntry{});
  slot_count_ = 2 * params_.entries + 64;
  slots_.assign(std::size_t{slot_count_} * kSlotBytes, 0);
  items_.assign(std::size_t{slot_count_} * kItemsPerSlot, Item{});
  r2t_work_.assign(n, 0);
  rx_.assign(kRxBytes, 0);
  return 0;
}

// ------------------------------------------------------------------------ commands ---

int TcpQueue::map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                       uint32_t len) {
  if (index >= reqs_.size() || iovcnt <= 0 || len == 0) return -EINVAL;
  // Describe only the transfer; the iovecs are copied (the caller's array may be a temporary).
  uint32_t left = len, n = 0;
  iovec* dst = iovs(index);
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    if (n == kMaxIov) return -E2BIG;
    const uint32_t take = static_cast<uint32_t>(std::min<std::size_t>(iov[i].iov_len, left));
    if (take == 0 || iov[i].iov_base == nullptr) return -EINVAL;
    dst[n++] = iovec{iov[i].iov_base, take};
    left -= take;
  }
  if (left != 0) return -EINVAL;
  Request& r = reqs_[index];
  r = Request{};
  r.cid = cmd.cid;
  r.mapped = true;
  r.to_device = writes(cmd);
  r.in_capsule = r.to_device && len <= in_capsule_;
  r.len = len;
  r.iovcnt = n;
  cmd.set_psdt(sn::kPsdtSglMptrContiguous);
  cmd.dptr.sgl1 = r.in_capsule ? nf::sgl::in_capsule(len) : nf::sgl::transport(len);
  return 0;
}

TcpQueue::Request* TcpQueue::request_of(uint16_t cid) {
  const uint32_t index = cid & cid_mask_;
  if (index >= reqs_.size()) return nullptr;
  Request& r = reqs_[index];
  return r.mapped && r.cid == cid ? &r : nullptr;
}

void TcpQueue::flush(uint32_t tail) {
  tail_ = tail;
  if (broken()) return;
  produce();
  send_pending();
}

// --------------------------------------------------------------------- send stream ---

uint8_t* TcpQueue::take_slot() {
  uint8_t* s = &slots_[std::size_t{slot_next_} * kSlotBytes];
  slot_next_ = slot_next_ + 1 == slot_count_ ? 0 : slot_next_ + 1;
  ++slots_used_;
  return s;
}

bool TcpQueue::room_for(uint32_t items) const {
  return slots_used_ < slot_count_ && item_count_ + items <= items_.size();
}

void TcpQueue::push(const void* base, std::size_t len, bool release) {
  const std::size_t at = (item_head_ + item_count_) % items_.size();
  items_[at] = Item{iovec{const_cast<void*>(base), len}, release, false, 0};
  ++item_count_;
}

// The iovec pieces of [offset, offset + len) of a request's data.
uint32_t TcpQueue::segments(uint32_t index, uint32_t offset, uint32_t len) const {
  const iovec* v = &iovs_[std::size_t{index} * kMaxIov];
  uint32_t n = 0, pos = 0;
  for (uint32_t i = 0; i < reqs_[index].iovcnt && len > 0; ++i) {
    const uint32_t end = pos + static_cast<uint32_t>(v[i].iov_len);
    if (end > offset) {
      const uint32_t from = std::max(offset, pos);
      const uint32_t take = std::min(end - from, len);
      len -= take;
      offset += take;
      ++n;
    }
    pos = end;
  }
  return n;
}

// Queues [offset, offset + len) of a request's data; *crc chains the data digest from seed.
uint32_t TcpQueue::push_data(uint32_t index, uint32_t offset, uint32_t len, uint32_t seed,
                             uint32_t* crc) {
  iovec* v = iovs(index);
  uint32_t pos = 0, n = 0;
  uint32_t c = seed;
  for (uint32_t i = 0; i < reqs_[index].iovcnt && len > 0; ++i) {
    const uint32_t end = pos + static_cast<uint32_t>(v[i].iov_len);
    if (end > offset) {
      const uint32_t from = std::max(offset, pos);
      const uint32_t take = std::min(end - from, len);
      const uint8_t* p = static_cast<const uint8_t*>(v[i].iov_base) + (from - pos);
      push(p, take);
      if (crc) c = crc_update(c, p, take);
      len -= take;
      offset += take;
      ++n;
    }
    pos = end;
  }
  if (crc) *crc = c;
  return n;
}

// The CapsuleCmd for the SQE in `slot`: header (and its digest), in-capsule data (and its
// digest). false: no room in the send stream yet.
bool TcpQueue::produce_capsule(uint32_t slot) {
  sn::SubmissionEntry& sqe = sq_[slot];
  Request* r = request_of(sqe.cid);
  const bool data = r != nullptr && r->in_capsule;
  const bool hd = digests_ & nt::dgst::kHdgstEnable, dd = digests_ & nt::dgst::kDdgstEnable;
  const uint32_t index = r != nullptr ? static_cast<uint32_t>(r - reqs_.data()) : 0;
  const uint32_t nitems = 1 + (data ? segments(index, 0, r->len) + (dd ? 1 : 0) : 0);
  if (!room_for(nitems)) return false;
  if (r == nullptr) {  // no data: a null transport SGL (fabrics commands describe data by SGL)
    sqe.set_psdt(sn::kPsdtSglMptrContiguous);
    sqe.dptr.sgl1 = nf::sgl::transport(0);
  } else {
    r->sent = true;
  }
  uint8_t* s = take_slot();
  auto* pdu = reinterpret_cast<nt::CapsuleCmd*>(s);
  pdu->ch = nt::CommonHeader{};
  pdu->ch.type = nt::pdu::kCapsuleCmd;
  pdu->ch.hlen = nt::kCapsuleCmdHlen;
  const uint32_t pdo = data ? nt::data_offset(nt::kCapsuleCmdHlen, hd, cpda_) : 0;
  pdu->ch.pdo = static_cast<uint8_t>(pdo);
  pdu->ch.plen = nt::pdu_length(nt::kCapsuleCmdHlen, hd, pdo, data ? r->len : 0, dd);
  pdu->ch.flags =
      static_cast<uint8_t>((hd ? nt::flags::kHdgst : 0) | (data && dd ? nt::flags::kDdgst : 0));
  pdu->sqe = sqe;
  uint32_t head_bytes = nt::kCapsuleCmdHlen;
  if (hd) {
    const uint32_t h = ~crc_update(kCrcSeed, s, nt::kCapsuleCmdHlen);
    std::memcpy(s + head_bytes, &h, 4);
    head_bytes += 4;
  }
  if (!data) {
    push(s, head_bytes, /*release=*/true);
    return true;
  }
  std::memset(s + head_bytes, 0, pdo - head_bytes);  // padding up to PDO
  push(s, pdo);
  uint32_t crc = kCrcSeed;
  push_data(index, 0, r->len, kCrcSeed, dd ? &crc : nullptr);
  if (dd) {
    const uint32_t d = ~crc;
    std::memcpy(s + kSlotBytes - 4, &d, 4);
    push(s + kSlotBytes - 4, 4);
  }
  items_[(item_head_ + item_count_ - 1) % items_.size()].release = true;
  return true;
}

// The next H2CData PDU of a request's R2T. false: no room yet.
bool TcpQueue::produce_h2c(uint32_t index) {
  Request& r = reqs_[index];
  const bool hd = digests_ & nt::dgst::kHdgstEnable, dd = digests_ & nt::dgst::kDdgstEnable;
  const uint32_t len = std::min(max_h2c_, r.r2t_end - r.r2t_next);
  if (!room_for(1 + segments(index, r.r2t_next, len) + (dd ? 1 : 0))) return false;
  uint8_t* s = take_slot();
  auto* pdu = reinterpret_cast<nt::H2cData*>(s);
  *pdu = nt::H2cData{};
  pdu->ch.type = nt::pdu::kH2cData;
  pdu->ch.hlen = nt::kDataHlen;
  const uint32_t pdo = nt::data_offset(nt::kDataHlen, hd, cpda_);
  pdu->ch.pdo = static_cast<uint8_t>(pdo);
  pdu->ch.plen = nt::pdu_length(nt::kDataHlen, hd, pdo, len, dd);
  const bool last = r.r2t_next + len == r.r2t_end;
  pdu->ch.flags = static_cast<uint8_t>((hd ? nt::flags::kHdgst : 0) | (dd ? nt::flags::kDdgst : 0) |
                                       (last ? nt::flags::kLastPdu : 0));
  pdu->cccid = r.cid;
  pdu->ttag = r.ttag;
  pdu->datao = r.r2t_next;
  pdu->datal = len;
  uint32_t head_bytes = nt::kDataHlen;
  if (hd) {
    const uint32_t h = ~crc_update(kCrcSeed, s, nt::kDataHlen);
    std::memcpy(s + head_bytes, &h, 4);
    head_bytes += 4;
  }
  std::memset(s + head_bytes, 0, pdo - head_bytes);
  push(s, pdo);
  uint32_t crc = kCrcSeed;
  push_data(index, r.r2t_next, len, kCrcSeed, dd ? &crc : nullptr);
  if (dd) {
    const uint32_t d = ~crc;
    std::memcpy(s + kSlotBytes - 4, &d, 4);
    push(s + kSlotBytes - 4, 4);
  }
  items_[(item_head_ + item_count_ - 1) % items_.size()].release = true;
  r.r2t_next += len;
  if (last) {  // the R2T stays outstanding until this has left (send_pending)
    Item& end = items_[(item_head_ + item_count_ - 1) % items_.size()];
    end.r2t_last = true;
    end.cid = r.cid;
  }
  return true;
}

// Everything waiting to become PDUs, in order, while the send stream has room.
void TcpQueue::produce() {
  while (r2t_count_ > 0) {
    const uint16_t index = r2t_work_[r2t_head_];
    while (reqs_[index].r2t_next < reqs_[index].r2t_end) {
      if (!produce_h2c(index)) return;
    }
    r2t_head_ = r2t_head_ + 1 == r2t_work_.size() ? 0 : r2t_head_ + 1;
    --r2t_count_;
  }
  while (produced_ != tail_) {
    if (!produce_capsule(produced_)) return;
    produced_ = produced_ + 1 == params_.entries ? 0 : produced_ + 1;
  }
}

// One sendmsg of what is queued (up to where the item ring wraps).
void TcpQueue::send_pending() {
  while (item_count_ > 0 && !broken()) {
    const uint32_t run =
        std::min<uint32_t>({item_count_, static_cast<uint32_t>(items_.size()) - item_head_, 512u});
    iovec v[512];
    for (uint32_t i = 0; i < run; ++i) v[i] = items_[item_head_ + i].v;
    const ssize_t sent = sock_->send(v, static_cast<int>(run));
    if (sent < 0) {
      broken_.store(true, std::memory_order_release);
      return;
    }
    if (sent == net::kAgain) return;
    std::size_t left = static_cast<std::size_t>(sent);
    while (left > 0) {
      Item& it = items_[item_head_];
      if (left < it.v.iov_len) {
        it.v.iov_base = static_cast<uint8_t*>(it.v.iov_base) + left;
        it.v.iov_len -= left;
        return;  // the socket is full
      }
      left -= it.v.iov_len;
      if (it.release) --slots_used_;
      if (it.r2t_last) {
        if (Request* r = request_of(it.cid)) {
          r->r2t_active = false;
          r->r2t_sent_rx = rx_count_;
        }
      }
      item_head_ = item_head_ + 1 == items_.size() ? 0 : item_head_ + 1;
      --item_count_;
    }
    produce();  // room freed: more PDUs may go
  }
}

// ---------------------------------------------------------------------- receiving ---

int TcpQueue::poll(sn::CompletionEntry* out, uint32_t max) {
  if (broken()) return 0;
  if (item_count_ > 0 || r2t_count_ > 0 || produced_ != tail_) {
    produce();
    send_pending();
  }
  uint32_t n = 0;
  while (n < max && !broken()) {
    if (rx_pos_ == rx_end_) {
      const ssize_t r = sock_->recv(rx_.data(), rx_.size());
      if (r < 0) {  // end of stream or an error: the controller went away
        broken_.store(true, std::memory_order_release);
        break;
      }
      if (r == net::kAgain) break;  // nothing more for now
      rx_pos_ = 0;
      rx_end_ = static_cast<uint32_t>(r);
      ++rx_count_;
    }
    const uint32_t avail = rx_end_ - rx_pos_;
    const uint8_t* p = rx_.data() + rx_pos_;
    switch (stage_) {
      case Rx::kHeader: {
        // A PDU that may carry a completion starts only while out[] has room.
        if (hdr_have_ == 0 && n == max) return static_cast<int>(n);
        const uint32_t take = std::min(avail, hdr_need_ - hdr_have_);
        std::memcpy(hdr_ + hdr_have_, p, take);
        hdr_have_ += take;
        rx_pos_ += take;
        if (hdr_have_ == nt::kCommonHeaderLength && hdr_need_ == nt::kCommonHeaderLength) {
          if (!begin_pdu(out, &n, max)) break;
        } else if (hdr_have_ == hdr_need_) {
          if (!end_header(out, &n)) break;
        }
        break;
      }
      case Rx::kPad: {
        const uint32_t take = std::min(avail, pad_left_);
        rx_pos_ += take;
        pad_left_ -= take;
        if (pad_left_ == 0) stage_ = data_left_ ? Rx::kData : Rx::kDigest;
        break;
      }
      case Rx::kData: {
        const uint32_t take = std::min(avail, data_left_);
        copy_in(p, take);
        rx_pos_ += take;
        data_left_ -= take;
        if (data_left_ == 0) {
          if (digests_ & nt::dgst::kDdgstEnable) {
            stage_ = Rx::kDigest;
            digest_have_ = 0;
          } else {
            end_pdu(out, &n);
          }
        }
        break;
      }
      case Rx::kDigest: {
        const uint32_t take = std::min(avail, 4 - digest_have_);
        std::memcpy(digest_ + digest_have_, p, take);
        digest_have_ += take;
        rx_pos_ += take;
        if (digest_have_ == 4) {
          uint32_t d;
          std::memcpy(&d, digest_, 4);
          if (d != ~data_crc_ && data_req_ != nullptr) data_req_->digest_error = true;
          end_pdu(out, &n);
        }
        break;
      }
    }
  }
  return static_cast<int>(n);
}

// The common header is in: check it, and learn how much header (and digest) follows.
bool TcpQueue::begin_pdu(sn::CompletionEntry*, uint32_t*, uint32_t) {
  nt::CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof ch);
  const uint8_t expected = nt::hlen_of(ch.type);
  const bool from_controller = ch.type == nt::pdu::kCapsuleResp || ch.type == nt::pdu::kC2hData ||
                               ch.type == nt::pdu::kR2t || ch.type == nt::pdu::kC2hTermReq;
  if (!from_controller || expected == 0) {
    fail(nt::fes::kInvalidHeaderField, 0);  // PDU-TYPE
    return false;
  }
  if (ch.hlen != expected) {
    fail(nt::fes::kInvalidHeaderField, 2);  // HLEN
    return false;
  }
  const bool hd = (digests_ & nt::dgst::kHdgstEnable) && ch.type != nt::pdu::kC2hTermReq;
  hdr_need_ = ch.hlen + (hd ? nt::kDigestSize : 0);
  // CapsuleResp and R2T carry no data: anything past their header would be read as a PDU.
  const bool no_data = ch.type == nt::pdu::kCapsuleResp || ch.type == nt::pdu::kR2t;
  if (ch.plen < hdr_need_ || (no_data && ch.plen != hdr_need_)) {
    fail(nt::fes::kInvalidHeaderField, 4);  // PLEN
    return false;
  }
  return true;
}

// The whole header (and its digest) is in.
bool TcpQueue::end_header(sn::CompletionEntry* out, uint32_t* n) {
  nt::CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof ch);
  const bool hd = (digests_ & nt::dgst::kHdgstEnable) && ch.type != nt::pdu::kC2hTermReq;
  if (hd) {
    uint32_t got;
    std::memcpy(&got, hdr_ + ch.hlen, 4);
    if (got != ~crc_update(kCrcSeed, hdr_, ch.hlen)) {
      fail(nt::fes::kHeaderDigestError, 0);
      return false;
    }
  }
  // hdr_have_ keeps the header's length until the PDU is accepted: an H2CTermReq for it
  // carries the header in error.
  hdr_need_ = nt::kCommonHeaderLength;
  stage_ = Rx::kHeader;
  switch (ch.type) {
    case nt::pdu::kCapsuleResp: {
      hdr_have_ = 0;
      nt::CapsuleResp resp;
      std::memcpy(&resp, hdr_, sizeof resp);
      sn::CompletionEntry cqe = resp.cqe;
      cqe.sqid = params_.qid;  // the connection is the queue (targets leave SQID 0 on fabrics)
      if (Request* r = request_of(cqe.cid)) {
        if (r->digest_error && (cqe.status & 0xfffe) == 0) {
          cqe.status = sn::status::make(sn::sct::kGeneric, sn::sc::kTransientTransportError);
        }
        r->mapped = false;
      }
      out[(*n)++] = cqe;
      return true;
    }
    case nt::pdu::kC2hData: {
      nt::C2hData h;
      std::memcpy(&h, hdr_, sizeof h);
      Request* r = request_of(h.cccid);
      if (r == nullptr || r->to_device) {
        fail(nt::fes::kInvalidHeaderField, offsetof(nt::C2hData, cccid));
        return false;
      }
      // In 64 bits: a DATAL near 4 GiB must not wrap back into the transfer.
      if (h.datao != r->received || h.datal == 0 || uint64_t{h.datao} + h.datal > r->len) {
        fail(nt::fes::kDataTransferOutOfRange, 0);
        return false;
      }
      const bool dd = digests_ & nt::dgst::kDdgstEnable;
      const uint32_t header_bytes = ch.hlen + (hd ? nt::kDigestSize : 0);
      if (ch.pdo < header_bytes || ch.plen != ch.pdo + h.datal + (dd ? nt::kDigestSize : 0)) {
        fail(nt::fes::kInvalidHeaderField, 3);  // PDO
        return false;
      }
      data_req_ = r;
      data_pos_ = h.datao;
      data_left_ = h.datal;
      data_crc_ = kCrcSeed;
      pad_left_ = ch.pdo - header_bytes;
      pdu_flags_ = ch.flags;
      stage_ = pad_left_ ? Rx::kPad : Rx::kData;
      return true;
    }
    case nt::pdu::kR2t: {
      nt::R2t h;
      std::memcpy(&h, hdr_, sizeof h);
      Request* r = request_of(h.cccid);
      if (r == nullptr || !r->to_device || r->in_capsule) {
        fail(nt::fes::kInvalidHeaderField, offsetof(nt::R2t, cccid));
        return false;
      }
      if (r->r2t_active || r->r2t_sent_rx == rx_count_) {
        fail(nt::fes::kR2tLimitExceeded, 0);  // FEI is reserved for this FES
        return false;
      }
      if (h.r2tl == 0 || uint64_t{h.r2to} + h.r2tl > r->len) {
        fail(nt::fes::kDataTransferOutOfRange, 0);
        return false;
      }
      hdr_have_ = 0;
      r->r2t_active = true;
      r->ttag = h.ttag;
      r->r2t_next = h.r2to;
      r->r2t_end = h.r2to + h.r2tl;
      const uint32_t at = (r2t_head_ + r2t_count_) % r2t_work_.size();
      r2t_work_[at] = static_cast<uint16_t>(r - reqs_.data());
      ++r2t_count_;
      produce();
      send_pending();
      return true;
    }
    case nt::pdu::kC2hTermReq:
    default:
      // The controller ends the connection (its reason is in the PDU): nothing more comes.
      close_socket();
      broken_.store(true, std::memory_order_release);
      return false;
  }
}

void TcpQueue::copy_in(const uint8_t* p, uint32_t len) {
  if (digests_ & nt::dgst::kDdgstEnable) data_crc_ = crc_update(data_crc_, p, len);
  Request& r = *data_req_;
  const iovec* v = iovs(static_cast<uint32_t>(&r - reqs_.data()));
  uint32_t pos = 0;
  for (uint32_t i = 0; i < r.iovcnt && len > 0; ++i) {
    const uint32_t end = pos + static_cast<uint32_t>(v[i].iov_len);
    if (end > data_pos_) {
      const uint32_t take = std::min(end - data_pos_, len);
      std::memcpy(static_cast<uint8_t*>(v[i].iov_base) + (data_pos_ - pos), p, take);
      p += take;
      len -= take;
      data_pos_ += take;
    }
    pos = end;
  }
  r.received = data_pos_;
}

// The end of a C2HData PDU: with SUCCESS (and LAST_PDU) it is the command's completion.
void TcpQueue::end_pdu(sn::CompletionEntry* out, uint32_t* n) {
  stage_ = Rx::kHeader;
  Request* r = data_req_;
  data_req_ = nullptr;
  if (r != nullptr && (pdu_flags_ & nt::flags::kSuccess) &&
      (!(pdu_flags_ & nt::flags::kLastPdu) || r->received != r->len)) {
    fail(nt::fes::kInvalidHeaderField, 1);  // FLAGS: SUCCESS only on the last PDU
    return;
  }
  hdr_have_ = 0;  // the C2HData header (hdr_) was kept for that H2CTermReq
  if (r == nullptr || !(pdu_flags_ & nt::flags::kSuccess)) return;
  sn::CompletionEntry cqe{};
  cqe.cid = r->cid;
  cqe.sqid = params_.qid;
  if (r->digest_error)
    cqe.status = sn::status::make(sn::sct::kGeneric, sn::sc::kTransientTransportError);
  r->mapped = false;
  out[(*n)++] = cqe;
}

// A protocol error: tell the controller why (H2CTermReq) and end the connection.
void TcpQueue::fail(uint16_t fes, uint32_t fei) {
  if (sock_) {
    struct {
      nt::TermReq h;
      uint8_t data[nt::kTermReqMaxDataLength];
    } __attribute__((packed)) t{};
    t.h.ch.type = nt::pdu::kH2cTermReq;
    t.h.ch.hlen = nt::kTermReqHlen;
    const uint32_t copy = std::min<uint32_t>(hdr_have_, nt::kTermReqMaxDataLength);
    t.h.ch.plen = nt::kTermReqHlen + copy;
    t.h.fes = fes;
    t.h.fei = fei;
    std::memcpy(t.data, hdr_, copy);
    const iovec v{&t, t.h.ch.plen};
    (void)sock_->send(&v, 1);
  }
  close_socket();
  broken_.store(true, std::memory_order_release);
}

}  // namespace pollux::fabric::tcp
