// The queue engine's C++ reference model: cycle-accurate to queue_engine.sv, rule for rule
// (README.md here). Plain state and bit masks; tick() never allocates. Read-only accessors expose
// the state so tests and stimulus generators can act like a host that knows the queues.
#pragma once

#include <cstdint>

#include "emulator/rtl/queue_engine.h"

namespace pollux::emu::rtl {

class RefQueueEngine final : public QueueEngine {
 public:
  struct Sq {
    bool en = false;
    uint16_t size = 0;  // entries - 1
    uint16_t head = 0, tail = 0;
    uint8_t cqid = 0;
    uint8_t prio = 0;  // Prio value; SQ 0 is the admin class in WRR mode whatever this says
  };
  struct Cq {
    bool en = false;
    bool phase = false;  // phase tag of the next entry posted
    uint16_t size = 0;   // entries - 1
    uint16_t head = 0, tail = 0;
    uint16_t reserved = 0;  // slots reserved by grants, not yet posted
  };
  // Ring 0: all SQs in RR mode, the urgent class in WRR mode; rings 1..3: high, medium, low.
  static constexpr unsigned kRings = 4;
  struct Arb {
    bool wrr = false;
    uint8_t burst = 0;              // AB; 7 = unlimited
    uint8_t weight[3] = {};         // 0's based, high/medium/low
    uint16_t credit[3] = {1, 1, 1};  // WRR credits, high/medium/low
    uint8_t ptr[kRings] = {kQueues - 1, kQueues - 1, kQueues - 1, kQueues - 1};
    uint8_t count[kRings] = {};  // grants in the ring's current turn (saturates at 127)
  };

  RefQueueEngine() = default;
  const QueueEngineOutputs& tick(const QueueEngineInputs& in) override;

  const QueueEngineOutputs& outputs() const { return out_; }
  const Sq& sq(unsigned q) const { return sq_[q]; }
  const Cq& cq(unsigned q) const { return cq_[q]; }
  const Arb& arb() const { return arb_; }
  uint32_t eligible() const { return elig_; }  // SQs a grant could come from at the next edge
  uint32_t cq_room() const { return room_; }   // CQs with a free, unreserved slot
  // The SQ the arbiter would grant at the next edge if fetch_ready (eligible() != 0).
  unsigned next_grant() const { return select().sq; }

  // (tail - head) modulo entries.
  static unsigned used(uint16_t head, uint16_t tail, uint16_t size) {
    return tail >= head ? unsigned(tail - head) : unsigned(tail) + size + 1u - head;
  }

 private:
  struct Selection {
    bool valid = false;
    bool by_ring = false;  // false: the admin SQ in WRR mode, which has no arbitration state
    bool keep = false;     // continues the ring's current turn
    uint8_t ring = 0;
    uint8_t sq = 0;
    bool reload = false;  // WRR credits reloaded before this choice
  };

  Selection select() const;
  void update_eligible();

  Sq sq_[kQueues];
  Cq cq_[kQueues];
  Arb arb_;
  uint32_t sq_en_ = 0, cq_en_ = 0;
  uint32_t prio_mask_[kRings] = {};  // bit s of [p]: SQ s has priority p
  uint32_t room_ = 0, elig_ = 0;     // derived from the state above after every edge
  QueueEngineOutputs out_;
};

}  // namespace pollux::emu::rtl
