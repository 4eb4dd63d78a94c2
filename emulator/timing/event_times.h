// The times of the simulation's events, one slot per event source (each device's due
// completions and its queue engine's clock), and their minimum — the next event, which the
// simulation runs next (the fast-forward) and the lockstep asks for several times a step. The
// minimum is kept as slots change and found again only when the slot that held it moves later.
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
    fresh_.assign(n, 0);
    min_ = kNever;
    stale_ = false;
  }
  void set(size_t slot, SimTime t) {
    const SimTime old = times_[slot];
    times_[slot] = t;
    if (marking_ && t <= fresh_at_) fresh_[slot] = 1;
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
  // From now on (until end_fresh), a slot set for a time up to `t` is marked fresh: what the
  // kernel would take as a notification for its current time made between two runs, which
  // only the run after next runs (Simulation::dispatch_until).
  void begin_fresh(SimTime t) {
    marking_ = true;
    fresh_at_ = t;
  }
  void end_fresh() { marking_ = false; }
  bool fresh(size_t slot) const { return fresh_[slot] != 0; }
  void clear_fresh() { std::fill(fresh_.begin(), fresh_.end(), 0); }
  size_t size() const { return times_.size(); }
  SimTime at(size_t slot) const { return times_[slot]; }
  // The lowest slot holding next() (some slot must: next() != kNever).
  size_t earliest() const {
    const SimTime t = next();
    size_t i = 0;
    while (times_[i] != t) ++i;
    return i;
  }

 private:
  std::vector<SimTime> times_;
  std::vector<uint8_t> fresh_;
  bool marking_ = false;
  SimTime fresh_at_ = 0;
  mutable SimTime min_ = kNever;
  mutable bool stale_ = false;
};

}  // namespace pollux::emu::timing
