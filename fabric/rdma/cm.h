// Connection set-up in the manner of rdma_cm (the RDMA connection manager): a listener, a
// connect request carrying private data, accept (with private data) or reject (with private
// data), established, disconnect — as events the owner polls; nothing calls back, nothing runs
// on another thread.
//
// Real rdma_cm exchanges IB CM MADs (REQ, REP, REJ, RTU, DREQ/DREP) on QP1 of the RDMA port
// itself. Here the same messages travel out of band, over a byte stream of fabric/net's
// Network seam (SimNetwork in virtual time, deterministic under its seed; the kernel's TCP in
// real time), carrying what REQ and REP carry: the sender's QP number, its port address and
// its starting PSN, and up to 56 bytes of private data (rdma_cm's limit for a REQ over IB).
// The owner moves its QP through INIT/RTR/RTS itself with what the peer sent (connect_qp()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "driver/env/result.h"
#include "driver/rdma/verbs.h"
#include "fabric/net/socket.h"

namespace pollux::fabric::rdma {

namespace verbs = pollux::rdma;

inline constexpr std::size_t kCmPrivateDataMax = 56;

// What a REQ or REP says about its sender's queue pair.
struct CmQpInfo {
  uint32_t qp_num = 0;
  uint64_t port_address = 0;
  uint32_t start_psn = 0;  // 24 bits: the PSN of the sender's first request packet
};

enum class CmEventType : uint8_t {
  kNone,
  kConnectRequest,   // passive: a REQ arrived (peer, private data): accept() or reject()
  kConnectResponse,  // active: a REP arrived (peer, private data): ready the QP, establish()
  kRejected,         // active: a REJ (private data)
  kEstablished,      // passive: the RTU arrived
  kUnreachable,      // active: no connection, or it ended before any answer
  kDisconnected,     // a DREQ arrived, or the stream ended after set-up
};
const char* to_string(CmEventType t);

struct CmEvent {
  CmEventType type = CmEventType::kNone;
  CmQpInfo peer;
  uint8_t private_data[kCmPrivateDataMax] = {};
  uint8_t private_data_len = 0;
};

class CmId {
 public:
  enum class State : uint8_t {
    kConnecting,   // active: the stream is being set up, then REQ sent
    kAwaitingReq,  // passive: accepted from the listener, no REQ yet
    kRequested,    // passive: REQ in, no answer yet
    kResponded,    // active: REP in, RTU not sent yet / passive: REP sent, waiting for RTU
    kEstablished,
    kClosed,  // rejected, unreachable, disconnected
  };

  // Active side: starts connecting to address:port and sends REQ once connected (set-up path;
  // poll() drives it). private data: up to kCmPrivateDataMax bytes.
  static Result<std::unique_ptr<CmId>> connect(net::Network& net, const std::string& address,
                                               const std::string& port, const CmQpInfo& local,
                                               const void* private_data, std::size_t len);
  ~CmId();
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;

  // Sends what is queued, reads what arrived: the next event, or kNone.
  CmEvent poll();
  // Passive, after kConnectRequest: REP with our QP and private data. 0 or -EINVAL (state).
  int accept(const CmQpInfo& local, const void* private_data, std::size_t len);
  // Passive, after kConnectRequest: REJ with private data; the id is closed after it is sent.
  int reject(const void* private_data, std::size_t len);
  // Active, after kConnectResponse (the QP is ready): RTU; established.
  int establish();
  // DREQ (if set up), then the stream closes; the peer sees kDisconnected. Idempotent.
  void disconnect();

  State state() const { return state_; }
  const CmQpInfo& peer() const { return peer_; }
  std::string peer_name() const { return sock_ ? sock_->peer() : ""; }
  net::Socket* socket() const { return sock_.get(); }

 private:
  friend class CmListener;
  CmId(std::unique_ptr<net::Socket> s, State st) : sock_(std::move(s)), state_(st) {}
  struct Message;
  void queue(uint8_t type, const CmQpInfo& info, const void* pd, std::size_t len);
  bool flush();  // false: the stream broke
  CmEvent closed(CmEventType t);

  std::unique_ptr<net::Socket> sock_;
  State state_;
  CmQpInfo peer_;
  bool close_after_send_ = false;
  uint8_t out_[2 * 80] = {};
  std::size_t out_len_ = 0;
  uint8_t in_[80] = {};
  std::size_t in_len_ = 0;
};

class CmListener {
 public:
  static Result<std::unique_ptr<CmListener>> listen(net::Network& net, const std::string& adrfam,
                                                    const std::string& address,
                                                    const std::string& port);
  // A new connection (its REQ arrives as its first event, kConnectRequest), or nullptr.
  std::unique_ptr<CmId> get_request();
  uint16_t port() const { return listener_->port(); }

 private:
  explicit CmListener(std::unique_ptr<net::Listener> l) : listener_(std::move(l)) {}
  std::unique_ptr<net::Listener> listener_;
};

// Timing of the QP a CM exchange sets up (verbs' attributes; see driver/rdma/verbs.h).
struct QpTiming {
  verbs::Mtu mtu = verbs::Mtu::k1024;
  uint8_t timeout = 14;  // local ACK timeout 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;       // forever
  uint8_t min_rnr_timer = 1;   // 10 us
  uint8_t max_rd_atomic = 16;  // RDMA READs in flight as requester
  uint8_t max_dest_rd_atomic = 16;
};

// RESET -> INIT -> RTR -> RTS against the peer a CM event named; sq_psn is what our REQ/REP
// said. 0 or a negative errno.
int connect_qp(verbs::Qp& qp, const CmQpInfo& peer, uint32_t our_start_psn, const QpTiming& t);

}  // namespace pollux::fabric::rdma
