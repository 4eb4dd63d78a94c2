#include "scenarios/sim/cpu_cost.h"

#include <algorithm>

namespace pollux::sim {

void QpairCharges::watch(const nvme::Qpair* qp) {
  const Counts c = counts_of(qp->stats());
  watched_.push_back(&qp->stats());
  charged_each_.push_back(c);
  charged_ += c;
}

void QpairCharges::unwatch(const nvme::Qpair* qp) {
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (watched_[i] != &qp->stats()) continue;
    Counts since = counts_of(*watched_[i]);
    since -= charged_each_[i];
    retired_ += since;
    charged_ -= charged_each_[i];
    watched_.erase(watched_.begin() + static_cast<std::ptrdiff_t>(i));
    charged_each_.erase(charged_each_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

// Counters only grow, so each sum minus what was charged is the counts since (modulo 2^64
// like the weighed totals it replaces: the same figure to the nanosecond).
uint64_t QpairCharges::uncharged_ns(bool* work) const {
  Counts d;
  for (const nvme::QpairStats* s : watched_) d += counts_of(*s);
  d -= charged_;
  d += retired_;
  *work |= any_work(d);
  return cost_of(d);
}

uint64_t QpairCharges::charge(bool* work) {
  Counts now;
  for (size_t i = 0; i < watched_.size(); ++i) {
    charged_each_[i] = counts_of(*watched_[i]);
    now += charged_each_[i];
  }
  Counts d = now;
  d -= charged_;
  d += retired_;
  *work |= any_work(d);
  charged_ = now;
  retired_ = {};
  return cost_of(d);
}

void WallNs::start(uint64_t base_ns) {
  if (tsc_ == nullptr) tsc_ = &env::system_clock();
  tsc0_ = tsc_->now();
  base_ns_ = base_ns;
}

uint64_t WallNs::now_ns() const {
  const auto ticks = static_cast<unsigned __int128>(tsc_->now() - tsc0_);
  return base_ns_ + static_cast<uint64_t>(ticks * 1'000'000'000u / tsc_->ticks_per_second());
}

}  // namespace pollux::sim
