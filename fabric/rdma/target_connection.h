// One NVMe/RDMA queue pair on the target side: an RC QP on its poll group's CQ, set up by a
// CM exchange (cm.h) and owned by the group's thread. Command capsules arrive as RDMA SENDs
// into receive buffers of one capsule each (the 64-byte SQE and up to in_capsule_data_size
// bytes); data described by a Keyed SGL Data Block is fetched with RDMA READ before a
// host-to-controller command runs, and written with RDMA WRITE before the response capsule
// (a 16-byte SEND) of a controller-to-host command. In-capsule data (Data Block, offset
// subtype) runs from the receive buffer itself.
//
// Hot path: requests, receive and response buffers are allocated when the queue is accepted;
// data buffers come from the transport's pool through the group's cache. Posting is a WQE and
// a doorbell; no lock, no allocation, no system call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/rdma/verbs.h"
#include "fabric/rdma/cm.h"
#include "fabric/target/qpair.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma {

class RdmaTargetGroup;
class RdmaTargetTransport;
class RdmaConnection;

// A work request's owner and kind, in wr_id: the pointer's low 3 bits carry the kind. The drain
// marker's owner is the RdmaConnection itself.
enum class WrKind : uint8_t { kRecv = 0, kRead = 1, kWrite = 2, kSend = 3, kDrainSend = 4 };
inline uint64_t make_wr_id(const void* p, WrKind k) {
  return reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(k);
}
inline WrKind wr_kind(uint64_t wr_id) {
  return static_cast<WrKind>(wr_id & 7);
}
template <typename T>
T* wr_owner(uint64_t wr_id) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(wr_id & ~uint64_t{7}));
}

struct alignas(8) RecvSlot {
  RdmaConnection* conn = nullptr;  // a shared slot's: the connection whose QP took it
  uint8_t* buf = nullptr;
  uint32_t byte_len = 0;     // of the capsule it holds
  RecvSlot* next = nullptr;  // the backlog: capsules waiting for a free request
  bool shared = false;       // the poll group's SRQ's (else its connection's own)
};

// An NVMe/RDMA command capsule's header (the SQE); receive buffers hold it and the in-capsule
// data, 64-byte aligned.
inline constexpr uint32_t kCapsuleHeader = spec::nvme_rdma::kCommandCapsuleHeader;
inline std::size_t capsule_stride(uint32_t in_capsule_data_size) {
  return (kCapsuleHeader + in_capsule_data_size + 63) / 64 * 64;
}

// Keyed SGL Data Blocks a command may carry (MSDBD): one in SGL1, or a Last Segment in the
// capsule listing up to this many. Each costs a send WQE, and a QP in error flushes every WQE
// into the group's CQ, which must have room for them all: hence few.
inline constexpr uint32_t kMaxKeyedSgls = 4;

struct alignas(8) RdmaRequest : target::Request {
  enum class State : uint8_t { kFree, kNeedBuffer, kReading, kCore, kSending };
  RdmaConnection* conn = nullptr;
  State state = State::kFree;
  uint16_t index = 0;
  bool pool_buffer = false;
  RecvSlot* capsule = nullptr;  // held while its in-capsule data is in use
  uint8_t* rsp_buf = nullptr;   // 16 bytes in the connection's registered region
  uint32_t nsgl = 0;            // the host's buffers, in data order
  struct Keyed {
    uint64_t addr;
    uint32_t length, rkey;
  } sgl[kMaxKeyedSgls];
};

class alignas(8) RdmaConnection final : public target::Qpair {
 public:
  RdmaConnection(RdmaTargetGroup& group, std::unique_ptr<CmId> cm, target::ListenAddress listen);
  ~RdmaConnection() override;

  // The group's thread, once: validates the connect request's private data, sets the QP and
  // buffers up and accepts, or rejects with the status the specification names. false:
  // rejected (the group deletes it, or, if it is closing() — work requests were posted —
  // keeps it until they have drained).
  bool open(const CmEvent& request);

  // ---- target::Qpair
  void complete(target::Request& r) override;
  void disconnect() override;
  bool prepare(uint16_t qid, uint32_t entries) override;
  const target::ListenAddress& listen_address() const override { return listen_; }
  std::string peer() const override { return peer_; }

  // ---- the group's poll loop
  void on_completion(const verbs::WorkCompletion& wc);
  void poll_cm();  // the RTU, a DREQ or the stream's end
  void buffer_ready(RdmaRequest& r, void* buf);
  // Closing, nothing with the core and nothing more of its QP to come into the group's CQ: the
  // group may finalize and delete it. A destroyed QP's completions can stay in the CQ on real
  // devices, so the QP goes only once drained: the send queue by a marker posted behind
  // everything in ERR (send queues flush in order, with completions, everywhere); the receive
  // queue by counting its flushed receives — Linux 6.1's rxe drops a receive queue in ERR
  // without completions (later kernels flush it), so those are waited for 50 ms at most after
  // the send queue has drained.
  bool finished() const;
  void on_drain_marker();
  bool closing() const { return closing_; }
  void finalize();
  uint32_t cq_entries() const { return cq_reserved_; }

  struct Stats {
    uint64_t capsules = 0, reads = 0, writes = 0, sends = 0, error_completions = 0;
    uint64_t bad_capsules = 0, backlogged = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  uint16_t validate(const CmEvent& request, uint16_t* qid, uint32_t* entries) const;
  void reject(uint16_t sts);
  void on_recv(RecvSlot& slot);
  void start(RdmaRequest& r, RecvSlot& slot);
  // A Last Segment descriptor in the capsule: its keyed descriptors into r.sgl. 0 or the
  // status to fail the command with.
  uint16_t take_segment(RdmaRequest& r, const RecvSlot& slot);
  void fail_command(RdmaRequest& r, uint16_t status);
  void need_buffer(RdmaRequest& r);
  void post_read(RdmaRequest& r);
  void to_core(RdmaRequest& r);
  void post_recv(RecvSlot& slot);
  void release(RdmaRequest& r);
  void begin_close(const char* why);

  RdmaTargetGroup& tg_;
  RdmaTargetTransport& transport_;
  std::unique_ptr<CmId> cm_;
  target::ListenAddress listen_;
  std::string peer_;
  uint16_t cm_qid_ = 0;
  uint32_t icd_size_ = 0;
  uint32_t cq_reserved_ = 0;
  bool closing_ = false;
  bool send_drained_ = false;    // the drain marker (a SEND posted in ERR) completed
  uint64_t drain_deadline_ = 0;  // clock ticks: receives not flushed by then never will be
  uint32_t recvs_posted_ = 0;    // receive WRs posted and not completed
  uint32_t in_core_ = 0;         // requests the core holds

  std::unique_ptr<verbs::Qp> qp_;
  std::unique_ptr<env::DmaRegion> region_;  // receive buffers, then response buffers
  std::unique_ptr<verbs::Mr> mr_;
  std::vector<RdmaRequest> reqs_;
  std::vector<uint16_t> free_;
  std::vector<RecvSlot> slots_;
  RecvSlot* backlog_head_ = nullptr;
  RecvSlot* backlog_tail_ = nullptr;
  Stats stats_;
};

}  // namespace pollux::fabric::rdma
