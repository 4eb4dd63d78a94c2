#include "scenarios/sim/cpu_cost.h"

#include <algorithm>

namespace pollux::sim {

void QpairCharges::watch(const nvme::Qpair* qp) {
  const nvme::QpairStats& s = qp->stats();
  watched_.push_back(Watched{qp, s.polls, s.submitted, s.completed, s.doorbells});
}

void QpairCharges::unwatch(const nvme::Qpair* qp) {
  std::erase_if(watched_, [this, qp](const Watched& w) {
    if (w.qp != qp) return false;
    retired_ns_ += cost_of(w, &retired_work_);
    return true;
  });
}

uint64_t QpairCharges::cost_of(const Watched& w, bool* work) const {
  const nvme::QpairStats& s = w.qp->stats();
  const uint64_t sub = s.submitted - w.submitted, cpl = s.completed - w.completed;
  *work |= sub != 0 || cpl != 0;
  return (s.polls - w.polls) * costs_.poll_ns + sub * costs_.submit_ns + cpl * costs_.complete_ns +
         (s.doorbells - w.doorbells) * costs_.doorbell_ns;
}

uint64_t QpairCharges::uncharged_ns(bool* work) const {
  uint64_t t = retired_ns_;
  *work |= retired_work_;
  for (const Watched& w : watched_) t += cost_of(w, work);
  return t;
}

uint64_t QpairCharges::charge(bool* work) {
  const uint64_t t = uncharged_ns(work);
  retired_ns_ = 0;
  retired_work_ = false;
  for (Watched& w : watched_) {
    const nvme::QpairStats& s = w.qp->stats();
    w.polls = s.polls;
    w.submitted = s.submitted;
    w.completed = s.completed;
    w.doorbells = s.doorbells;
  }
  return t;
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
