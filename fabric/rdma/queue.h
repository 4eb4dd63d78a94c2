// One NVMe/RDMA queue on the host side: its QP, CQ, CM id, capsule and response buffers and
// the MRs over the caller's memory (see host.h).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/transport.h"
#include "fabric/rdma/host.h"

namespace pollux::fabric::rdma {

class RdmaQueue final : public nvme::QueueTransport {
 public:
  // in_capsule: write data a capsule may carry; max_keyed: keyed descriptors per command.
  RdmaQueue(std::shared_ptr<RdmaTransport::Shared> shared, const nvme::QueueParams& params,
            uint32_t in_capsule, uint32_t max_keyed);
  ~RdmaQueue() override;
  RdmaQueue(const RdmaQueue&) = delete;
  RdmaQueue& operator=(const RdmaQueue&) = delete;

  // The CM exchange and the QP (set-up path, bounded by connect_timeout_ms), waiting on the CM.
  // "" or what failed (a REJECT's status by name).
  std::string open();
  // The same without blocking (the controller's asynchronous reset and queue connects).
  int start_connect() override;
  int poll_connect() override;
  std::string connect_error() const override { return connect_error_; }

  int init_requests(uint32_t n) override;
  int map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
               uint32_t len) override;
  sn::SubmissionEntry* submission_queue() override { return sq_.data(); }
  void flush(uint32_t tail) override;
  int poll(sn::CompletionEntry* out, uint32_t max) override;
  void reset() override;
  void disconnect() override {
    close_qp();
    conn_ = Conn::kIdle;
    broken_.store(true, std::memory_order_release);
  }
  bool reports_sq_head() const override { return false; }
  bool broken() const override { return broken_.load(std::memory_order_acquire); }

  uint32_t controller_receive_queue() const { return crqsize_; }  // CRQSIZE of the ACCEPT
  std::size_t registered_regions() const { return mrs_.size(); }
  static constexpr int kMaxIov = 64;
  static constexpr uint32_t kMaxKeyed = 16;  // descriptors of a Last Segment at most

 private:
  struct Request {
    uint16_t cid = 0;
    bool mapped = false;
    bool in_capsule = false;
    bool sent = false;
    bool bounced_read = false;  // read data lands in the bounce slot: copied out at completion
    uint8_t segment = 0;        // keyed descriptors sent in the capsule (a Last Segment)
    uint32_t len = 0;
    uint32_t iovcnt = 0;
  };
  struct MrEntry {
    uintptr_t base = 0;
    std::size_t length = 0;
    uint64_t iova = 0;  // what the MR maps to: a region re-made at the same address differs
    std::unique_ptr<verbs::Mr> mr;
  };

  Request* request_of(uint16_t cid);
  const verbs::Mr* mr_for(const void* p, std::size_t len);
  int map_segment(Request& r, uint16_t index, sn::SubmissionEntry& cmd, const iovec* v, uint32_t n);
  const verbs::Mr* register_region(const void* p, std::size_t len);  // the rare path
  uint32_t rkey_of(const verbs::Mr& mr);  // the MR's rkey, or a wrong one when injected
  std::string renew_device_objects();     // after a device reset: MRs again
  bool post_recv(uint32_t slot);
  void send_capsules();
  void close_qp();
  std::string begin_qp();            // the QP and the CM's REQ: "" or what failed
  int step_qp(std::string* err);     // -EAGAIN, 0 (established) or -ECONNREFUSED

  std::shared_ptr<RdmaTransport::Shared> shared_;
  nvme::QueueParams params_;
  uint32_t in_capsule_;
  uint32_t max_keyed_;
  std::vector<spec::nvmf::KeyedSglDescriptor> segments_;  // kMaxKeyed per request
  std::atomic<bool> broken_{true};
  RdmaHostFaults* faults_ = nullptr;  // error injection, if the options carry it
  uint32_t device_generation_ = 0;    // of the MRs held
  uint32_t crqsize_ = 0;

  std::unique_ptr<CmId> cm_;
  enum class Conn : uint8_t { kIdle, kConnecting, kDone, kFailed };
  Conn conn_ = Conn::kIdle;
  uint64_t cm_deadline_ = 0;
  uint32_t cm_psn_ = 0;
  std::string connect_error_;
  std::unique_ptr<verbs::Cq> cq_;
  std::unique_ptr<verbs::Qp> qp_;
  std::unique_ptr<env::DmaRegion> region_;  // capsules (one per SQ slot), then responses
  std::unique_ptr<verbs::Mr> region_mr_;
  uint32_t capsule_stride_ = 0;
  std::vector<MrEntry> mrs_;  // the caller's memory, by region
  uint64_t regions_removed_seen_ = 0;
  void drop_stale_mrs();  // the rare path: a region left the registry
  // Small data outside DMA memory (the Connect command's 1 KiB on the caller's stack) goes
  // through a registered slot of the request.
  static constexpr uint32_t kBounceBytes = 1024;
  std::unique_ptr<env::DmaRegion> bounce_;
  std::unique_ptr<verbs::Mr> bounce_mr_;

  uint32_t cid_mask_ = 0;
  std::vector<Request> reqs_;
  std::vector<iovec> iovs_;  // kMaxIov per request
  std::vector<sn::SubmissionEntry> sq_;
  uint32_t produced_ = 0;  // SQ slots up to here have been posted
  uint32_t tail_ = 0;
  // A target that ends the queue says so on the CM stream (DREQ); its QP just goes quiet (what
  // it had acknowledged is never answered). The stream is read only when commands wait and
  // nothing came back for kCmCheckNs — the clock looked at every kClockPolls empty polls —
  // never in the steady state (on the kernel's TCP it is a recv). The admin queue, polled
  // only by the admin poller (every 100s of us, its AERs always waiting), reads it at every
  // empty poll, as SPDK's host processes CM events from its admin poll. The same quiet makes
  // the queue probe its NIC (a register read: was it reset?); the admin queue every 1 ms.
  static constexpr uint32_t kClockPolls = 16;
  static constexpr uint64_t kCmCheckNs = 100'000;
  uint32_t outstanding_ = 0;  // capsules posted whose response has not come
  uint32_t empty_polls_ = 0;
  uint64_t quiet_since_ns_ = 0;  // 0: answers came at the last look
};

}  // namespace pollux::fabric::rdma
