#include "driver/event/thread.h"

#include <algorithm>
#include <cerrno>

#include "driver/event/framework.h"
#include "driver/event/io_channel.h"

namespace pollux::event {
namespace {

thread_local Thread* tls_current = nullptr;

}  // namespace

Thread* Thread::current() { return tls_current; }

// Sets Thread::current() for a scope: the reactor around poll(), tests around set-up code.
CurrentThreadScope::CurrentThreadScope(Thread* t) : prev_(tls_current) { tls_current = t; }
CurrentThreadScope::~CurrentThreadScope() { tls_current = prev_; }

Thread::Thread(Framework& fw, uint64_t id, std::string name, const env::Clock& clock,
               std::size_t msg_ring_size, std::vector<int> cpumask)
    : framework_(fw),
      id_(id),
      name_(std::move(name)),
      clock_(clock),
      cpumask_(std::move(cpumask)),
      msgs_(msg_ring_size) {}

Thread::~Thread() = default;

int Thread::send_msg(MsgFn fn, void* arg) {
  if (state_.load(std::memory_order_acquire) == State::kExited) return -ESHUTDOWN;
  return msgs_.try_push(Message{fn, arg}) ? 0 : -EAGAIN;
}

Poller* Thread::register_poller(PollerFn fn, void* arg, uint64_t period_us, std::string name) {
  if (fn == nullptr || state_.load(std::memory_order_relaxed) == State::kExited) return nullptr;
  auto owned = std::unique_ptr<Poller>(
      new Poller(fn, arg, std::move(name), period_us == 0 ? 0 : clock_.us_to_ticks(period_us)));
  Poller* p = owned.get();
  if (period_us != 0 && p->period_ticks_ == 0) p->period_ticks_ = 1;
  {
    std::lock_guard lock(pollers_mu_);
    all_pollers_.push_back(std::move(owned));
  }
  if (p->timed()) {
    p->next_run_ = clock_.now() + p->period_ticks_;
    push_timed(p);
  } else {
    p->where_ = Poller::Where::kActiveList;
    active_.push_back(p);
  }
  return p;
}

// std's heap functions build a max-heap; ordering by "runs later" makes it a min-heap.
bool Thread::runs_later(const Poller* a, const Poller* b) { return a->next_run_ > b->next_run_; }

void Thread::push_timed(Poller* p) {
  p->where_ = Poller::Where::kTimedHeap;
  timed_.push_back(p);
  std::push_heap(timed_.begin(), timed_.end(), runs_later);
}

void Thread::pause_poller(Poller* p) {
  if (p->state_ == Poller::State::kActive) p->state_ = Poller::State::kPaused;
}

void Thread::resume_poller(Poller* p) {
  if (p->state_ != Poller::State::kPaused) return;
  p->state_ = Poller::State::kActive;
  if (p->where_ != Poller::Where::kPausedList) return;  // still listed: nothing moved yet
  paused_.erase(std::find(paused_.begin(), paused_.end(), p));
  if (p->timed()) {
    p->next_run_ = clock_.now() + p->period_ticks_;
    push_timed(p);
  } else {
    p->where_ = Poller::Where::kActiveList;
    active_.push_back(p);
  }
}

void Thread::unregister_poller(Poller* p) {
  if (p == nullptr || p->state_ == Poller::State::kUnregistered) return;
  p->state_ = Poller::State::kUnregistered;
  // A paused poller sits in no run list, so nobody would come by to free it later.
  if (p->where_ == Poller::Where::kPausedList && p != running_poller_) {
    paused_.erase(std::find(paused_.begin(), paused_.end(), p));
    release_poller(p);
  }
}

void Thread::release_poller(Poller* p) {
  std::lock_guard lock(pollers_mu_);
  auto it = std::find_if(all_pollers_.begin(), all_pollers_.end(),
                         [p](const auto& owned) { return owned.get() == p; });
  all_pollers_.erase(it);
}

std::size_t Thread::poller_count() const {
  std::lock_guard lock(pollers_mu_);
  std::size_t n = 0;
  for (const auto& p : all_pollers_) n += p->state_ != Poller::State::kUnregistered;
  return n;
}

std::vector<PollerSample> Thread::poller_samples() const {
  std::lock_guard lock(pollers_mu_);
  std::vector<PollerSample> out;
  out.reserve(all_pollers_.size());
  for (const auto& p : all_pollers_) {
    out.push_back({p->name_, p->period_ticks_, p->state_ == Poller::State::kPaused,
                   p->stats_.runs.load(std::memory_order_relaxed),
                   p->stats_.busy_runs.load(std::memory_order_relaxed),
                   p->stats_.busy_ticks.load(std::memory_order_relaxed)});
  }
  return out;
}

void Thread::park(Poller* p) {
  if (p->state_ == Poller::State::kUnregistered) {
    release_poller(p);
  } else {  // paused
    p->where_ = Poller::Where::kPausedList;
    paused_.push_back(p);
  }
}

// Owner-only counters: a relaxed load + store is enough and avoids a locked RMW.
static inline void bump(std::atomic<uint64_t>& c, uint64_t by) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

uint64_t Thread::cpu_now() const {
  return framework_.cpu_clock_ ? framework_.cpu_clock_->now() : clock_.now();
}

uint64_t Thread::timer_now(uint64_t cpu_reading) const {
  return framework_.cpu_clock_ ? clock_.now() : cpu_reading;
}

uint64_t Thread::run_poller(Poller* p, uint64_t now, bool* busy) {
  running_poller_ = p;
  const PollStatus rc = p->fn_(p->arg_);
  running_poller_ = nullptr;
  const uint64_t end = cpu_now();
  bump(p->stats_.runs, 1);
  if (rc == PollStatus::kBusy) {
    bump(p->stats_.busy_runs, 1);
    bump(p->stats_.busy_ticks, end - now);
    *busy = true;
  }
  return end;
}

std::size_t Thread::drain_messages(std::size_t max) {
  std::size_t n = 0;
  Message m;
  while (n < max && msgs_.try_pop(m)) {
    m.fn(m.arg);
    ++n;
  }
  if (n) bump(stats_.messages, n);
  return n;
}

uint64_t Thread::poll(uint64_t now, bool* busy) {
  *busy = false;
  if (!local_.empty()) {
    std::vector<Message> run;
    run.swap(local_);
    for (const Message& m : run) m.fn(m.arg);
    *busy = true;
  }
  if (drain_messages(kMsgBatch) > 0) {
    *busy = true;
    now = cpu_now();
  }

  // Active pollers. Index-based: pollers may register others (appended) while we iterate.
  for (std::size_t i = 0; i < active_.size();) {
    Poller* p = active_[i];
    if (p->state_ == Poller::State::kActive) now = run_poller(p, now, busy);
    if (p->state_ != Poller::State::kActive) {
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
      park(p);
      continue;
    }
    ++i;
  }

  // Timed pollers that are due, earliest first.
  const uint64_t due = timer_now(now);
  while (!timed_.empty() && timed_.front()->next_run_ <= due) {
    std::pop_heap(timed_.begin(), timed_.end(), runs_later);
    Poller* p = timed_.back();
    timed_.pop_back();
    if (p->state_ == Poller::State::kActive) now = run_poller(p, now, busy);
    if (p->state_ != Poller::State::kActive) {
      park(p);
      continue;
    }
    p->next_run_ = timer_now(now) + p->period_ticks_;
    push_timed(p);
  }

  if (state_.load(std::memory_order_relaxed) == State::kExiting && try_finish_exit()) {
    *busy = true;
  }
  return now;
}

void Thread::exit() {
  State expected = State::kRunning;
  state_.compare_exchange_strong(expected, State::kExiting, std::memory_order_acq_rel);
}

int Thread::move_to(int reactor_index) {
  if (reactor_index < 0 || static_cast<std::size_t>(reactor_index) >= framework_.reactor_count())
    return -EINVAL;
  const int core = framework_.reactor(static_cast<std::size_t>(reactor_index)).core();
  if (!std::binary_search(cpumask_.begin(), cpumask_.end(), core)) return -EINVAL;
  move_to_ = reactor_index;
  return 0;
}

// An exiting thread stops once no message is left: its pollers are dropped and channels
// that its users forgot to put are destroyed (and counted as leaks by the framework).
bool Thread::try_finish_exit() {
  if (drain_messages(SIZE_MAX) > 0 || !local_.empty()) return false;
  // Channels first, newest first, running the messages each destruction sends (a bdev
  // channel puts its module's channel, whose deferred release must run before the loop
  // could reach it), while the pollers their destroy callbacks unregister still exist.
  while (!channels_.empty()) {
    IoChannel::destroy_leaked(channels_.back());
    drain_messages(SIZE_MAX);
  }
  for (Poller* p : active_) p->state_ = Poller::State::kUnregistered;
  for (Poller* p : timed_) p->state_ = Poller::State::kUnregistered;
  for (Poller* p : paused_) p->state_ = Poller::State::kUnregistered;
  active_.clear();
  timed_.clear();
  paused_.clear();
  {
    std::lock_guard lock(pollers_mu_);
    all_pollers_.clear();
  }
  state_.store(State::kExited, std::memory_order_release);
  // A sender that saw kRunning just before the store may still have queued a message: run
  // it now rather than lose it. After this, send_msg() refuses.
  drain_messages(SIZE_MAX);
  return true;
}

void Thread::account(bool busy, uint64_t ticks) {
  bump(busy ? stats_.busy_ticks : stats_.idle_ticks, ticks);
}

}  // namespace pollux::event
