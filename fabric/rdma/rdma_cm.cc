#include "fabric/rdma/rdma_cm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "driver/rdma/ibverbs_provider.h"

namespace pollux::fabric::rdma {

namespace {

constexpr int kResolveTimeoutMs = 2000;  // address and route resolution
constexpr int kBacklog = 128;
// IB CM's REJ reason for a rejection the peer's consumer asked for (private data is theirs).
constexpr int kRejConsumerDefined = 28;

uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

std::string address_text(const sockaddr* sa) {
  if (sa == nullptr) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// A non-blocking event channel (poll() reads it without waiting).
rdma_event_channel* open_channel(std::string* err) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) {
    *err = errno_text("rdma_create_event_channel (is rdma_ucm loaded?)");
    return nullptr;
  }
  const int fl = fcntl(ch->fd, F_GETFL);
  if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    *err = errno_text("event channel");
    rdma_destroy_event_channel(ch);
    return nullptr;
  }
  return ch;
}

// A numeric address and port (getaddrinfo, no name lookup beyond what the caller typed).
bool resolve(const std::string& address, const std::string& port, int family, sockaddr_storage* out,
             std::string* err) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc =
      getaddrinfo(address.empty() ? nullptr : address.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    *err = "address " + address + ":" + port + ": " + gai_strerror(rc);
    return false;
  }
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return true;
}

class RdmaCm;

class RdmaCmId final : public CmId {
 public:
  RdmaCmId(RdmaCm& cm, rdma_cm_id* id, rdma_event_channel* ch, State st)
      : CmId(st), cm_(cm), id_(id), ch_(ch) {}
  ~RdmaCmId() override {
    if (id_ != nullptr) rdma_destroy_id(id_);  // every event of it was acknowledged
    if (ch_ != nullptr) rdma_destroy_event_channel(ch_);
  }

  CmEvent poll() override;
  int accept(const CmQpInfo& local, const void* pd, std::size_t len) override;
  int reject(const void* pd, std::size_t len) override;
  int establish() override;
  void disconnect() override;
  int ready_qp(verbs::Qp& qp, const CmEvent& e, uint32_t our_start_psn, const QpTiming& t) override;
  void wait(uint64_t deadline_ns) override;
  std::string peer_name() const override { return peer_name_; }

  // Active side, once the id exists: address resolution starts; REQ after the route.
  std::string start_connect(const sockaddr* dst, const CmQpInfo& local, const void* pd,
                            std::size_t len);
  // Passive side: the CONNECT_REQUEST the listener read for this id (poll() returns it first).
  void set_request(const rdma_cm_event& e);
  void set_channel(rdma_event_channel* ch) { ch_ = ch; }
  std::string reason() const override { return why_; }

 private:
  CmEvent closed(CmEventType t, std::string why);
  bool on_device() const;

  RdmaCm& cm_;
  rdma_cm_id* id_;
  rdma_event_channel* ch_;
  std::string peer_name_;
  std::string why_;  // the last failure, for messages
  bool has_pending_ = false;
  CmEvent pending_;
  // The REQ to send once the route is known.
  uint32_t local_qp_num_ = 0;
  uint8_t req_pd_[kCmPrivateDataMax] = {};
  uint8_t req_pd_len_ = 0;
  // Passive: what the request allows (our perspective: READs we may issue, READs we answer).
  uint8_t peer_initiator_depth_ = 0, peer_responder_resources_ = 0;
  uint8_t initiator_depth_ = 0, responder_resources_ = 0;  // granted in accept()
};

class RdmaCmListener final : public CmListener {
 public:
  RdmaCmListener(RdmaCm& cm, rdma_cm_id* id, rdma_event_channel* ch) : cm_(cm), id_(id), ch_(ch) {}
  ~RdmaCmListener() override {
    rdma_destroy_id(id_);
    rdma_destroy_event_channel(ch_);
  }
  std::unique_ptr<CmId> get_request() override;
  uint16_t port() const override { return ntohs(rdma_get_src_port(id_)); }

 private:
  RdmaCm& cm_;
  rdma_cm_id* id_;
  rdma_event_channel* ch_;
};

class RdmaCm final : public ConnectionManager {
 public:
  RdmaCm(verbs::Context& ctx, ibv_context* verbs, const QpTiming& t)
      : ctx_(ctx), verbs_(verbs), timing_(t) {}

  Result<std::unique_ptr<CmId>> connect(const std::string& address, const std::string& port,
                                        const CmQpInfo& local, const void* pd,
                                        std::size_t len) override {
    if (len > kCmPrivateDataMax) return make_error(EINVAL, "CM private data: 56 bytes at most");
    sockaddr_storage dst{};
    std::string err;
    if (!resolve(address, port, AF_UNSPEC, &dst, &err)) return make_error(EINVAL, err);
    rdma_event_channel* ch = open_channel(&err);
    if (ch == nullptr) return make_error(ENODEV, err);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
      err = errno_text("rdma_create_id");
      rdma_destroy_event_channel(ch);
      return make_error(ENODEV, err);
    }
    auto cid = std::make_unique<RdmaCmId>(*this, id, ch, CmId::State::kConnecting);
    if (err = cid->start_connect(reinterpret_cast<sockaddr*>(&dst), local, pd, len); !err.empty())
      return make_error(EHOSTUNREACH, address + ":" + port + ": " + err);
    return std::unique_ptr<CmId>(std::move(cid));
  }

  Result<std::unique_ptr<CmListener>> listen(const std::string& adrfam, const std::string& address,
                                             const std::string& port) override {
    sockaddr_storage src{};
    std::string err;
    const int family = adrfam == "ipv6" ? AF_INET6 : AF_INET;
    if (!resolve(address, port, family, &src, &err)) return make_error(EINVAL, err);
    rdma_event_channel* ch = open_channel(&err);
    if (ch == nullptr) return make_error(ENODEV, err);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
      err = errno_text("rdma_create_id");
      rdma_destroy_event_channel(ch);
      return make_error(ENODEV, err);
    }
    auto l = std::make_unique<RdmaCmListener>(*this, id, ch);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&src)) != 0)
      return make_error(EADDRNOTAVAIL, errno_text("rdma_bind_addr"));
    // A specific address belongs to one RDMA device: it must be ours.
    if (id->verbs != nullptr && id->verbs->device != verbs_->device)
      return make_error(EADDRNOTAVAIL, address + " is on RDMA device " +
                                           ibv_get_device_name(id->verbs->device) + ", not " +
                                           ibv_get_device_name(verbs_->device));
    if (rdma_listen(id, kBacklog) != 0) return make_error(EADDRINUSE, errno_text("rdma_listen"));
    return std::unique_ptr<CmListener>(std::move(l));
  }

  uint64_t now_ns() const override { return steady_ns(); }
  const char* kind() const override { return "rdma_cm"; }

  const QpTiming& timing() const { return timing_; }
  ibv_context* verbs() const { return verbs_; }
  const verbs::DeviceAttr& attr() const { return ctx_.attr(); }

 private:
  verbs::Context& ctx_;
  ibv_context* verbs_;
  QpTiming timing_;
};

// ---------------------------------------------------------------------- the id ---

bool RdmaCmId::on_device() const {
  return id_->verbs != nullptr && id_->verbs->device == cm_.verbs()->device;
}

CmEvent RdmaCmId::closed(CmEventType t, std::string why) {
  state_ = State::kClosed;
  why_ = std::move(why);
  CmEvent e;
  e.type = t;
  return e;
}

std::string RdmaCmId::start_connect(const sockaddr* dst, const CmQpInfo& local, const void* pd,
                                    std::size_t len) {
  local_qp_num_ = local.qp_num;
  req_pd_len_ = static_cast<uint8_t>(len);
  if (len > 0) std::memcpy(req_pd_, pd, len);
  peer_name_ = address_text(dst);
  if (rdma_resolve_addr(id_, nullptr, const_cast<sockaddr*>(dst), kResolveTimeoutMs) != 0)
    return errno_text("rdma_resolve_addr");
  return "";
}

void RdmaCmId::set_request(const rdma_cm_event& e) {
  const rdma_conn_param& c = e.param.conn;
  pending_ = CmEvent{};
  pending_.type = CmEventType::kConnectRequest;
  pending_.peer.qp_num = c.qp_num;
  pending_.private_data_len =
      static_cast<uint8_t>(std::min<std::size_t>(c.private_data_len, kCmPrivateDataMax));
  if (c.private_data != nullptr && pending_.private_data_len > 0)
    std::memcpy(pending_.private_data, c.private_data, pending_.private_data_len);
  peer_ = pending_.peer;
  peer_initiator_depth_ = c.initiator_depth;
  peer_responder_resources_ = c.responder_resources;
  has_pending_ = true;
  peer_name_ = address_text(rdma_get_peer_addr(id_));
  state_ = State::kRequested;
}

CmEvent RdmaCmId::poll() {
  if (has_pending_) {
    has_pending_ = false;
    return pending_;
  }
  if (state_ == State::kClosed || ch_ == nullptr) return CmEvent{};
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch_, &ev) != 0) return CmEvent{};  // EAGAIN: nothing yet
    // Copy out what is needed, acknowledge at once: rdma_destroy_id waits for every ack.
    const rdma_cm_event_type type = ev->event;
    const int status = ev->status;
    CmEvent e;
    const rdma_conn_param& c = ev->param.conn;
    e.peer.qp_num = c.qp_num;
    e.private_data_len =
        static_cast<uint8_t>(std::min<std::size_t>(c.private_data_len, kCmPrivateDataMax));
    if (c.private_data != nullptr && e.private_data_len > 0)
      std::memcpy(e.private_data, c.private_data, e.private_data_len);
    rdma_ack_cm_event(ev);
    const std::string what = std::string(rdma_event_str(type)) +
                             (status != 0 ? " (status " + std::to_string(status) + ")" : "");
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id_, kResolveTimeoutMs) != 0)
          return closed(CmEventType::kUnreachable, errno_text("rdma_resolve_route"));
        continue;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (!on_device())
          return closed(CmEventType::kUnreachable,
                        std::string("the route to ") + peer_name_ + " leaves by RDMA device " +
                            (id_->verbs ? ibv_get_device_name(id_->verbs->device) : "?") +
                            ", not " + ibv_get_device_name(cm_.verbs()->device));
        rdma_conn_param p{};
        p.private_data = req_pd_;
        p.private_data_len = req_pd_len_;
        const QpTiming& t = cm_.timing();
        p.responder_resources = std::min(t.max_dest_rd_atomic, cm_.attr().max_qp_rd_atom);
        p.initiator_depth = std::min(t.max_rd_atomic, cm_.attr().max_qp_init_rd_atom);
        p.flow_control = 1;
        p.retry_count = std::min<uint8_t>(t.retry_cnt, 7);
        p.rnr_retry_count = std::min<uint8_t>(t.rnr_retry, 7);
        p.qp_num = local_qp_num_;
        if (rdma_connect(id_, &p) != 0)
          return closed(CmEventType::kUnreachable, errno_text("rdma_connect"));
        continue;
      }
      case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (state_ != State::kConnecting) break;
        state_ = State::kResponded;
        peer_ = e.peer;
        e.type = CmEventType::kConnectResponse;
        return e;
      case RDMA_CM_EVENT_REJECTED:
        if (status == kRejConsumerDefined) {  // the peer's answer, its private data with it
          state_ = State::kClosed;
          why_ = "rejected";
          e.type = CmEventType::kRejected;
          return e;
        }
        return closed(CmEventType::kUnreachable, what);  // e.g. nobody listens there
      case RDMA_CM_EVENT_ESTABLISHED:
        if (state_ != State::kResponded) break;
        state_ = State::kEstablished;
        e.type = CmEventType::kEstablished;
        return e;
      case RDMA_CM_EVENT_ADDR_ERROR:
      case RDMA_CM_EVENT_ROUTE_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_CONNECT_ERROR:
        return closed(state_ == State::kEstablished || state_ == State::kResponded
                          ? CmEventType::kDisconnected
                          : CmEventType::kUnreachable,
                      what);
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        return closed(CmEventType::kDisconnected, what);
      default:  // TIMEWAIT_EXIT, ADDR_CHANGE and the rest: nothing for the owner
        continue;
    }
    // An event out of sequence: the connection cannot go on.
    return closed(CmEventType::kDisconnected, what + " out of sequence");
  }
}

int RdmaCmId::ready_qp(verbs::Qp& qp, const CmEvent&, uint32_t, const QpTiming& t) {
  ibv_qp* q = pollux::rdma::ibverbs_qp(qp);
  if (q == nullptr) return -EINVAL;  // rdma_cm connects libibverbs QPs only
  const bool passive = state_ == State::kRequested;
  if (passive) {
    // What we grant: READs we issue (bounded by what the peer answers), READs we answer.
    initiator_depth_ =
        std::min({t.max_rd_atomic, cm_.attr().max_qp_init_rd_atom, peer_initiator_depth_});
    responder_resources_ =
        std::min({t.max_dest_rd_atomic, cm_.attr().max_qp_rd_atom, peer_responder_resources_});
  }
  for (const ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = s;
    if (rdma_init_qp_attr(id_, &a, &mask) != 0) return errno != 0 ? -errno : -EINVAL;
    // Before accept the kernel still has the request's values: ours are what we grant.
    if (passive && s == IBV_QPS_RTR) a.max_dest_rd_atomic = responder_resources_;
    if (passive && s == IBV_QPS_RTS) a.max_rd_atomic = initiator_depth_;
    if (const int rc = ibv_modify_qp(q, &a, mask); rc != 0) return -rc;
  }
  return 0;
}

int RdmaCmId::accept(const CmQpInfo& local, const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  rdma_conn_param p{};
  p.private_data = pd;
  p.private_data_len = static_cast<uint8_t>(len);
  p.initiator_depth = initiator_depth_;
  p.responder_resources = responder_resources_;
  p.rnr_retry_count = std::min<uint8_t>(cm_.timing().rnr_retry, 7);
  p.qp_num = local.qp_num;
  if (rdma_accept(id_, &p) != 0) {
    why_ = errno_text("rdma_accept");
    return errno != 0 ? -errno : -EIO;
  }
  state_ = State::kResponded;
  return 0;
}

int RdmaCmId::reject(const void* pd, std::size_t len) {
  if (state_ != State::kRequested || len > kCmPrivateDataMax) return -EINVAL;
  const int rc = rdma_reject(id_, pd, static_cast<uint8_t>(len));
  state_ = State::kClosed;
  return rc == 0 ? 0 : (errno != 0 ? -errno : -EIO);
}

int RdmaCmId::establish() {
  if (state_ != State::kResponded) return -EINVAL;
  if (rdma_establish(id_) != 0) {
    why_ = errno_text("rdma_establish");
    return errno != 0 ? -errno : -EIO;
  }
  state_ = State::kEstablished;
  return 0;
}

void RdmaCmId::disconnect() {
  if (state_ == State::kResponded || state_ == State::kEstablished)
    (void)rdma_disconnect(id_);  // a DREQ; the QP is its owner's to move to error
  state_ = State::kClosed;
}

void RdmaCmId::wait(uint64_t deadline_ns) {
  if (has_pending_ || ch_ == nullptr) return;
  const uint64_t now = steady_ns();
  if (now >= deadline_ns) return;
  pollfd p{ch_->fd, POLLIN, 0};
  const uint64_t ms = std::min<uint64_t>((deadline_ns - now + 999'999) / 1'000'000, 1000);
  (void)::poll(&p, 1, static_cast<int>(ms));
}

// ---------------------------------------------------------------------- the listener ---

std::unique_ptr<CmId> RdmaCmListener::get_request() {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch_, &ev) != 0) return nullptr;  // EAGAIN: none
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);  // the listener's own (address change, device removal)
      continue;
    }
    rdma_cm_id* child = ev->id;
    const rdma_cm_event copy = *ev;  // param.conn.private_data stays valid until the ack
    auto id = std::make_unique<RdmaCmId>(cm_, child, nullptr, CmId::State::kAwaitingReq);
    id->set_request(copy);
    rdma_ack_cm_event(ev);
    std::string err;
    const bool ours = child->verbs != nullptr && child->verbs->device == cm_.verbs()->device;
    rdma_event_channel* ch = ours ? open_channel(&err) : nullptr;
    if (ch == nullptr || rdma_migrate_id(child, ch) != 0) {
      // Not on our device, or no channel for it: refused (no private data: not NVMe's answer).
      if (ch != nullptr) rdma_destroy_event_channel(ch);
      (void)rdma_reject(child, nullptr, 0);
      continue;  // the id is destroyed with `id`
    }
    id->set_channel(ch);  // the connection's own: its owner's thread polls its events alone
    return id;
  }
}

}  // namespace

Result<std::unique_ptr<ConnectionManager>> make_rdma_cm(verbs::Context& ctx, const QpTiming& t) {
  ibv_context* v = pollux::rdma::ibverbs_context(ctx);
  if (v == nullptr) return make_error(EINVAL, "rdma_cm needs a libibverbs device");
  return std::unique_ptr<ConnectionManager>(new RdmaCm(ctx, v, t));
}

}  // namespace pollux::fabric::rdma
