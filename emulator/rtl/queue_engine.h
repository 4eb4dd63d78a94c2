// The controller front end's queue engine, as one clocked block with a C++ reference model and
// a verilated SystemVerilog implementation behind the same interface (see README.md here).
//
// What it does, per NVMe 1.4 §4.13 (arbitration) and §4.1/§4.6 (queues, phase tags):
//  * a doorbell register file: SQ tail and CQ head values per queue, as the host wrote them;
//  * submission-queue arbitration: round robin, or weighted round robin with an urgent class
//    (admin > urgent > WRR of high/medium/low with weights HPW+1/MPW+1/LPW+1, round robin inside
//    each class), with the arbitration burst (up to 2^AB commands from one SQ per turn; AB=7:
//    no limit) — the same rules as Set Features Arbitration (FID 01h) and CC.AMS;
//  * command-fetch requests: one grant (sqid, SQ slot) per cycle when the fetch port is ready,
//    only from an SQ whose CQ has a free slot left (slots are reserved at fetch so a completion
//    never overwrites an entry the host has not consumed);
//  * completion-queue tail/phase tracking: a completion request for a CQ returns the slot it is
//    written to and the phase tag it carries.
//
// Timing contract (identical in both models; the differential test checks it cycle by cycle):
// inputs are sampled at the rising edge of tick(); outputs are registered and change only at an
// edge. Outputs after tick() describe what the block decided at that edge.
#pragma once

#include <cstdint>

namespace pollux::emu::rtl {

inline constexpr unsigned kQueues = 32;  // queue ids 0 (admin) .. 31 (SQ n is bound to a CQ)

enum class Prio : uint8_t { kUrgent = 0, kHigh = 1, kMedium = 2, kLow = 3 };  // Create I/O SQ QPRIO

struct QueueEngineInputs {
  // Queue configuration (Create/Delete I/O SQ/CQ, controller enable), one write per cycle.
  bool cfg_valid = false;
  bool cfg_cq = false;       // false: an SQ, true: a CQ
  uint8_t cfg_qid = 0;       // < kQueues
  bool cfg_enable = false;   // false deletes the queue (its state is cleared)
  uint16_t cfg_size = 0;     // entries - 1 (0's based, as in the Create commands); >= 1
  uint8_t cfg_cqid = 0;      // SQ only: the CQ it is bound to
  Prio cfg_prio = Prio::kMedium;  // SQ only; ignored for qid 0 (admin is its own class)
  // Arbitration configuration (CC.AMS and the Arbitration feature).
  bool arb_valid = false;
  bool arb_wrr = false;      // CC.AMS = 001b (WRR with urgent); false: round robin
  uint8_t arb_burst = 0;     // AB, 3 bits: 2^AB per turn, 7 = unlimited
  uint8_t arb_lpw = 0, arb_mpw = 0, arb_hpw = 0;  // 0's based weights
  // Doorbell write (SQ tail or CQ head), one per cycle. Values >= the queue's entry count, and
  // doorbells to disabled queues, are ignored.
  bool db_valid = false;
  bool db_cq = false;
  uint8_t db_qid = 0;
  uint16_t db_value = 0;
  // Command fetch port: the command processor can take a command at this edge.
  bool fetch_ready = false;
  // Completion request: post one entry in this CQ, into a slot a fetch grant reserved; refused
  // (cpl_valid out = 0) unless the CQ is enabled and holds a reservation.
  bool cpl_valid = false;
  uint8_t cpl_cqid = 0;
  // ... or an entry with no fetch behind it (a device posting a completion twice): it takes a
  // slot that is neither used nor reserved — refused unless the CQ has such room (and no grant
  // for this CQ takes it at the same edge) — and leaves the reservations alone.
  bool cpl_unreserved = false;
  // Synchronous reset of all state (controller reset).
  bool reset = false;
};

// The id/slot/phase fields are 0 when their valid bit is 0.
struct QueueEngineOutputs {
  bool fetch_valid = false;  // a command was granted at the last edge
  uint8_t fetch_sqid = 0;
  uint16_t fetch_slot = 0;   // SQ head index the command is read from
  bool cpl_valid = false;    // the completion request at the last edge was accepted
  uint8_t cpl_cqid = 0;
  uint16_t cpl_slot = 0;     // CQ tail index written
  bool cpl_phase = false;    // phase tag of that entry
  bool busy = false;         // work pending: an SQ with entries and CQ room (clock it again);
                             // state after the edge, whatever fetch_ready is
};

class QueueEngine {
 public:
  virtual ~QueueEngine() = default;
  // One rising clock edge with these inputs; returns the registered outputs.
  virtual const QueueEngineOutputs& tick(const QueueEngineInputs& in) = 0;
};

}  // namespace pollux::emu::rtl
