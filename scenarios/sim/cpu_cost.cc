#include "scenarios/sim/cpu_cost.h"

#include <algorithm>

namespace pollux::sim {

QpairCharges::~QpairCharges() {
  for (nvme::Qpair* qp : watched_) qp->count_work_into(nullptr);
}

void QpairCharges::watch(nvme::Qpair* qp) {
  if (std::find(watched_.begin(), watched_.end(), qp) != watched_.end()) return;
  qp->count_work_into(&work_);
  watched_.push_back(qp);
}

void QpairCharges::unwatch(nvme::Qpair* qp) {
  const auto it = std::find(watched_.begin(), watched_.end(), qp);
  if (it == watched_.end()) return;
  qp->count_work_into(nullptr);
  watched_.erase(it);
}

// Counters only grow, so the sums minus what was charged are the counts since (modulo 2^64).
uint64_t QpairCharges::uncharged_ns(bool* work) const {
  Counts d = counts();
  d -= charged_;
  *work |= any_work(d);
  return cost_of(d);
}

uint64_t QpairCharges::charge(bool* work) {
  const Counts now = counts();
  Counts d = now;
  d -= charged_;
  *work |= any_work(d);
  charged_ = now;
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
