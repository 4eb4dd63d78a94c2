#include "scenarios/sim/cpu_cost.h"

#include <algorithm>

namespace pollux::sim {

void QpairCharges::watch(const nvme::Qpair* qp) {
  const Totals t = totals_of(qp->stats());
  watched_.push_back(qp);
  charged_each_.push_back(t);
  charged_.ns += t.ns;
  charged_.work += t.work;
}

void QpairCharges::unwatch(const nvme::Qpair* qp) {
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (watched_[i] != qp) continue;
    const Totals now = totals_of(qp->stats()), was = charged_each_[i];
    retired_ns_ += now.ns - was.ns;
    retired_work_ |= now.work != was.work;
    charged_.ns -= was.ns;
    charged_.work -= was.work;
    watched_.erase(watched_.begin() + static_cast<std::ptrdiff_t>(i));
    charged_each_.erase(charged_each_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

QpairCharges::Totals QpairCharges::now_totals() const {
  Totals sum;
  for (const nvme::Qpair* qp : watched_) {
    const Totals t = totals_of(qp->stats());
    sum.ns += t.ns;
    sum.work += t.work;
  }
  return sum;
}

uint64_t QpairCharges::uncharged_ns(bool* work) const {
  const Totals now = now_totals();
  *work |= retired_work_ || now.work != charged_.work;
  return retired_ns_ + (now.ns - charged_.ns);
}

uint64_t QpairCharges::charge(bool* work) {
  const uint64_t t = uncharged_ns(work);
  retired_ns_ = 0;
  retired_work_ = false;
  charged_ = {};
  for (size_t i = 0; i < watched_.size(); ++i) {
    charged_each_[i] = totals_of(watched_[i]->stats());
    charged_.ns += charged_each_[i].ns;
    charged_.work += charged_each_[i].work;
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
