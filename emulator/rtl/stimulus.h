// Random, host-like stimulus for the queue engine (the differential test and the benchmark).
// It reads the reference model's state the way a host knows its own queues: SQ tail doorbells
// add commands only where the SQ has room, CQ head doorbells consume posted entries, completion
// requests go to CQs holding reservations. On top of that, in epochs of 2 000 to 40 000 cycles,
// it re-draws the whole scenario (queues, sizes 2..64 and some large, priorities, arbitration
// mode, burst, weights, host rates) and sprinkles invalid doorbells, bad config writes, deletes,
// re-creates and resets. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>

#include "emulator/rtl/queue_engine.h"
#include "emulator/rtl/queue_engine_ref.h"

namespace pollux::emu::rtl {

// splitmix64: small, fast, and the same sequence everywhere (unlike std:: distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return uint32_t(((next() >> 32) * n) >> 32); }  // [0, n)
  uint32_t range(uint32_t lo, uint32_t hi) { return lo + below(hi - lo + 1); }  // [lo, hi]
  bool chance(double p) { return double(next() >> 11) * 0x1p-53 < p; }

 private:
  uint64_t s_;
};

class Stimulus {
 public:
  explicit Stimulus(uint64_t seed);
  // Inputs for the next edge, given the reference model as it is before that edge.
  QueueEngineInputs next(const RefQueueEngine& ref);

 private:
  void new_scenario(const RefQueueEngine& ref);
  void random_event(const RefQueueEngine& ref, QueueEngineInputs& in);
  void sq_doorbell(const RefQueueEngine& ref, QueueEngineInputs& in);
  void cq_doorbell(const RefQueueEngine& ref, QueueEngineInputs& in);
  void completion(const RefQueueEngine& ref, QueueEngineInputs& in);
  void push(const QueueEngineInputs& step);
  void refresh(const RefQueueEngine& ref);
  uint16_t random_size();  // 0's based
  QueueEngineInputs random_arbitration();

  Rng rng_;
  uint64_t cycle_ = 0, epoch_end_ = 0;
  // The scenario: queues in use and host behaviour.
  uint8_t sqs_[kQueues] = {}, cqs_[kQueues] = {};
  unsigned n_sq_ = 0, n_cq_ = 0;
  double p_ready_ = 1, p_ready_flip_ = 0, p_sq_db_ = 0, p_cq_db_ = 0, p_cpl_ = 0;
  double p_invalid_ = 0, p_event_ = 0, p_reset_ = 0;
  unsigned max_batch_ = 1, feed_urgent_ = 0;  // feed_urgent_: % of SQ doorbells to urgent SQs
  bool ready_ = true;
  bool refresh_ = true;  // a configuration step went out: re-read the queue lists
  // Queued configuration steps, one per edge (a ring; at most a scenario's worth).
  static constexpr unsigned kMaxSteps = 4 * kQueues + 8;
  QueueEngineInputs steps_[kMaxSteps];
  unsigned step_head_ = 0, step_count_ = 0;
};

bool SameOutputs(const QueueEngineOutputs& a, const QueueEngineOutputs& b);
std::string Describe(const QueueEngineInputs& in);
std::string Describe(const QueueEngineOutputs& out);

}  // namespace pollux::emu::rtl
