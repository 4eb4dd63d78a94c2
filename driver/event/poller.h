// A poller: a function its thread calls on every iteration (active) or every period (timed).
// Owned by its thread; pause/resume/unregister only from that thread, including from inside
// the poller itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "driver/event/types.h"

namespace pollux::event {

// Written only by the owner thread (relaxed load+store, no RMW), read from anywhere.
struct PollerStats {
  std::atomic<uint64_t> runs{0};
  std::atomic<uint64_t> busy_runs{0};
  std::atomic<uint64_t> busy_ticks{0};
};

class Poller {
 public:
  const std::string& name() const { return name_; }
  uint64_t period_ticks() const { return period_ticks_; }
  bool timed() const { return period_ticks_ != 0; }
  bool paused() const { return state_ == State::kPaused; }
  const PollerStats& stats() const { return stats_; }

 private:
  friend class Thread;
  enum class State : uint8_t { kActive, kPaused, kUnregistered };
  enum class Where : uint8_t { kActiveList, kTimedHeap, kPausedList };

  Poller(PollerFn fn, void* arg, std::string name, uint64_t period_ticks)
      : fn_(fn), arg_(arg), name_(std::move(name)), period_ticks_(period_ticks) {}

  PollerFn fn_;
  void* arg_;
  std::string name_;
  uint64_t period_ticks_;
  uint64_t next_run_ = 0;
  State state_ = State::kActive;
  Where where_ = Where::kActiveList;
  PollerStats stats_;
};

}  // namespace pollux::event
