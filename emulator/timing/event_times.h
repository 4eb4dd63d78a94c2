// The times of the simulation's kernel events, one slot per event source (each device's due
// completions and its queue engine's clock), and their minimum — the next kernel event, which
// the lockstep asks for several times a step. The minimum is kept as slots change and found
// again only when the slot that held it moves later.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

class EventTimes {
 public:
  static constexpr SimTime kNever = ~SimTime{0};
  // Slots 0..n-1, each kNever.
  void reset(size_t n) {
    times_.assign(n, kNever);
    min_ = kNever;
    stale_ = false;
  }
  void set(size_t slot, SimTime t) {
    const SimTime old = times_[slot];
    times_[slot] = t;
    if (t <= min_) {
      min_ = t;
    } else if (old == min_) {
      stale_ = true;  // the earliest moved later: another slot may hold the minimum now
    }
  }
  SimTime next() const {
    if (stale_) {
      min_ = *std::min_element(times_.begin(), times_.end());
      stale_ = false;
    }
    return min_;
  }

 private:
  std::vector<SimTime> times_;
  mutable SimTime min_ = kNever;
  mutable bool stale_ = false;
};

}  // namespace pollux::emu::timing
