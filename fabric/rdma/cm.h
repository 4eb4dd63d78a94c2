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
// The owner moves its QP through INIT/RTR/RTS with CmId::ready_qp() (here connect_qp(), with what
// the peer sent).
//
// CmId and CmListener are the seam: the ConnectionManager picks the implementation — this
// stream exchange for the Pollux RNIC, librdmacm (rdma_cm.h) for libibverbs devices.
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

class CmId {
 public:
  enum class State : uint8_t {
    kConnecting,   // active: connecting (the stream, or the address and route), then REQ sent
    kAwaitingReq,  // passive: accepted from the listener, no REQ yet
    kRequested,    // passive: REQ in, no answer yet
    kResponded,    // active: REP in, RTU not sent yet / passive: REP sent, waiting for RTU
    kEstablished,
    kClosed,  // rejected, unreachable, disconnected
  };

  // The stream CM (below) as it always was: connect to address:port over `net`, REQ once
  // connected (set-up path; poll() drives it). Private data: up to kCmPrivateDataMax bytes.
  static Result<std::unique_ptr<CmId>> connect(net::Network& net, const std::string& address,
                                               const std::string& port, const CmQpInfo& local,
                                               const void* private_data, std::size_t len);
  virtual ~CmId() = default;
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;

  // Sends what is queued, reads what arrived: the next event, or kNone. Never blocks.
  virtual CmEvent poll() = 0;
  // Passive, after kConnectRequest: REP with our QP and private data. 0 or -EINVAL (state).
  virtual int accept(const CmQpInfo& local, const void* private_data, std::size_t len) = 0;
  // Passive, after kConnectRequest: REJ with private data; the id is closed after it is sent.
  virtual int reject(const void* private_data, std::size_t len) = 0;
  // Active, after kConnectResponse (the QP is ready): RTU; established.
  virtual int establish() = 0;
  // DREQ (if set up), then the id closes; the peer sees kDisconnected. Idempotent.
  virtual void disconnect() = 0;
  // Moves `qp` RESET -> INIT -> RTR -> RTS for the connection `e` describes (the REQ, passive,
  // before accept(); the REP, active, before establish()). our_start_psn: what our REQ/REP
  // said (rdma_cm picks PSNs and the path itself). 0 or a negative errno.
  virtual int ready_qp(verbs::Qp& qp, const CmEvent& e, uint32_t our_start_psn,
                       const QpTiming& t) = 0;
  // Set-up path: blocks until something may have arrived for poll(), or deadline_ns (the
  // ConnectionManager's clock; in virtual time one turn of the network instead).
  virtual void wait(uint64_t deadline_ns) = 0;
  // Who the peer is, for messages ("10.0.0.2:53122").
  virtual std::string peer_name() const = 0;
  // Why the id closed, when the implementation knows more than the event says ("" if not).
  virtual std::string reason() const { return ""; }

  State state() const { return state_; }
  const CmQpInfo& peer() const { return peer_; }

 protected:
  explicit CmId(State st) : state_(st) {}
  State state_;
  CmQpInfo peer_;
};

class CmListener {
 public:
  // The stream CM's listener over `net`.
  static Result<std::unique_ptr<CmListener>> listen(net::Network& net, const std::string& adrfam,
                                                    const std::string& address,
                                                    const std::string& port);
  virtual ~CmListener() = default;
  // A new connection (its REQ arrives as its first event, kConnectRequest), or nullptr.
  virtual std::unique_ptr<CmId> get_request() = 0;
  virtual uint16_t port() const = 0;
};

// The seam: where connections are made. stream_cm() is Pollux's out-of-band exchange (above),
// for the Pollux RNIC; rdma_cm (rdma_cm.h) is librdmacm, for libibverbs devices, and speaks
// to any RDMA peer (the Linux kernel's nvme-rdma and nvmet-rdma, SPDK).
class ConnectionManager {
 public:
  virtual ~ConnectionManager() = default;
  virtual Result<std::unique_ptr<CmId>> connect(const std::string& address, const std::string& port,
                                                const CmQpInfo& local, const void* private_data,
                                                std::size_t len) = 0;
  virtual Result<std::unique_ptr<CmListener>> listen(const std::string& adrfam,
                                                     const std::string& address,
                                                     const std::string& port) = 0;
  // The clock of wait()'s deadlines, in ns.
  virtual uint64_t now_ns() const = 0;
  virtual const char* kind() const = 0;  // "stream" or "rdma_cm"
};

std::unique_ptr<ConnectionManager> stream_cm(net::Network& net);

// RESET -> INIT -> RTR -> RTS against the peer a CM event named; sq_psn is what our REQ/REP
// said. 0 or a negative errno.
int connect_qp(verbs::Qp& qp, const CmQpInfo& peer, uint32_t our_start_psn, const QpTiming& t);

}  // namespace pollux::fabric::rdma
