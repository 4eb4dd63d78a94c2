// The event framework (SPDK's "app" + thread library in one): reactors on a core mask,
// lightweight threads, cross-thread messages, io_devices and their channels.
//
// Free-run mode: run() starts one pinned OS thread per reactor (reactor 0 on the caller),
// calls the start function on the first thread, and returns after stop() once every thread
// has exited. Step mode: nothing runs by itself; a simulator calls step() (or a reactor's
// run_once()) and owns the clock.
//
// Busy and idle time (reactor, thread and poller statistics) are measured with the CPU clock:
// the framework's clock, unless a step-mode simulator whose clock stands still while the host
// runs supplies the host's modelled CPU time instead (set_cpu_clock).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/result.h"
#include "driver/event/io_channel.h"
#include "driver/event/reactor.h"
#include "driver/event/thread.h"

namespace pollux::event {

struct FrameworkOptions {
  std::string core_mask = "0x1";  // hex mask ("0x3") or list ("[0,2-3]")
  bool step_mode = false;
  bool pin_reactors = true;
  const env::Clock* clock = nullptr;  // default: env::system_clock()
  std::size_t msg_ring_size = 4096;
};

// Parses "0x3", "3", "[0,2-3]" into sorted core numbers.
Result<std::vector<int>> parse_core_mask(const std::string& mask);
// Sorted core numbers as a hex mask ("0x5" for {0, 2}), as SPDK prints cpumasks.
std::string format_core_mask(const std::vector<int>& cores);

class Framework {
 public:
  static Result<std::unique_ptr<Framework>> create(FrameworkOptions options);
  ~Framework();
  Framework(const Framework&) = delete;
  Framework& operator=(const Framework&) = delete;

  const env::Clock& clock() const { return clock_; }
  // What busy and idle time are measured with; it counts in clock()'s ticks.
  const env::Clock& cpu_clock() const { return cpu_clock_ ? *cpu_clock_ : clock_; }
  // Step mode, between steps: measure busy and idle time with `cpu` (nullptr: with clock()
  // again). False, and nothing changes, in free-run mode or when its tick rate is not
  // clock()'s. Each reactor's accounting restarts at its next iteration (no gap is counted
  // across the switch). `cpu` must outlive its use.
  bool set_cpu_clock(const env::Clock* cpu);
  std::size_t reactor_count() const { return reactors_.size(); }
  Reactor& reactor(std::size_t i) { return *reactors_[i]; }
  bool step_mode() const { return options_.step_mode; }

  // Any OS thread. `cpumask`: the cores the thread may run on (SPDK's thread cpumask; empty:
  // every core of the framework; cores outside the framework are dropped). reactor_index < 0,
  // or a reactor outside the mask: the reactor with the fewest threads within the mask.
  // nullptr when stopping or when the mask selects none of the framework's cores.
  Thread* create_thread(std::string name, int reactor_index = -1,
                        const std::vector<int>& cpumask = {});

  // Free-run mode: blocks until stop() and every thread has exited. Returns stop()'s rc.
  int run(MsgFn start, void* arg);
  // Any thread: every thread is asked to exit; reactors end when the last one has.
  void stop(int rc = 0);
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  // Step mode: one iteration of every reactor, in index order. True if any did work.
  // overhead_ticks: see Reactor::run_once.
  bool step(uint64_t overhead_ticks = 0);
  // Step mode: true once stop() was called and every thread has exited.
  bool finished() const;
  std::size_t live_threads() const { return live_threads_.load(std::memory_order_acquire); }

  // Like Thread::send_msg, for messages that must neither be lost nor run elsewhere: when
  // t's ring is full it retries from a message to the current thread (or spins if that
  // ring is full too). Set-up and rare paths only. False only if t has exited.
  bool send_reliably(Thread* t, MsgFn fn, void* arg);

  // Runs fn(ctx) on every live thread, one after another, then done(ctx) on the calling
  // thread. Must be called on a framework thread. 0 or -ESHUTDOWN.
  int for_each_thread(MsgFn fn, void* ctx, MsgFn done);

  // io_devices. Register/unregister from any framework thread.
  void register_io_device(void* io_device, ChannelCreateFn create, ChannelDestroyFn destroy,
                          std::size_t ctx_size, std::string name);
  // `done(ctx)` runs on the calling thread once the last channel of the device is gone.
  void unregister_io_device(void* io_device, MsgFn done, void* ctx);
  // On the current thread. nullptr if the device is unknown/unregistering or create failed.
  IoChannel* get_io_channel(void* io_device);
  void put_io_channel(IoChannel* ch);
  // Visits every thread holding a channel of io_device, then done(ctx, status) on the caller.
  void for_each_channel(void* io_device, ChannelIterFn fn, void* ctx, ChannelIterDoneFn done);

  // Every thread ever created (exited ones included, they stay until the framework dies).
  std::vector<Thread*> threads() const;
  Thread* thread_at(std::size_t index) const;  // in creation order; nullptr past the end
  uint64_t leaked_channels() const { return leaked_channels_.load(std::memory_order_relaxed); }

 private:
  friend class Reactor;
  friend class Thread;
  friend class IoChannel;
  friend class ChannelIter;
  explicit Framework(FrameworkOptions options, const env::Clock& clock);
  void on_thread_exited();
  void channel_iter_step(ChannelIter* it);
  static void channel_iter_retry(void* arg);
 public:
  bool retry_later(MsgFn fn, void* arg);  // internal: re-run a walk's hop from a message

 private:
  void release_device_channel(IoChannel::Device* d);

  FrameworkOptions options_;
  const env::Clock& clock_;
  const env::Clock* cpu_clock_ = nullptr;  // nullptr: clock_ (read on every poller run)
  std::vector<std::unique_ptr<Reactor>> reactors_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> rc_{0};
  std::atomic<std::size_t> live_threads_{0};
  std::atomic<uint64_t> leaked_channels_{0};

  mutable std::mutex mu_;  // threads_ and devices_ (set-up paths only)
  std::vector<std::unique_ptr<Thread>> threads_;
  uint64_t next_thread_id_ = 1;
  std::unordered_map<void*, std::unique_ptr<IoChannel::Device>> devices_;
};

}  // namespace pollux::event
