#include "emulator/rtl/stimulus.h"

#include <algorithm>
#include <cstdio>

namespace pollux::emu::rtl {
namespace {

template <size_t N>
double pick(Rng& rng, const double (&options)[N]) {
  return options[rng.below(N)];
}

}  // namespace

Stimulus::Stimulus(uint64_t seed) : rng_(seed) {}

void Stimulus::push(const QueueEngineInputs& step) {
  if (step_count_ == kMaxSteps) return;
  steps_[(step_head_ + step_count_++) % kMaxSteps] = step;
}

void Stimulus::refresh(const RefQueueEngine& ref) {
  n_sq_ = n_cq_ = 0;
  for (unsigned q = 0; q < kQueues; ++q) {
    if (ref.sq(q).en) sqs_[n_sq_++] = uint8_t(q);
    if (ref.cq(q).en) cqs_[n_cq_++] = uint8_t(q);
  }
}

uint16_t Stimulus::random_size() {
  const unsigned r = rng_.below(100);
  if (r < 90) return uint16_t(rng_.range(1, 63));  // 2..64 entries
  if (r < 97) return uint16_t(rng_.range(64, 1023));
  return uint16_t(rng_.range(1024, 65535));
}

QueueEngineInputs Stimulus::random_arbitration() {
  QueueEngineInputs in;
  in.arb_valid = true;
  in.arb_wrr = rng_.chance(0.6);
  in.arb_burst = uint8_t(rng_.below(8));
  const bool big = rng_.chance(0.2);
  in.arb_hpw = uint8_t(big ? rng_.below(256) : rng_.below(8));
  in.arb_mpw = uint8_t(big ? rng_.below(256) : rng_.below(8));
  in.arb_lpw = uint8_t(big ? rng_.below(256) : rng_.below(8));
  return in;
}

void Stimulus::new_scenario(const RefQueueEngine& ref) {
  epoch_end_ = cycle_ + rng_.range(2000, 40000);
  const unsigned mode = rng_.below(100);
  if (mode < 20) {
    push(QueueEngineInputs{.reset = true});
  } else if (mode < 55) {  // tear down what is there, one queue per edge
    for (unsigned q = 0; q < kQueues; ++q) {
      if (ref.sq(q).en) push(QueueEngineInputs{.cfg_valid = true, .cfg_qid = uint8_t(q)});
      if (ref.cq(q).en) {
        push(QueueEngineInputs{.cfg_valid = true, .cfg_cq = true, .cfg_qid = uint8_t(q)});
      }
    }
  }  // else: keep the old queues and add to them
  if (mode < 20 || rng_.chance(0.8)) push(random_arbitration());

  // CQs first (an SQ may still come before its CQ, through a bad binding or a later delete).
  uint8_t ids[kQueues];
  for (unsigned q = 0; q < kQueues; ++q) ids[q] = uint8_t(q);
  for (unsigned i = kQueues - 1; i > 0; --i) std::swap(ids[i], ids[rng_.below(i + 1)]);
  const unsigned n_cq = rng_.range(1, 6);
  uint8_t new_cqs[8];
  for (unsigned i = 0; i < n_cq; ++i) {
    new_cqs[i] = (i == 0 && rng_.chance(0.6)) ? 0 : ids[i];
    push(QueueEngineInputs{.cfg_valid = true, .cfg_cq = true, .cfg_qid = new_cqs[i],
                           .cfg_enable = true, .cfg_size = random_size()});
  }
  for (unsigned i = kQueues - 1; i > 0; --i) std::swap(ids[i], ids[rng_.below(i + 1)]);
  const unsigned n_sq = rng_.range(1, 24);
  const bool urgent_heavy = rng_.chance(0.3);
  for (unsigned i = 0; i < n_sq; ++i) {
    const uint8_t cqid =
        rng_.chance(0.03) ? uint8_t(rng_.below(kQueues)) : new_cqs[rng_.below(n_cq)];
    const Prio prio = urgent_heavy && rng_.chance(0.5) ? Prio::kUrgent : Prio(rng_.below(4));
    push(QueueEngineInputs{.cfg_valid = true, .cfg_qid = ids[i], .cfg_enable = true,
                           .cfg_size = random_size(), .cfg_cqid = cqid, .cfg_prio = prio});
  }

  // Host behaviour for this epoch.
  p_ready_ = rng_.chance(0.35) ? 1.0 : 0.2 + 0.75 * rng_.below(1000) / 1000.0;
  p_ready_flip_ = pick(rng_, {0.02, 0.2, 1.0});
  p_sq_db_ = pick(rng_, {0.05, 0.2, 0.5, 0.8});
  max_batch_ = rng_.range(1, 16);
  p_cq_db_ = pick(rng_, {0.01, 0.05, 0.2, 0.6});
  p_cpl_ = pick(rng_, {0.1, 0.3, 0.7, 1.0});
  p_invalid_ = pick(rng_, {0.0, 0.002, 0.02});
  p_event_ = pick(rng_, {0.0, 1e-4, 1e-3});
  p_reset_ = pick(rng_, {0.0, 0.0, 1e-5});
  feed_urgent_ = rng_.chance(0.4) ? rng_.range(30, 90) : 0;
}

void Stimulus::random_event(const RefQueueEngine& ref, QueueEngineInputs& in) {
  const unsigned r = rng_.below(100);
  in.cfg_valid = true;
  if (r < 25 && n_sq_ > 0) {  // delete an SQ, sometimes bring it back at once
    in.cfg_qid = sqs_[rng_.below(n_sq_)];
    if (rng_.chance(0.5)) {
      const RefQueueEngine::Sq& s = ref.sq(in.cfg_qid);
      push(QueueEngineInputs{.cfg_valid = true, .cfg_qid = in.cfg_qid, .cfg_enable = true,
                             .cfg_size = s.size, .cfg_cqid = s.cqid, .cfg_prio = Prio(s.prio)});
    }
  } else if (r < 40 && n_cq_ > 0) {  // delete a CQ, mostly bring it back
    in.cfg_cq = true;
    in.cfg_qid = cqs_[rng_.below(n_cq_)];
    if (rng_.chance(0.6)) {
      push(QueueEngineInputs{.cfg_valid = true, .cfg_cq = true, .cfg_qid = in.cfg_qid,
                             .cfg_enable = true, .cfg_size = random_size()});
    }
  } else if (r < 55 && n_cq_ > 0) {  // re-create a live CQ in place
    in.cfg_cq = true;
    in.cfg_qid = cqs_[rng_.below(n_cq_)];
    in.cfg_enable = true;
    in.cfg_size = random_size();
  } else if (r < 70) {
    in = random_arbitration();
  } else if (r < 85) {  // bad writes, all ignored
    const unsigned kind = rng_.below(3);
    in.cfg_cq = kind == 1 || rng_.chance(0.5);
    in.cfg_qid = uint8_t(kind == 0 ? rng_.range(kQueues, 255) : rng_.below(kQueues));
    in.cfg_enable = true;
    in.cfg_size = kind == 1 ? 0 : random_size();
    if (kind == 2) {
      in.cfg_cq = false;
      in.cfg_cqid = uint8_t(rng_.range(kQueues, 255));
    }
  } else {  // a new SQ on a random CQ id (which may not exist)
    in.cfg_qid = uint8_t(rng_.below(kQueues));
    in.cfg_enable = true;
    in.cfg_size = random_size();
    in.cfg_cqid = n_cq_ > 0 && rng_.chance(0.8) ? cqs_[rng_.below(n_cq_)]
                                                 : uint8_t(rng_.below(kQueues));
    in.cfg_prio = Prio(rng_.below(4));
  }
}

void Stimulus::sq_doorbell(const RefQueueEngine& ref, QueueEngineInputs& in) {
  if (n_sq_ == 0) return;
  uint8_t q = sqs_[rng_.below(n_sq_)];
  if (feed_urgent_ != 0 && rng_.below(100) < feed_urgent_) {
    for (unsigned i = 0, start = rng_.below(n_sq_); i < n_sq_; ++i) {
      const uint8_t u = sqs_[(start + i) % n_sq_];
      if (u != 0 && ref.sq(u).prio == uint8_t(Prio::kUrgent)) {
        q = u;
        break;
      }
    }
  }
  const RefQueueEngine::Sq& s = ref.sq(q);
  in.db_cq = false;
  in.db_qid = q;
  if (rng_.chance(p_invalid_)) {
    in.db_valid = true;
    const unsigned kind = rng_.below(4);
    if (kind == 0 && s.size < 0xffff) {
      in.db_value = uint16_t(rng_.range(s.size + 1u, 0xffff));  // >= entries
    } else if (kind == 1) {
      in.db_qid = uint8_t(rng_.range(kQueues, 255));
    } else if (kind == 2) {
      in.db_qid = uint8_t(rng_.below(kQueues));  // maybe a disabled queue
      in.db_value = uint16_t(rng_.below(64));
    } else {
      in.db_value = uint16_t(rng_.below(s.size + 1u));  // a host bug: any in-range tail
    }
    return;
  }
  if (!s.en) return;
  const unsigned room = s.size - RefQueueEngine::used(s.head, s.tail, s.size);
  if (room == 0) return;
  const unsigned add = rng_.range(1, std::min(room, max_batch_));
  in.db_valid = true;
  in.db_value = uint16_t((s.tail + add) % (s.size + 1u));
}

void Stimulus::cq_doorbell(const RefQueueEngine& ref, QueueEngineInputs& in) {
  if (n_cq_ == 0) return;
  const uint8_t q = cqs_[rng_.below(n_cq_)];
  const RefQueueEngine::Cq& c = ref.cq(q);
  in.db_cq = true;
  in.db_qid = q;
  if (rng_.chance(p_invalid_)) {
    in.db_valid = true;
    if (c.size < 0xffff && rng_.chance(0.7)) {
      in.db_value = uint16_t(rng_.range(c.size + 1u, 0xffff));
    } else {
      in.db_qid = uint8_t(rng_.range(kQueues, 255));
    }
    return;
  }
  if (!c.en) return;
  const unsigned posted = RefQueueEngine::used(c.head, c.tail, c.size);
  if (posted == 0) return;
  const unsigned consume = rng_.chance(0.5) ? posted : rng_.range(1, posted);
  in.db_valid = true;
  in.db_value = uint16_t((c.head + consume) % (c.size + 1u));
}

void Stimulus::completion(const RefQueueEngine& ref, QueueEngineInputs& in) {
  if (rng_.chance(p_invalid_)) {  // possibly a CQ with nothing reserved: refused
    in.cpl_valid = true;
    in.cpl_cqid = uint8_t(rng_.below(kQueues + 8));
    return;
  }
  if (n_cq_ && rng_.chance(0.1)) {  // an entry no fetch reserved: room or a refusal
    in.cpl_valid = true;
    in.cpl_unreserved = true;
    in.cpl_cqid = cqs_[rng_.below(n_cq_)];
    return;
  }
  for (unsigned i = 0, start = n_cq_ ? rng_.below(n_cq_) : 0; i < n_cq_; ++i) {
    const uint8_t q = cqs_[(start + i) % n_cq_];
    if (ref.cq(q).reserved != 0) {
      in.cpl_valid = true;
      in.cpl_cqid = q;
      return;
    }
  }
}

QueueEngineInputs Stimulus::next(const RefQueueEngine& ref) {
  ++cycle_;
  if (refresh_) {
    refresh(ref);
    refresh_ = false;
  }
  if (cycle_ >= epoch_end_ && step_count_ == 0) new_scenario(ref);

  QueueEngineInputs in;
  if (step_count_ != 0) {
    in = steps_[step_head_];
    step_head_ = (step_head_ + 1) % kMaxSteps;
    --step_count_;
    refresh_ = true;
  } else if (rng_.chance(p_event_)) {
    random_event(ref, in);
    refresh_ = true;
  }
  if (rng_.chance(p_reset_)) {
    in.reset = true;
    epoch_end_ = cycle_ + 1;
  }
  if (in.reset) refresh_ = true;

  if (rng_.chance(p_ready_flip_)) ready_ = rng_.chance(p_ready_);
  in.fetch_ready = ready_;
  if (rng_.chance(p_sq_db_)) {
    sq_doorbell(ref, in);
  } else if (rng_.chance(p_cq_db_)) {
    cq_doorbell(ref, in);
  }
  if (rng_.chance(p_cpl_)) completion(ref, in);
  return in;
}

bool SameOutputs(const QueueEngineOutputs& a, const QueueEngineOutputs& b) {
  return a.fetch_valid == b.fetch_valid && a.fetch_sqid == b.fetch_sqid &&
         a.fetch_slot == b.fetch_slot && a.cpl_valid == b.cpl_valid && a.cpl_cqid == b.cpl_cqid &&
         a.cpl_slot == b.cpl_slot && a.cpl_phase == b.cpl_phase && a.busy == b.busy;
}

std::string Describe(const QueueEngineInputs& in) {
  char buf[384];
  int n = std::snprintf(buf, sizeof buf, "reset=%d fetch_ready=%d", in.reset, in.fetch_ready);
  auto add = [&](auto... args) {
    if (n >= 0 && size_t(n) < sizeof buf) n += std::snprintf(buf + n, sizeof buf - n, args...);
  };
  if (in.cfg_valid) {
    add(" cfg{%s qid=%u enable=%d size=%u cqid=%u prio=%u}", in.cfg_cq ? "cq" : "sq", in.cfg_qid,
        in.cfg_enable, in.cfg_size, in.cfg_cqid, unsigned(in.cfg_prio));
  }
  if (in.arb_valid) {
    add(" arb{wrr=%d burst=%u hpw=%u mpw=%u lpw=%u}", in.arb_wrr, in.arb_burst, in.arb_hpw,
        in.arb_mpw, in.arb_lpw);
  }
  if (in.db_valid) add(" db{%s qid=%u value=%u}", in.db_cq ? "cq" : "sq", in.db_qid, in.db_value);
  if (in.cpl_valid) add(" cpl{cqid=%u%s}", in.cpl_cqid, in.cpl_unreserved ? " unreserved" : "");
  return buf;
}

std::string Describe(const QueueEngineOutputs& o) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "fetch{valid=%d sqid=%u slot=%u} cpl{valid=%d cqid=%u slot=%u phase=%d} busy=%d",
                o.fetch_valid, o.fetch_sqid, o.fetch_slot, o.cpl_valid, o.cpl_cqid, o.cpl_slot,
                o.cpl_phase, o.busy);
  return buf;
}

}  // namespace pollux::emu::rtl
