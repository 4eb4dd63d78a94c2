// Input builders for tests: one QueueEngineInputs per action, to be combined field by field when
// a test needs several actions at one edge.
#pragma once

#include <cstdint>

#include "emulator/rtl/queue_engine.h"

namespace pollux::emu::rtl::test {

inline QueueEngineInputs CreateCq(uint8_t q, unsigned entries) {
  return {.cfg_valid = true, .cfg_cq = true, .cfg_qid = q, .cfg_enable = true,
          .cfg_size = uint16_t(entries - 1)};
}

inline QueueEngineInputs CreateSq(uint8_t q, uint8_t cqid, unsigned entries,
                                  Prio prio = Prio::kMedium) {
  return {.cfg_valid = true, .cfg_qid = q, .cfg_enable = true, .cfg_size = uint16_t(entries - 1),
          .cfg_cqid = cqid, .cfg_prio = prio};
}

inline QueueEngineInputs DeleteQueue(bool cq, uint8_t q) {
  return {.cfg_valid = true, .cfg_cq = cq, .cfg_qid = q};
}

// Round robin (wrr = false) or WRR with urgent class; weights 0's based.
inline QueueEngineInputs Arbitration(bool wrr, uint8_t burst, uint8_t hpw = 0, uint8_t mpw = 0,
                                     uint8_t lpw = 0) {
  return {.arb_valid = true, .arb_wrr = wrr, .arb_burst = burst, .arb_lpw = lpw, .arb_mpw = mpw,
          .arb_hpw = hpw};
}

inline QueueEngineInputs SqTail(uint8_t q, uint16_t tail) {
  return {.db_valid = true, .db_qid = q, .db_value = tail};
}

inline QueueEngineInputs CqHead(uint8_t q, uint16_t head) {
  return {.db_valid = true, .db_cq = true, .db_qid = q, .db_value = head};
}

inline QueueEngineInputs Fetch() { return {.fetch_ready = true}; }

inline QueueEngineInputs Complete(uint8_t cqid) { return {.cpl_valid = true, .cpl_cqid = cqid}; }

inline QueueEngineInputs Reset() { return {.reset = true}; }

}  // namespace pollux::emu::rtl::test
