// A reactor: one per core of the core mask, pinned, running the event loop over the
// lightweight threads scheduled on it. In step mode it runs only when run_once() is called.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/mpmc_queue.h"
#include "driver/event/types.h"

namespace pollux::event {

struct ReactorStats {
  std::atomic<uint64_t> busy_ticks{0};
  std::atomic<uint64_t> idle_ticks{0};
  std::atomic<uint64_t> iterations{0};
};

class Reactor {
 public:
  Reactor(Framework& fw, int index, int core, const env::Clock& clock);
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  int index() const { return index_; }
  int core() const { return core_; }
  const ReactorStats& stats() const { return stats_; }
  // Threads scheduled here, including ones adopted but not yet picked up.
  std::size_t thread_count() const { return thread_count_.load(std::memory_order_relaxed); }

  // One iteration over every thread on this reactor. Returns true if any did work.
  bool run_once();
  // Loops until the framework has stopped and no thread is left anywhere.
  void run();

  // Any OS thread: schedule `t` here (a new thread, or one moving from another reactor).
  void adopt(Thread* t);

 private:
  // One iteration starting at `start` (a clock reading); returns the last reading taken.
  uint64_t iterate(uint64_t start, bool* any_busy);

  Framework& fw_;
  const int index_;
  const int core_;
  const env::Clock& clock_;
  env::MpmcQueue<Thread*> incoming_;
  std::vector<Thread*> threads_;
  std::atomic<std::size_t> thread_count_{0};
  ReactorStats stats_;
};

}  // namespace pollux::event
