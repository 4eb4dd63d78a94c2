#include "emulator/rtl/queue_engine_ref.h"

#include <bit>

namespace pollux::emu::rtl {
namespace {

static_assert(kQueues == 32, "masks are uint32_t");

uint16_t next_index(uint16_t idx, uint16_t size) { return idx == size ? 0 : uint16_t(idx + 1); }

// First set bit of m at or after `start`, circularly (m != 0).
uint8_t first_from(uint32_t m, unsigned start) {
  return uint8_t((start + std::countr_zero(std::rotr(m, int(start)))) % kQueues);
}

}  // namespace

RefQueueEngine::Selection RefQueueEngine::select() const {
  Selection s;
  uint32_t ring_mask[kRings] = {};
  if (!arb_.wrr) {
    ring_mask[0] = elig_;
  } else {
    for (unsigned r = 0; r < kRings; ++r) ring_mask[r] = elig_ & prio_mask_[r] & ~1u;
  }
  auto pick_ring = [&](unsigned r) {
    const unsigned p = arb_.ptr[r], n = arb_.count[r];
    s.valid = s.by_ring = true;
    s.ring = uint8_t(r);
    s.keep = n != 0 && (ring_mask[r] >> p & 1) && (arb_.burst == 7 || n < (1u << arb_.burst));
    s.sq = s.keep ? uint8_t(p) : first_from(ring_mask[r], (p + 1) % kQueues);
  };

  if (!arb_.wrr) {
    if (ring_mask[0]) pick_ring(0);
  } else if (elig_ & 1) {
    s.valid = true;  // admin: strict priority, sq 0
  } else if (ring_mask[0]) {
    pick_ring(0);  // urgent: strict priority over the weighted classes
  } else {
    bool credit_left = false;
    for (unsigned k = 0; k < 3; ++k) credit_left |= ring_mask[k + 1] && arb_.credit[k] != 0;
    s.reload = !credit_left;
    for (unsigned k = 0; k < 3; ++k) {
      const unsigned credit = s.reload ? arb_.weight[k] + 1u : arb_.credit[k];
      if (ring_mask[k + 1] && credit != 0) {
        pick_ring(k + 1);
        break;
      }
    }
  }
  return s;
}

const QueueEngineOutputs& RefQueueEngine::tick(const QueueEngineInputs& in) {
  if (in.reset) {
    *this = RefQueueEngine();
    return out_;
  }
  // Every decision from the state before the edge.
  const Selection sel = select();
  const bool grant = in.fetch_ready && sel.valid;
  const unsigned gq = sel.sq, gcq = sq_[gq].cqid;
  const unsigned cq = in.cpl_cqid;
  const bool cpl_ok =
      in.cpl_valid && cq < kQueues && cq_[cq].en &&
      (in.cpl_unreserved ? (room_ >> cq & 1) && !(grant && gcq == cq) : cq_[cq].reserved != 0);
  const unsigned dq = in.db_qid;
  const bool db_ok = in.db_valid && dq < kQueues &&
                     (in.db_cq ? cq_[dq].en && in.db_value <= cq_[dq].size
                               : sq_[dq].en && in.db_value <= sq_[dq].size);
  const unsigned fq = in.cfg_qid;
  const bool cfg_ok =
      in.cfg_valid && fq < kQueues &&
      (!in.cfg_enable || (in.cfg_size != 0 && (in.cfg_cq || in.cfg_cqid < kQueues)));

  out_ = QueueEngineOutputs{};
  if (grant) {
    out_.fetch_valid = true;
    out_.fetch_sqid = uint8_t(gq);
    out_.fetch_slot = sq_[gq].head;
    sq_[gq].head = next_index(sq_[gq].head, sq_[gq].size);
    ++cq_[gcq].reserved;
    if (sel.by_ring) {
      uint8_t& n = arb_.count[sel.ring];
      n = !sel.keep ? 1 : n == 127 ? 127 : uint8_t(n + 1);
      arb_.ptr[sel.ring] = uint8_t(gq);
      if (arb_.wrr && sel.ring != 0) {
        for (unsigned k = 0; k < 3; ++k) {
          if (sel.reload) arb_.credit[k] = uint16_t(arb_.weight[k] + 1u);
        }
        --arb_.credit[sel.ring - 1];
      }
    }
  }
  if (cpl_ok) {
    Cq& c = cq_[cq];
    out_.cpl_valid = true;
    out_.cpl_cqid = uint8_t(cq);
    out_.cpl_slot = c.tail;
    out_.cpl_phase = c.phase;
    if (c.tail == c.size) c.phase = !c.phase;
    c.tail = next_index(c.tail, c.size);
    if (!in.cpl_unreserved) --c.reserved;  // after a same-edge grant's ++ on this CQ: they cancel
  }
  if (db_ok) {
    (in.db_cq ? cq_[dq].head : sq_[dq].tail) = in.db_value;
  }
  if (cfg_ok) {  // last: rewrites the whole queue, overriding the updates above
    const uint32_t bit = 1u << fq;
    if (in.cfg_cq) {
      cq_[fq] = Cq{};
      cq_en_ &= ~bit;
      if (in.cfg_enable) {
        cq_[fq] = Cq{.en = true, .phase = true, .size = in.cfg_size};
        cq_en_ |= bit;
      }
    } else {
      sq_[fq] = Sq{};
      sq_en_ &= ~bit;
      for (uint32_t& m : prio_mask_) m &= ~bit;
      if (in.cfg_enable) {
        const uint8_t prio = static_cast<uint8_t>(in.cfg_prio) & 3;
        sq_[fq] = Sq{.en = true, .size = in.cfg_size, .cqid = in.cfg_cqid, .prio = prio};
        sq_en_ |= bit;
        prio_mask_[prio] |= bit;
      }
    }
  }
  if (in.arb_valid) {  // new settings; arbitration state back to its start
    arb_ = Arb{};
    arb_.wrr = in.arb_wrr;
    arb_.burst = in.arb_burst & 7;
    const uint8_t w[3] = {in.arb_hpw, in.arb_mpw, in.arb_lpw};
    for (unsigned k = 0; k < 3; ++k) {
      arb_.weight[k] = w[k];
      arb_.credit[k] = uint16_t(w[k] + 1u);
    }
  }
  update_eligible();
  out_.busy = elig_ != 0;
  return out_;
}

void RefQueueEngine::update_eligible() {
  room_ = 0;
  for (uint32_t m = cq_en_; m != 0; m &= m - 1) {
    const Cq& c = cq_[std::countr_zero(m)];
    if (used(c.head, c.tail, c.size) + c.reserved < c.size) room_ |= m & -m;
  }
  elig_ = 0;
  for (uint32_t m = sq_en_; m != 0; m &= m - 1) {
    const Sq& s = sq_[std::countr_zero(m)];
    if (s.head != s.tail && (room_ >> s.cqid & 1)) elig_ |= m & -m;
  }
}

}  // namespace pollux::emu::rtl
