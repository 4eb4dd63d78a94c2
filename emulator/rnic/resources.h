// The NIC's internal state for each resource the driver creates with a command: protection
// domains, memory regions, completion and event queues, shared receive queues and queue
// pairs (the requester's in-flight operations and the responder's message in progress).
#pragma once

#include <cstddef>
#include <cstdint>

#include "emulator/timing/ring.h"
#include "spec/rnic.h"
#include "spec/roce.h"

namespace pollux::emu::rnic {

namespace sr = spec::rnic;

struct Pd {
  bool valid = false;
  uint32_t mr_count = 0;
  uint32_t qp_count = 0;
  uint32_t srq_count = 0;
};

struct Mr {
  bool valid = false;
  uint8_t tag = 0;  // low byte of the key: a stale key of a re-used slot is refused
  uint32_t pdn = 0;
  uint32_t access = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  uint64_t iova = 0;
  bool contains(uint64_t addr, uint64_t len) const {
    return addr >= va && len <= length && addr - va <= length - len;
  }
};

// A ring in host memory the device produces into (CQ, EQ) with a phase bit.
struct ProducerRing {
  uint64_t iova = 0;
  uint32_t log_size = 0;
  uint32_t produced = 0;  // free-running count
  uint32_t size() const { return 1u << log_size; }
};

struct Cq {
  bool valid = false;
  ProducerRing ring;
  bool overflowed = false;  // CQ error: no more entries are written
  uint32_t qp_count = 0;
};

struct Srq {
  bool valid = false;
  uint32_t pdn = 0;
  uint64_t iova = 0;
  uint32_t log_size = 0;
  uint32_t consumed = 0;  // the device's count; the producer count is the doorbell
  uint32_t qp_count = 0;
};

// The kind of multi-packet message a responder is in the middle of.
enum class Incoming : uint8_t { kNone, kSend, kWrite };

// A fetched send WQE as the requester tracks it until it completes.
struct SendOp {
  sr::SendWqe wqe;
  uint64_t fetched_ns = 0;   // when the requester took it (its completion's latency)
  uint32_t wqe_counter = 0;  // the SQ count of this WQE
  uint32_t length = 0;       // total bytes of its SGEs
  uint32_t first_psn = 0;
  uint32_t npkts = 0;  // request packets, or for a READ the response packets
  bool is_read = false;
  uint64_t ready_ps = 0;  // timed: when the WQE was fetched and checked
  uint32_t last_psn() const { return spec::roce::psn_add(first_psn, npkts - 1); }
};

// What the responder owes its requester, in PSN order: acknowledgements (ACK, NAK) and RDMA
// READ responses, which go out packet by packet as the port has room — an ACK for a later
// request must not overtake a READ's responses, or the requester would take them as lost.
struct Response {
  bool read = false;
  uint8_t syndrome = 0;  // acknowledgement: the AETH syndrome
  uint32_t msn = 0;
  uint32_t psn = 0;      // acknowledgement: its PSN; READ: the first response's
  uint64_t va = 0;       // READ: the range asked for
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint32_t sent = 0;     // READ: response packets sent so far
};

// What one QP did, for metrics (the NIC's RnicCounters are the port's sums). Gone with the QP.
struct QpCounters {
  uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  uint64_t retransmitted_packets = 0, timeouts = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0, seq_naks_sent = 0, duplicate_requests = 0;
  uint64_t error_completions = 0;  // work completions in error, flushes included
  uint64_t errors = 0;             // times the QP entered the Error state
  // Send work requests completed successfully, and their latency from fetch to completion.
  uint64_t messages = 0, latency_ns_sum = 0, latency_ns_max = 0;
};

struct Qp {
  bool valid = false;
  sr::QpState state = sr::QpState::kReset;
  uint32_t pdn = 0;
  uint32_t send_cqn = 0;
  uint32_t recv_cqn = 0;
  uint32_t srqn = sr::kNone;
  uint64_t sq_iova = 0, rq_iova = 0;
  uint32_t log_sq = 0, log_rq = 0;
  sr::QpAttrs attrs{};  // as set by MODIFY_QP

  // ---- requester ----
  uint32_t sq_fetched = 0;  // SQ count up to which WQEs were fetched (or flushed)
  // What a QP keeps in order is in rings that own no memory while empty: a table of kMaxQp
  // QPs is made and reset without allocating (a std::deque allocates on construction: that
  // was most of a NIC's reset).
  timing::Ring<SendOp> ops{0};  // fetched, not yet completed, in order
  uint32_t next_psn = 0;    // PSN the next new WQE gets
  std::size_t tx_op = 0;    // transmit cursor: op index and packet within it
  uint32_t tx_pkt = 0;
  uint32_t una_psn = 0;  // oldest unacknowledged PSN
  uint32_t tx_high = 0;  // one past the highest PSN ever sent (retransmissions are below)
  uint32_t retry_left = 0;
  uint32_t rnr_retry_left = 0;
  uint64_t ack_deadline = 0;  // retransmission timer (0: off)
  uint64_t rnr_deadline = 0;  // RNR wait (0: not waiting)

  // ---- responder ----
  uint32_t rq_consumed = 0;                // RQ count of WQEs taken (own RQ)
  uint32_t epsn = 0;                       // expected PSN
  uint32_t msn = 0;                        // message sequence number (completed messages)
  bool nak_sent = false;                   // a PSN sequence error NAK went out for epsn
  Incoming in_progress = Incoming::kNone;  // a multi-packet message being received
  bool have_rwqe = false;
  sr::RecvWqe rwqe{};
  uint32_t rwqe_counter = 0;
  uint32_t rx_offset = 0;  // bytes of the current message placed so far
  uint64_t write_va = 0;   // current RDMA WRITE: next address, bytes left, key
  uint32_t write_left = 0;
  uint32_t write_rkey = 0;
  uint32_t write_total = 0;
  timing::Ring<Response> responses{0};  // owed, oldest first

  mutable QpCounters counters;  // counted where the NIC's own are (emit() sees a const Qp)
};

}  // namespace pollux::emu::rnic
