// One NVMe/TCP connection on the target side: a queue pair of the target's core, owned by one
// poll group's thread. PDUs in: ICReq, CapsuleCmd (in-capsule data up to the queue's capsule
// size), H2CData (answering our R2Ts), H2CTermReq. PDUs out: ICResp, R2T, C2HData (SUCCESS
// flag when the queue has SQ flow control off), CapsuleResp, C2HTermReq on a protocol error
// (then the connection closes).
//
// Hot path: requests, their PDU headers and their in-capsule buffers are preallocated when the
// queue connects; data buffers of larger commands come from the transport's DmaBufferPool
// through the group's cache. Receiving is recv (or readv straight into a data buffer) per
// socket readiness; sending is one send (sendmsg) per poll for everything queued, corked when
// the batch is big (see flush()). No lock, no allocation, no exception.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "fabric/net/socket.h"
#include "fabric/target/qpair.h"
#include "spec/nvme_tcp.h"

namespace pollux::fabric::tcp {

class TcpTargetGroup;
class TcpTargetTransport;

struct TcpRequest : target::Request {
  enum class State : uint8_t {
    kFree,
    kCapsuleData,  // receiving in-capsule data
    kNeedBuffer,   // waiting for a data buffer from the pool
    kH2c,          // R2Ts sent, receiving H2CData
    kCore,         // with the core (executing)
    kSending,      // its response is queued: freed once sent
  };
  static constexpr uint32_t kMaxR2t = 4;  // R2Ts outstanding per command at most
  State state = State::kFree;
  uint16_t index = 0;
  bool pool_buffer = false;      // data is a pool buffer (else the in-capsule buffer)
  bool transport_error = false;  // a data digest did not match: Transient Transport Error
  uint32_t h2c_received = 0;     // bytes of write data in
  uint32_t r2t_next = 0;         // offset of the next R2T to send
  uint32_t r2t_active = 0;       // R2Ts sent whose data has not all come
  struct R2tRange {
    uint32_t next = 0, end = 0;
    bool active = false;
  } r2t[kMaxR2t];
  uint8_t* icd = nullptr;  // this request's in-capsule buffer
  TcpRequest* wait_next = nullptr;
  // PDU headers it sends (with digest and padding room).
  alignas(8) uint8_t c2h_hdr[spec::nvme_tcp::kMaxHlen + 8];
  alignas(8) uint8_t resp_hdr[spec::nvme_tcp::kCapsuleRespHlen + 4];
  alignas(8) uint8_t r2t_hdr[kMaxR2t][spec::nvme_tcp::kR2tHlen + 4];
  uint32_t ddgst = 0;
};

class TcpConnection final : public target::Qpair {
 public:
  TcpConnection(TcpTargetGroup& group, std::unique_ptr<net::Socket> socket,
                target::ListenAddress listen);
  ~TcpConnection() override;

  // ---- target::Qpair
  void complete(target::Request& r) override;
  void disconnect() override;
  bool prepare(uint16_t qid, uint32_t entries) override;
  const target::ListenAddress& listen_address() const override { return listen_; }
  std::string peer() const override { return peer_; }

  // ---- the group's poll loop
  net::Socket& socket() const { return *sock_; }
  // Reads and parses what the socket has (and what was left in the receive buffer).
  void on_readable();
  // Sends what is queued (one sendmsg, more while it all goes). A batch of at least
  // kCorkBytes goes with send_more(): its partly filled last segment waits for the next
  // batch rather than leaving as a segment of its own. Returns whether anything moved (bytes
  // sent, or the stream dropped): a host that does not read makes no work for the poll.
  bool flush();
  bool wants_flush() const { return item_count_ > 0; }
  // The end of the group's poll: what send_more() held back leaves now unless this poll added
  // to it — held bytes wait one poll at most.
  void end_poll();
  static constexpr std::size_t kCorkBytes = 64 * 1024;  // TSO's (and loopback's) segment
  bool wants_resume() const { return rx_pos_ < rx_end_; }
  // Closing and nothing left with the core: the group may delete it (after qpair_closed).
  // Closing and nothing left with the core: the group may delete it (after qpair_closed).
  // After a C2HTermReq, once the host has read it: its close, or the linger time.
  bool finished() const { return closing_ && in_core_ == 0 && !lingering(); }
  bool closing() const { return closing_; }
  void finalize();
  // A pool buffer for a request that waited for one.
  void buffer_ready(TcpRequest& r, void* buf);

  struct Stats {
    uint64_t pdus_in = 0, pdus_out = 0, term_reqs_sent = 0, digest_errors = 0, buffer_waits = 0;
    uint64_t corked_sends = 0, pushes = 0;  // send_more() calls; push() after a quiet poll
  };
  const Stats& stats() const { return stats_; }

 private:
  enum class Rx : uint8_t { kHeader, kPad, kData, kDigest };
  enum class Conn : uint8_t { kAwaitIcReq, kRunning };

  // Receive.
  bool parse();  // false: stop (closing)
  bool on_common_header();
  bool on_header();
  bool on_icreq();
  bool on_capsule();
  bool on_h2c_data();
  void on_pdu_end();
  void data_in(const uint8_t* p, uint32_t n);
  // Requests.
  TcpRequest* take_request();
  TcpRequest* request_at(uint16_t index);
  void need_data_buffer(TcpRequest& r);
  void start_h2c(TcpRequest& r);
  void send_r2ts(TcpRequest& r);
  void to_core(TcpRequest& r);
  void release(TcpRequest& r);
  // Send.
  void push(const void* base, std::size_t len, int release = -1);
  void queue_c2h(TcpRequest& r, bool success_flag);
  void queue_resp(TcpRequest& r);
  // Errors: a C2HTermReq naming the fault, then the connection closes.
  bool fatal(uint16_t fes, uint32_t fei);
  void begin_close(bool socket_dead);

  TcpTargetGroup& tg_;
  TcpTargetTransport& transport_;
  std::unique_ptr<net::Socket> sock_;
  target::ListenAddress listen_;
  std::string peer_;
  Conn conn_ = Conn::kAwaitIcReq;
  bool closing_ = false;
  bool socket_dead_ = false;
  // A C2HTermReq ends the connection gracefully: sent whole (waiting for the host's window),
  // then FIN (shutdown SHUT_WR), then what the host still sends is read and dropped until it
  // closes — closing with its bytes unread would reset the connection and could take the
  // C2HTermReq with it. Bounded by kTermLingerMs.
  bool terminating_ = false;
  bool write_shut_ = false;
  uint64_t linger_until_ = 0;  // clock ticks
  bool lingering() const;
  void drain_after_term();
  bool hd_ = false, dd_ = false;  // digests in force
  uint8_t hpda_ = 0;              // the host's alignment for C2H data
  uint32_t maxr2t_ = 1;           // R2Ts outstanding per command (the host's MAXR2T + 1)
  uint32_t in_core_ = 0;          // requests not free (with the core, or waiting to send)

  // Requests: boot_ serves capsules until the queue is sized by Connect.
  static constexpr uint16_t kBootIndex = 16383;
  TcpRequest boot_;
  std::vector<uint8_t> boot_icd_;
  std::vector<TcpRequest> reqs_;
  std::vector<uint16_t> free_;
  std::unique_ptr<env::DmaRegion> icd_region_;
  uint32_t icd_size_ = 0;  // in-capsule data a capsule on this queue may carry

  // Receive state.
  std::vector<uint8_t> rx_;
  uint32_t rx_pos_ = 0, rx_end_ = 0;
  Rx stage_ = Rx::kHeader;
  alignas(8) uint8_t hdr_[spec::nvme_tcp::kMaxHlen + spec::nvme_tcp::kDigestSize];
  uint32_t hdr_have_ = 0, hdr_need_ = spec::nvme_tcp::kCommonHeaderLength;
  uint32_t pad_left_ = 0, data_left_ = 0, digest_have_ = 0;
  uint8_t digest_[4];
  uint32_t data_crc_ = 0;
  uint8_t* data_dst_ = nullptr;
  TcpRequest* data_req_ = nullptr;
  uint8_t pdu_type_ = 0;
  uint8_t pdu_flags_ = 0;
  uint32_t h2c_slot_ = 0;
  uint32_t h2c_len_ = 0;

  // Send stream: a ring of iovecs; `release` names the request whose last byte it is.
  struct Item {
    iovec v;
    int release;
  };
  std::vector<Item> items_;
  uint32_t item_head_ = 0, item_count_ = 0;
  std::size_t queued_bytes_ = 0;
  bool urgent_ = false;  // an R2T, ICResp or C2HTermReq is queued: never held back
  bool corked_ = false;  // the last send was send_more(): the kernel may hold bytes
  bool corked_this_poll_ = false;
  alignas(8) uint8_t icresp_[spec::nvme_tcp::kIcRespHlen];
  alignas(8) uint8_t termreq_[spec::nvme_tcp::kTermReqMaxPlen];
  Stats stats_;
};

}  // namespace pollux::fabric::tcp
