#include "fabric/rdma/cm.h"

#include <cerrno>
#include <cstring>

namespace pollux::fabric::rdma {

namespace {
namespace type {
inline constexpr uint8_t kReq = 1;
inline constexpr uint8_t kRep = 2;
inline constexpr uint8_t kRej = 3;
inline constexpr uint8_t kRtu = 4;
inline constexpr uint8_t kDreq = 5;
}  // namespace type
inline constexpr uint8_t kVersion = 1;
}  // namespace

// One CM message on the stream, fixed size (Pollux's own out-of-band format, little-endian).
struct CmId::Message {
  uint8_t version;
  uint8_t type;
  uint8_t private_data_len;
  uint8_t reserved;
  uint32_t qp_num;
  uint64_t port_address;
  uint32_t start_psn;
  uint32_t reserved2;
  uint8_t private_data[kCmPrivateDataMax];
};

const char* to_string(CmEventType t) {
  switch (t) {
    case CmEventType::kNone:
      return "none";
    case CmEventType::kConnectRequest:
      return "connect request";
    case CmEventType::kConnectResponse:
      return "connect response";
    case CmEventType::kRejected:
      return "rejected";
    case CmEventType::kEstablished:
      return "established";
    case CmEventType::kUnreachable:
      return "unreachable";
    case CmEventType::kDisconnected:
      return "disconnected";
  }
  return "?";
}

Result<std::unique_ptr<CmId>> CmId::connect(net::Network& net, const std::string& address,
                                            const std::string& port, const CmQpInfo& local,
                                            const void* private_data, std::size_t len) {
  if (len > kCmPrivateDataMax) return make_error(EINVAL, "CM private data: 56 bytes at most");
  auto s = net.connect(address, port);
  if (!s) return s.error();
  std::unique_ptr<CmId> id(new CmId(std::move(s).value(), State::kConnecting));
  id->queue(type::kReq, local, private_data, len);  // leaves once the stream is up
  return id;
}

CmId::~CmId() = default;

void CmId::queue(uint8_t t, const CmQpInfo& info, const void* pd, std::size_t len) {
  static_assert(sizeof(Message) == sizeof in_);  // in_ and out_ hold whole messages
  Message m{};
  m.version = kVersion;
  m.type = t;
  m.private_data_len = static_cast<uint8_t>(len);
  m.qp_num = info.qp_num;
  m.port_address = info.port_address;
  m.start_psn = info.start_psn;
  if (len > 0) std::memcpy(m.private_data, pd, len);
  std::memcpy(out_ + out_len_, &m, sizeof m);
  out_len_ += sizeof m;
}

bool CmId::flush() {
  while (out_len_ > 0) {
    const iovec v{out_, out_len_};
    const ssize_t n = sock_->send(&v, 1);
    if (n < 0) return false;
    if (n == net::kAgain) return true;
    std::memmove(out_, out_ + n, out_len_ - static_cast<std::size_t>(n));
    out_len_ -= static_cast<std::size_t>(n);
  }
  if (close_after_send_) {
    sock_.reset();
    state_ = State::kClosed;
  }
  return true;
}

CmEvent CmId::closed(CmEventType t) {
  state_ = State::kClosed;
  sock_.reset();
  CmEvent e;
  e.type = t;
  return e;
}

CmEvent CmId::poll() {
  if (state_ == State::kClosed) {
    if (sock_ && !flush()) sock_.reset();  // a DREQ or REJ still leaving
    return CmEvent{};
  }
  if (!sock_) return CmEvent{};
  const bool set_up = state_ == State::kEstablished || state_ == State::kResponded;
  if (state_ == State::kConnecting) {
    int err = 0;
    if (!sock_->connected(&err)) {
      if (err != 0) return closed(CmEventType::kUnreachable);
      return CmEvent{};
    }
  }
  if (!flush()) return closed(set_up ? CmEventType::kDisconnected : CmEventType::kUnreachable);
  if (!sock_) return CmEvent{};  // a REJ went; closed
  for (;;) {
    const ssize_t n = sock_->recv(in_ + in_len_, sizeof in_ - in_len_);
    if (n == net::kAgain) return CmEvent{};
    if (n < 0) {
      const bool passive_waiting = state_ == State::kAwaitingReq || state_ == State::kRequested;
      return closed(set_up || passive_waiting ? CmEventType::kDisconnected
                                              : CmEventType::kUnreachable);
    }
    in_len_ += static_cast<std::size_t>(n);
    if (in_len_ < sizeof in_) continue;
    in_len_ = 0;
    Message m;
    std::memcpy(&m, in_, sizeof m);
    if (m.version != kVersion || m.private_data_len > kCmPrivateDataMax)
      return closed(set_up ? CmEventType::kDisconnected : CmEventType::kUnreachable);
    CmEvent e;
    e.peer = CmQpInfo{m.qp_num, m.port_address, m.start_psn};
    e.private_data_len = m.private_data_len;
    std::memcpy(e.private_data, m.private_data, m.private_data_len);
    switch (m.type) {
      case type::kReq:
        if (state_ != State::kAwaitingReq) break;
        state_ = State::kRequested;
        peer_ = e.peer;
        e.type = CmEventType::kConnectRequest;
        return e;
      case type::kRep:
        if (state_ != State::kConnecting) break;
        state_ = State::kResponded;
        peer_ = e.peer;
        e.type = CmEventType::kConnectResponse;
        return e;
      case type::kRej:
        if (state_ != State::kConnecting) break;
        e.type = CmEventType::kRejected;
        state_ = State::kClosed;
        sock_.reset();
        return e;
      case type::kRtu:
        if (state_ != State::kResponded) break;
        state_ = State::kEstablished;
        e.type = CmEventType::kEstablished;
        return e;
      case type::kDreq: {
        CmEvent d = closed(CmEventType::kDisconnected);
        return d;
      }
      default:
        break;
    }
    // A message out of sequence: the peer is not following the protocol.
    return closed(set_up ? CmEventType::kDisconnected : CmEventType::kUnreachable);
  }
}

int CmId::accept(const CmQpInfo& local, const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  queue(type::kRep, local, pd, len);
  state_ = State::kResponded;
  return flush() ? 0 : -ECONNRESET;
}

int CmId::reject(const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  queue(type::kRej, CmQpInfo{}, pd, len);
  close_after_send_ = true;
  return flush() ? 0 : -ECONNRESET;
}

int CmId::establish() {
  if (state_ != State::kResponded || !sock_) return -EINVAL;
  queue(type::kRtu, CmQpInfo{}, nullptr, 0);
  state_ = State::kEstablished;
  return flush() ? 0 : -ECONNRESET;
}

void CmId::disconnect() {
  if (!sock_ || state_ == State::kClosed) return;
  if (out_len_ + sizeof(Message) <= sizeof out_) queue(type::kDreq, CmQpInfo{}, nullptr, 0);
  close_after_send_ = true;
  // What cannot be sent now goes with later polls; either way the id is closed for us.
  if (!flush()) sock_.reset();
  state_ = State::kClosed;
}

Result<std::unique_ptr<CmListener>> CmListener::listen(net::Network& net, const std::string& adrfam,
                                                       const std::string& address,
                                                       const std::string& port) {
  auto l = net.listen(adrfam, address, port);
  if (!l) return l.error();
  return std::unique_ptr<CmListener>(new CmListener(std::move(l).value()));
}

std::unique_ptr<CmId> CmListener::get_request() {
  auto s = listener_->accept();
  if (!s) return nullptr;
  return std::unique_ptr<CmId>(new CmId(std::move(s), CmId::State::kAwaitingReq));
}

int connect_qp(verbs::Qp& qp, const CmQpInfo& peer, uint32_t our_start_psn, const QpTiming& t) {
  namespace qa = verbs::qp_attr;
  verbs::QpAttr a;
  a.qp_state = verbs::QpState::kInit;
  a.qp_access_flags =
      verbs::access::kLocalWrite | verbs::access::kRemoteWrite | verbs::access::kRemoteRead;
  if (int rc = qp.modify(a, qa::kState | qa::kPkeyIndex | qa::kPort | qa::kAccessFlags); rc != 0)
    return rc;
  a.qp_state = verbs::QpState::kRtr;
  a.dest_address = peer.port_address;
  a.dest_qp_num = peer.qp_num;
  a.path_mtu = t.mtu;
  a.rq_psn = peer.start_psn & 0xffffff;
  a.max_dest_rd_atomic = t.max_dest_rd_atomic;
  a.min_rnr_timer = t.min_rnr_timer;
  if (int rc = qp.modify(a, qa::kState | qa::kAv | qa::kPathMtu | qa::kDestQpn | qa::kRqPsn |
                                qa::kMaxDestRdAtomic | qa::kMinRnrTimer);
      rc != 0)
    return rc;
  a.qp_state = verbs::QpState::kRts;
  a.sq_psn = our_start_psn & 0xffffff;
  a.timeout = t.timeout;
  a.retry_cnt = t.retry_cnt;
  a.rnr_retry = t.rnr_retry;
  a.max_rd_atomic = t.max_rd_atomic;
  return qp.modify(a, qa::kState | qa::kSqPsn | qa::kTimeout | qa::kRetryCnt | qa::kRnrRetry |
                          qa::kMaxQpRdAtomic);
}

}  // namespace pollux::fabric::rdma
