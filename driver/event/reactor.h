// A reactor: one per core of the core mask, pinned, running the event loop over the
// lightweight threads scheduled on it. In step mode it runs only when run_once() is called.
// Its busy + idle time is the whole span its CPU clock readings cover (Framework::cpu_clock).
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
  std::atomic<uint64_t> idle_ticks{0};  // idle iterations, and (step mode) time between them
  std::atomic<uint64_t> iterations{0};
  // The CPU-clock reading that ended the last iteration (plus its overhead): between two
  // iterations busy + idle grow by exactly the advance of this reading.
  std::atomic<uint64_t> last_tick{0};
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

  // One iteration over every thread on this reactor. Returns true if any did work. The time
  // since the previous iteration ended (the simulator ran something else, its clock jumped)
  // is idle time, the reactor's and its threads' (split evenly): it had nothing to do.
  // overhead_ticks: what the iteration cost beyond its threads' polls, for a CPU clock that
  // models costs rather than measures them (a measured loop's overhead is in its readings).
  bool run_once(uint64_t overhead_ticks = 0);
  // Loops until the framework has stopped and no thread is left anywhere.
  void run();

  // Any OS thread: schedule `t` here (a new thread, or one moving from another reactor).
  void adopt(Thread* t);

 private:
  friend class Framework;
  // One iteration starting at `start` (a CPU-clock reading); returns the last reading taken
  // plus overhead_ticks: where the iteration ended.
  uint64_t iterate(uint64_t start, uint64_t overhead_ticks, bool* any_busy);
  uint64_t cpu_now() const;
  void restart_accounting() { continues_ = false; }  // the CPU clock changed: no gap

  Framework& fw_;
  const int index_;
  const int core_;
  const env::Clock& clock_;
  env::MpmcQueue<Thread*> incoming_;
  std::vector<Thread*> threads_;
  std::atomic<std::size_t> thread_count_{0};
  ReactorStats stats_;
  uint64_t last_end_ = 0;   // step mode: where the last iteration ended
  bool continues_ = false;  // step mode: last_end_ is a reading of the current CPU clock
};

}  // namespace pollux::event
