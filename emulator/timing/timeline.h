// The busy periods of one resource (a link direction), reserved out of time order.
//
// The timed models compute a command's whole path when it is fetched, so a resource is often
// reserved for a time later than a reservation made afterwards (command A's data goes up the
// link after its media read, command B's SQE fetch goes up now). A plain busy-until counter
// would make B wait behind A's future transfer; a timeline puts B in the gap before it.
#pragma once

#include <algorithm>
#include <vector>

#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

class Timeline {
 public:
  // Reserves `duration` at the earliest time >= `start` when the resource is free; returns
  // the end of the reservation. `now` lets periods wholly in the past be forgotten.
  SimTime reserve(SimTime now, SimTime start, SimTime duration) {
    forget_before(now);
    if (duration == 0) return start;
    // Busy periods are sorted and disjoint; find the first gap that fits.
    auto it = std::lower_bound(busy_.begin() + static_cast<std::ptrdiff_t>(first_), busy_.end(),
                               start, [](const Period& p, SimTime t) { return p.end <= t; });
    SimTime t = start;
    while (it != busy_.end() && it->start < t + duration) {
      t = std::max(t, it->end);
      ++it;
    }
    insert(it, Period{t, t + duration});
    return t + duration;
  }
  size_t periods() const { return busy_.size() - first_; }
  // End of the last booked period (0 if none is remembered).
  SimTime busy_until() const { return periods() == 0 ? 0 : busy_.back().end; }

 private:
  static constexpr size_t kMaxPeriods = 4096;
  struct Period {
    SimTime start, end;
  };
  // Periods before first_ are forgotten; they are dropped from the vector in bulk, not one
  // erase (a move of every later period) each time.
  void forget_before(SimTime now) {
    size_t n = first_;
    while (n < busy_.size() && busy_[n].end <= now) ++n;
    // A user that never says what time it is (a unit test of the FTL alone) would grow the
    // list forever: past kMaxPeriods, the oldest quarter is taken as history.
    if (n == first_ && periods() > kMaxPeriods) n += kMaxPeriods / 4;
    first_ = n;
    if (first_ == busy_.size()) {
      busy_.clear();
      first_ = 0;
    } else if (first_ >= 64 && first_ * 2 >= busy_.size()) {
      busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(first_));
      first_ = 0;
    }
  }
  // Insert before `it`, merging with neighbours that touch it.
  void insert(std::vector<Period>::iterator it, Period p) {
    const auto begin = busy_.begin() + static_cast<std::ptrdiff_t>(first_);
    const bool join_prev = it != begin && std::prev(it)->end == p.start;
    const bool join_next = it != busy_.end() && it->start == p.end;
    if (join_prev && join_next) {
      std::prev(it)->end = it->end;
      busy_.erase(it);
    } else if (join_prev) {
      std::prev(it)->end = p.end;
    } else if (join_next) {
      it->start = p.start;
    } else if (it == begin && first_ > 0) {
      busy_[--first_] = p;  // room left by forgotten periods
    } else {
      busy_.insert(it, p);
    }
  }
  std::vector<Period> busy_;
  size_t first_ = 0;
};

}  // namespace pollux::emu::timing
