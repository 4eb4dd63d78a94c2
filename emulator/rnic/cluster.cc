#include "emulator/rnic/cluster.h"

#include <algorithm>

namespace pollux::emu::rnic {

Cluster::Cluster(uint64_t seed, WireFaults faults, uint64_t latency_ns)
    : wire_(seed, faults, latency_ns) {}

Cluster::Cluster(uint64_t seed, const NicProfile& profile, WireFaults faults)
    : wire_(seed, faults, 0), profile_(profile) {
  wire_.enable_timing(profile);
}

RnicDevice* Cluster::add_nic(RnicConfig config) {
  if (profile_ && !config.timing) config.timing = profile_;
  auto d = RnicDevice::create(nics_.size() + 1, config);
  if (d == nullptr) return nullptr;
  d->nic().connect(&wire_);
  wire_.attach(d->nic().port_address(), &d->nic());
  nics_.push_back(std::move(d));
  return nics_.back().get();
}

bool Cluster::step() {
  bool did = wire_.deliver_until(now_) > 0;
  for (std::size_t i = 0; i < nics_.size(); ++i)
    did |= nics_[i]->process(now_, i < clocks_.size() && clocks_[i] ? clocks_[i]() : 0);
  return did;
}

uint64_t Cluster::next_event_ns() const {
  uint64_t t = wire_.next_event_ns();
  for (const auto& n : nics_) t = std::min(t, n->nic().next_timer_ns());
  return t;
}

void Cluster::run_for(uint64_t ns) {
  const uint64_t end = now_ + ns;
  for (;;) {
    while (step()) {
    }
    const uint64_t next = next_event_ns();
    if (next > end) {
      now_ = end;
      step();  // doorbells rung meanwhile are seen at the end time too
      return;
    }
    now_ = std::max(now_, next);
  }
}

bool Cluster::run_until_idle(uint64_t limit_ns) {
  const uint64_t end = now_ + limit_ns;
  for (;;) {
    while (step()) {
    }
    const uint64_t next = next_event_ns();
    if (next == UINT64_MAX) return true;
    if (next > end) {
      now_ = end;
      return false;
    }
    now_ = std::max(now_, next);
  }
}

}  // namespace pollux::emu::rnic
