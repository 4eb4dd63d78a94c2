// One NVMe/TCP queue on the host side: its connection, PDUs out and in (see host.h).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/nvme/transport.h"
#include "fabric/net/socket.h"
#include "fabric/tcp/host.h"

namespace pollux::fabric::tcp {

class TcpQueue final : public nvme::QueueTransport {
 public:
  // `in_capsule` bytes of write data may travel inside the command capsule.
  TcpQueue(std::shared_ptr<Paths> paths, const nvme::QueueParams& params, TcpOptions options,
           uint32_t in_capsule);
  ~TcpQueue() override;
  TcpQueue(const TcpQueue&) = delete;
  TcpQueue& operator=(const TcpQueue&) = delete;

  // Connects on the active path and exchanges ICReq/ICResp (set-up path, bounded by
  // connect_timeout_ms per path), waiting on the socket. The admin queue leads a failover:
  // when the active path does not answer, the others are tried in turn. "" or what failed.
  std::string open();
  // The same without blocking (the controller's asynchronous reset and queue connects).
  int start_connect() override;
  int poll_connect() override;
  std::string connect_error() const override { return connect_error_; }
  void leave_path() override;
  // Not connected (yet): what a queue created without its connection starts as.
  void mark_broken() { broken_.store(true, std::memory_order_release); }

  int init_requests(uint32_t n) override;
  int map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
               uint32_t len) override;
  sn::SubmissionEntry* submission_queue() override { return sq_.data(); }
  void flush(uint32_t tail) override;
  int poll(sn::CompletionEntry* out, uint32_t max) override;
  void reset() override;
  void disconnect() override {
    close_socket();
    hs_ = Handshake::kIdle;
    broken_.store(true, std::memory_order_release);
  }
  bool reports_sq_head() const override { return false; }
  bool broken() const override { return broken_.load(std::memory_order_acquire); }

  // What ICResp settled (for tests and statistics).
  bool header_digest() const { return digests_ & spec::nvme_tcp::dgst::kHdgstEnable; }
  bool data_digest() const { return digests_ & spec::nvme_tcp::dgst::kDdgstEnable; }
  uint32_t max_h2c_data() const { return max_h2c_; }

  static constexpr int kMaxIov = 64;  // data segments per command

 private:
  struct Request {
    uint16_t cid = 0;
    bool mapped = false;      // map_data ran for the command with this CID, not yet completed
    bool to_device = false;   // write direction
    bool in_capsule = false;  // its data goes inside the capsule
    bool sent = false;        // its capsule went into this connection's send stream
    bool digest_error = false;
    uint32_t len = 0;
    uint32_t iovcnt = 0;
    uint32_t received = 0;  // C2H bytes so far (in order)
    // MAXR2T is 0: an R2T is outstanding from its arrival until its last H2CData PDU has been
    // sent, and one read before then (r2t_sent_rx: the recv() count at that moment) was sent
    // by the controller before it could have had the data.
    bool r2t_active = false;
    uint64_t r2t_sent_rx = 0;
    uint16_t ttag = 0;
    uint32_t r2t_next = 0, r2t_end = 0;  // H2C data still to queue for the R2T
  };
  // A piece of the send stream; `release` gives back the PDU's header slot once sent.
  struct Item {
    iovec v;
    bool release;
    bool r2t_last = false;  // the end of an R2T's last H2CData PDU, for command `cid`
    uint16_t cid = 0;
  };
  enum class Rx : uint8_t { kHeader, kPad, kData, kDigest };

  Request* request_of(uint16_t cid);
  iovec* iovs(uint32_t index) { return &iovs_[std::size_t{index} * kMaxIov]; }
  // Send side.
  uint8_t* take_slot();
  bool room_for(uint32_t items) const;
  void push(const void* base, std::size_t len, bool release = false);
  uint32_t push_data(uint32_t index, uint32_t offset, uint32_t len, uint32_t crc_seed,
                     uint32_t* crc);
  uint32_t segments(uint32_t index, uint32_t offset, uint32_t len) const;
  bool produce_capsule(uint32_t slot);
  bool produce_h2c(uint32_t index);
  void produce();
  void send_pending();
  // Receive side.
  bool begin_pdu(sn::CompletionEntry* out, uint32_t* n, uint32_t max);
  bool end_header(sn::CompletionEntry* out, uint32_t* n);
  void end_pdu(sn::CompletionEntry* out, uint32_t* n);
  void copy_in(const uint8_t* p, uint32_t len);
  void fail(uint16_t fes, uint32_t fei);  // protocol error: H2CTermReq, broken
  void close_socket();
  void begin_attempt();
  int attempt_failed(const std::string& why);
  int finish_handshake();

  std::shared_ptr<Paths> paths_;
  nvme::QueueParams params_;
  TcpOptions options_;
  uint32_t in_capsule_;
  std::unique_ptr<net::Socket> sock_;
  std::atomic<bool> broken_{false};
  uint8_t digests_ = 0;  // dgst::k* in force
  uint8_t cpda_ = 0;     // the controller's data alignment
  uint32_t max_h2c_ = 0;
  // The connection's handshake (connect, ICReq out, ICResp in), step by step.
  enum class Handshake : uint8_t { kIdle, kConnecting, kSendIcReq, kRecvIcResp, kDone, kFailed };
  Handshake hs_ = Handshake::kIdle;
  Endpoint hs_endpoint_;
  uint64_t hs_deadline_ = 0;
  std::size_t hs_paths_left_ = 0;
  uint32_t hs_pos_ = 0;
  spec::nvme_tcp::IcReq hs_req_{};
  spec::nvme_tcp::IcResp hs_resp_{};
  std::string hs_error_, connect_error_;

  uint32_t cid_mask_ = 0;
  std::vector<Request> reqs_;
  std::vector<iovec> iovs_;  // kMaxIov per request
  std::vector<sn::SubmissionEntry> sq_;
  uint32_t produced_ = 0;  // SQ slots up to here are queued for sending
  uint32_t tail_ = 0;      // the last flush's SQ tail

  // Send stream: header slots (a PDU's header, digest and padding, and its data digest) and
  // items, both FIFO rings; H2C work for R2Ts in a ring of request indexes.
  static constexpr uint32_t kSlotBytes = 256;
  std::vector<uint8_t> slots_;
  uint32_t slot_count_ = 0, slot_next_ = 0, slots_used_ = 0;
  std::vector<Item> items_;
  uint32_t item_head_ = 0, item_count_ = 0;
  std::vector<uint16_t> r2t_work_;
  uint32_t r2t_head_ = 0, r2t_count_ = 0;

  // Receive: raw bytes, and the PDU being parsed.
  std::vector<uint8_t> rx_;
  uint32_t rx_pos_ = 0, rx_end_ = 0;
  uint64_t rx_count_ = 1;  // recv() calls that brought data (R2Ts order against sends by it)
  Rx stage_ = Rx::kHeader;
  alignas(8) uint8_t hdr_[spec::nvme_tcp::kMaxHlen + spec::nvme_tcp::kDigestSize];
  uint32_t hdr_have_ = 0, hdr_need_ = 0;
  uint32_t pad_left_ = 0, data_left_ = 0, digest_have_ = 0;
  uint8_t digest_[4];
  uint32_t data_crc_ = 0;
  Request* data_req_ = nullptr;
  uint32_t data_pos_ = 0;  // offset in the request's data of the next byte
  uint8_t pdu_flags_ = 0;  // of the C2HData PDU being received
};

}  // namespace pollux::fabric::tcp
