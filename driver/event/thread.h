// A lightweight thread: the unit of ownership. It owns its pollers, its message queue and
// its I/O channels; it runs on one reactor at a time and may be moved between reactors.
// Everything but send_msg() and the statistics must be called on the thread itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/mpmc_queue.h"
#include "driver/event/poller.h"
#include "driver/event/types.h"

namespace pollux::event {

struct ThreadStats {
  std::atomic<uint64_t> busy_ticks{0};
  std::atomic<uint64_t> idle_ticks{0};
  std::atomic<uint64_t> messages{0};
};

// A consistent-enough copy of one poller's statistics, for readers on other threads.
struct PollerSample {
  std::string name;
  uint64_t period_ticks;
  bool paused;
  uint64_t runs, busy_runs, busy_ticks;
};

class Thread {
 public:
  static constexpr std::size_t kMsgBatch = 32;

  ~Thread();
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;

  // The thread whose code is running on this OS thread, or nullptr.
  static Thread* current();

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  Framework& framework() const { return framework_; }
  const env::Clock& clock() const { return clock_; }
  // The reactor this thread is scheduled on, or -1 before it first runs.
  int reactor_index() const { return reactor_index_.load(std::memory_order_acquire); }
  bool exited() const { return state_.load(std::memory_order_acquire) == State::kExited; }
  // The cores this thread may run on, sorted (Framework::create_thread's cpumask).
  const std::vector<int>& cpumask() const { return cpumask_; }

  // Any thread. 0, -EAGAIN (queue full: nothing was queued), or -ESHUTDOWN (exited).
  int send_msg(MsgFn fn, void* arg);
  // On this thread only: runs fn(arg) at the start of its next iteration, whatever the state
  // of its ring (an owner-only overflow list; it may allocate — rare paths only).
  void post_local(MsgFn fn, void* arg) { local_.push_back(Message{fn, arg}); }

  // Pollers. period_us == 0: active (every iteration). Returns nullptr only on bad input.
  Poller* register_poller(PollerFn fn, void* arg, uint64_t period_us, std::string name);
  void pause_poller(Poller* p);
  void resume_poller(Poller* p);
  void unregister_poller(Poller* p);  // frees p (later, if it is running now)
  std::size_t poller_count() const;

  // Ask the thread to exit: it drains its messages, drops its pollers and channels, and stops.
  void exit();
  // Move to another reactor after the current iteration (called on this thread). -EINVAL
  // for a reactor that does not exist or whose core is outside the thread's cpumask.
  int move_to(int reactor_index);

  const ThreadStats& stats() const { return stats_; }
  std::vector<PollerSample> poller_samples() const;  // any thread; locks out registration only

  // Runs one iteration at time `now` (a reading of the framework's CPU clock). Returns the
  // last CPU-clock reading it took (each poller run ends with one), or `now` if it took none;
  // *busy tells whether anything did work. Called by the reactor (or a test) with
  // current() == this.
  uint64_t poll(uint64_t now, bool* busy);

 private:
  friend class Framework;
  friend class Reactor;
  friend class IoChannel;
  enum class State : uint8_t { kRunning, kExiting, kExited };

  Thread(Framework& fw, uint64_t id, std::string name, const env::Clock& clock,
         std::size_t msg_ring_size, std::vector<int> cpumask);

  std::size_t drain_messages(std::size_t max);
  uint64_t run_poller(Poller* p, uint64_t now, bool* busy);
  void park(Poller* p);  // moves a poller that left the active state to where it belongs
  void push_timed(Poller* p);
  static bool runs_later(const Poller* a, const Poller* b);
  void release_poller(Poller* p);
  bool try_finish_exit();
  void account(bool busy, uint64_t ticks);
  // A reading of the clock busy and idle time are measured with (Framework::cpu_clock).
  uint64_t cpu_now() const;
  // The time timed pollers go by, given the last CPU-clock reading: that same reading when
  // one clock serves both (no second read), else the framework clock's.
  uint64_t timer_now(uint64_t cpu_reading) const;

  Framework& framework_;
  const uint64_t id_;
  const std::string name_;
  const env::Clock& clock_;
  const std::vector<int> cpumask_;
  env::MpmcQueue<Message> msgs_;
  // Read by senders on other cores: kept apart from what the owner writes every iteration.
  alignas(env::kCacheLine) std::atomic<State> state_{State::kRunning};
  std::atomic<int> reactor_index_{-1};
  int move_to_ = -1;

  alignas(env::kCacheLine) std::vector<Poller*> active_;  // owner-only from here on
  std::vector<Poller*> timed_;  // min-heap on next_run_
  std::vector<Poller*> paused_;
  Poller* running_poller_ = nullptr;
  mutable std::mutex pollers_mu_;  // guards all_pollers_ for cross-thread readers
  std::vector<std::unique_ptr<Poller>> all_pollers_;

  std::vector<IoChannel*> channels_;
  std::vector<Message> local_;
  alignas(env::kCacheLine) ThreadStats stats_;
};

// Makes `t` Thread::current() for a scope: the reactor does this around poll(); tests and
// set-up code use it to act "on" a thread that is not running yet.
class CurrentThreadScope {
 public:
  explicit CurrentThreadScope(Thread* t);
  ~CurrentThreadScope();
  CurrentThreadScope(const CurrentThreadScope&) = delete;
  CurrentThreadScope& operator=(const CurrentThreadScope&) = delete;

 private:
  Thread* prev_;
};

}  // namespace pollux::event
