#include "driver/event/reactor.h"

#include "driver/event/framework.h"
#include "driver/event/thread.h"

namespace pollux::event {

Reactor::Reactor(Framework& fw, int index, int core, const env::Clock& clock)
    : fw_(fw), index_(index), core_(core), clock_(clock), incoming_(1024) {}

void Reactor::adopt(Thread* t) {
  // The queue is sized well beyond any real thread count; spin rather than drop a thread.
  thread_count_.fetch_add(1, std::memory_order_relaxed);  // counted now: placement reads it
  while (!incoming_.try_push(t)) {
  }
}

namespace {

// Owner-only counters: a relaxed load + store is enough and avoids a locked RMW.
inline void bump(std::atomic<uint64_t>& c, uint64_t by) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

uint64_t Reactor::cpu_now() const {
  return fw_.cpu_clock_ ? fw_.cpu_clock_->now() : clock_.now();
}

bool Reactor::run_once(uint64_t overhead_ticks) {
  const uint64_t start = cpu_now();
  // The gap since the last iteration: idle, split over the threads that sat through it.
  if (continues_ && start > last_end_) {
    const uint64_t gap = start - last_end_;
    bump(stats_.idle_ticks, gap);
    if (const std::size_t n = threads_.size(); n != 0) {
      for (std::size_t i = 0; i < n; ++i) threads_[i]->account(false, gap / n + (i < gap % n));
    }
  }
  bool any_busy;
  last_end_ = iterate(start, overhead_ticks, &any_busy);
  continues_ = true;
  return any_busy;
}

// The clock is read once per thread (at the end of its poll, a reading the thread's last
// poller usually took already) plus once per poller run: each reading ends one interval
// and starts the next, so the accounting has no gaps. A clock read costs ~10 ns here (the
// TSC in a VM), as much as a null-bdev I/O's share of an iteration at depth 128.
uint64_t Reactor::iterate(uint64_t start, uint64_t overhead_ticks, bool* any_busy) {
  Thread* arrived;
  while (incoming_.try_pop(arrived)) {
    threads_.push_back(arrived);
    arrived->reactor_index_.store(index_, std::memory_order_release);
  }

  uint64_t now = start;
  *any_busy = false;
  for (std::size_t i = 0; i < threads_.size();) {
    Thread* t = threads_[i];
    bool busy;
    uint64_t end;
    {
      CurrentThreadScope scope(t);
      end = t->poll(now, &busy);
    }
    if (end == now) end = cpu_now();  // nothing in the thread read the clock
    t->account(busy, end - now);
    now = end;
    *any_busy |= busy;

    // Read-only in the common case: senders on other cores read this thread's state, and a
    // store to its line every iteration would bounce that line between cores.
    const int to = t->move_to_;
    if (to >= 0) t->move_to_ = -1;
    const bool leaves = t->exited() || (to >= 0 && to != index_);
    if (!leaves) {
      ++i;
      continue;
    }
    threads_.erase(threads_.begin() + static_cast<std::ptrdiff_t>(i));
    thread_count_.fetch_sub(1, std::memory_order_relaxed);
    if (t->exited()) {
      fw_.on_thread_exited();
    } else {
      fw_.reactor(static_cast<std::size_t>(to)).adopt(t);
    }
  }
  if (threads_.empty()) now = cpu_now();
  now += overhead_ticks;

  bump(*any_busy ? stats_.busy_ticks : stats_.idle_ticks, now - start);
  bump(stats_.iterations, 1);
  stats_.last_tick.store(now, std::memory_order_relaxed);
  return now;
}

// The loop starts each iteration where the previous one's last reading left off (SPDK's
// reactor does the same with tsc_last), so busy + idle is the loop's whole span; run_once(),
// the step mode of a simulator whose clock moves between calls, reads the clock first and
// books the time between calls as idle, with the same result.
void Reactor::run() {
  uint64_t now = cpu_now();
  bool busy;
  while (!(fw_.stopping() && fw_.live_threads() == 0)) now = iterate(now, 0, &busy);
}

}  // namespace pollux::event
