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

// The stream CM's id: CM messages over a byte stream of the Network seam.
class StreamCmId final : public CmId {
 public:
  StreamCmId(std::unique_ptr<net::Socket> s, State st) : CmId(st), sock_(std::move(s)) {}
  CmEvent poll() override;
  int accept(const CmQpInfo& local, const void* private_data, std::size_t len) override;
  int reject(const void* private_data, std::size_t len) override;
  int establish() override;
  void disconnect() override;
  int ready_qp(verbs::Qp& qp, const CmEvent& e, uint32_t our_start_psn,
               const QpTiming& t) override {
    return connect_qp(qp, e.peer, our_start_psn, t);
  }
  void wait(uint64_t deadline_ns) override {
    if (sock_) sock_->wait(false, deadline_ns);
  }
  std::string peer_name() const override { return sock_ ? sock_->peer() : ""; }
  void queue(uint8_t type, const CmQpInfo& info, const void* pd, std::size_t len);

 private:
  struct Message;
  bool flush();  // false: the stream broke
  CmEvent closed(CmEventType t);

  std::unique_ptr<net::Socket> sock_;
  bool close_after_send_ = false;
  uint8_t out_[2 * 80] = {};
  std::size_t out_len_ = 0;
  uint8_t in_[80] = {};
  std::size_t in_len_ = 0;
};

class StreamCmListener final : public CmListener {
 public:
  explicit StreamCmListener(std::unique_ptr<net::Listener> l) : listener_(std::move(l)) {}
  std::unique_ptr<CmId> get_request() override {
    auto s = listener_->accept();
    if (!s) return nullptr;
    return std::make_unique<StreamCmId>(std::move(s), CmId::State::kAwaitingReq);
  }
  uint16_t port() const override { return listener_->port(); }

 private:
  std::unique_ptr<net::Listener> listener_;
};

class StreamCm final : public ConnectionManager {
 public:
  explicit StreamCm(net::Network& net) : net_(net) {}
  Result<std::unique_ptr<CmId>> connect(const std::string& address, const std::string& port,
                                        const CmQpInfo& local, const void* pd,
                                        std::size_t len) override {
    return CmId::connect(net_, address, port, local, pd, len);
  }
  Result<std::unique_ptr<CmListener>> listen(const std::string& adrfam, const std::string& address,
                                             const std::string& port) override {
    return CmListener::listen(net_, adrfam, address, port);
  }
  uint64_t now_ns() const override { return net_.now_ns(); }
  const char* kind() const override { return "stream"; }

 private:
  net::Network& net_;
};

// One CM message on the stream, fixed size (Pollux's own out-of-band format, little-endian).
struct StreamCmId::Message {
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
  auto id = std::make_unique<StreamCmId>(std::move(s).value(), State::kConnecting);
  id->queue(type::kReq, local, private_data, len);  // leaves once the stream is up
  return std::unique_ptr<CmId>(std::move(id));
}

std::unique_ptr<ConnectionManager> stream_cm(net::Network& net) {
  return std::make_unique<StreamCm>(net);
}

void StreamCmId::queue(uint8_t t, const CmQpInfo& info, const void* pd, std::size_t len) {
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

bool StreamCmId::flush() {
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

CmEvent StreamCmId::closed(CmEventType t) {
  state_ = State::kClosed;
  sock_.reset();
  CmEvent e;
  e.type = t;
  return e;
}

CmEvent StreamCmId::poll() {
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

int StreamCmId::accept(const CmQpInfo& local, const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  queue(type::kRep, local, pd, len);
  state_ = State::kResponded;
  return flush() ? 0 : -ECONNRESET;
}

int StreamCmId::reject(const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  queue(type::kRej, CmQpInfo{}, pd, len);
  close_after_send_ = true;
  return flush() ? 0 : -ECONNRESET;
}

int StreamCmId::establish() {
  if (state_ != State::kResponded || !sock_) return -EINVAL;
  queue(type::kRtu, CmQpInfo{}, nullptr, 0);
  state_ = State::kEstablished;
  return flush() ? 0 : -ECONNRESET;
}

void StreamCmId::disconnect() {
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
  return std::unique_ptr<CmListener>(new StreamCmListener(std::move(l).value()));
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
