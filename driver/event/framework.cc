#include "driver/event/framework.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <sstream>
#include <thread>

namespace pollux::event {
namespace {

constexpr std::align_val_t kCtxAlign{64};

bool pin_to_core(pthread_t t, int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return pthread_setaffinity_np(t, sizeof set, &set) == 0;
}

}  // namespace

Result<std::vector<int>> parse_core_mask(const std::string& mask) {
  std::vector<int> cores;
  if (mask.empty()) return make_error(EINVAL, "empty core mask");
  if (mask.front() == '[') {
    if (mask.back() != ']') return make_error(EINVAL, "core list '" + mask + "' lacks ']'");
    std::stringstream items(mask.substr(1, mask.size() - 2));
    for (std::string item; std::getline(items, item, ',');) {
      int lo = -1, hi = -1;
      char dash = 0;
      std::stringstream one(item);
      one >> lo;
      if (one >> dash) one >> hi; else hi = lo;
      if (!one.eof() || lo < 0 || hi < lo || hi >= CPU_SETSIZE || (dash && dash != '-'))
        return make_error(EINVAL, "bad core list item '" + item + "' in " + mask);
      for (int c = lo; c <= hi; ++c) cores.push_back(c);
    }
  } else {
    std::string hex = mask;
    if (hex.rfind("0x", 0) == 0 || hex.rfind("0X", 0) == 0) hex = hex.substr(2);
    if (hex.empty() || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      return make_error(EINVAL, "core mask '" + mask + "' is neither hex nor [list]");
    int bit = 0;
    for (auto it = hex.rbegin(); it != hex.rend(); ++it) {
      const int nibble = std::stoi(std::string(1, *it), nullptr, 16);
      for (int b = 0; b < 4; ++b, ++bit)
        if (nibble & (1 << b)) cores.push_back(bit);
    }
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  if (cores.empty()) return make_error(EINVAL, "core mask '" + mask + "' selects no core");
  if (cores.back() >= CPU_SETSIZE) return make_error(EINVAL, "core number too large");
  return cores;
}

std::string format_core_mask(const std::vector<int>& cores) {
  if (cores.empty()) return "0x0";
  std::string hex((static_cast<std::size_t>(cores.back()) / 4) + 1, '0');
  for (int c : cores) {
    char& digit = hex[hex.size() - 1 - static_cast<std::size_t>(c) / 4];
    const int v = (digit <= '9' ? digit - '0' : digit - 'a' + 10) | (1 << (c % 4));
    digit = static_cast<char>(v < 10 ? '0' + v : 'a' + v - 10);
  }
  return "0x" + hex;
}

Result<std::unique_ptr<Framework>> Framework::create(FrameworkOptions options) {
  auto cores = parse_core_mask(options.core_mask);
  if (!cores) return cores.error();
  if (!options.step_mode && options.pin_reactors) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof allowed, &allowed);
    for (int c : *cores)
      if (!CPU_ISSET(c, &allowed))
        return make_error(EINVAL, "core " + std::to_string(c) + " of mask " +
                                      options.core_mask + " is not available to this process");
  }
  const env::Clock& clock = options.clock ? *options.clock : env::system_clock();
  auto fw = std::unique_ptr<Framework>(new Framework(std::move(options), clock));
  for (std::size_t i = 0; i < cores->size(); ++i)
    fw->reactors_.push_back(
        std::make_unique<Reactor>(*fw, static_cast<int>(i), (*cores)[i], clock));
  return fw;
}

Framework::Framework(FrameworkOptions options, const env::Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

Framework::~Framework() {
  // Threads still alive (step mode, or run() never called) are made to exit here, on the
  // caller's OS thread, so their pollers and channels are released.
  for (auto& t : threads_) {
    if (t->exited()) continue;
    CurrentThreadScope scope(t.get());
    t->exit();
    bool busy;
    while (!t->exited()) t->poll(cpu_clock().now(), &busy);
  }
  // A sender that saw a thread still running may have queued a message just after its last
  // drain: run those now, as that thread, rather than drop them (nothing is running now).
  for (bool any = true; any;) {
    any = false;
    for (auto& t : threads_) {
      CurrentThreadScope scope(t.get());
      any |= t->drain_messages(SIZE_MAX) > 0;
    }
  }
}

Thread* Framework::create_thread(std::string name, int reactor_index,
                                 const std::vector<int>& cpumask) {
  std::vector<int> mask;  // the framework's cores the thread may run on, sorted
  for (const auto& r : reactors_)
    if (cpumask.empty() || std::find(cpumask.begin(), cpumask.end(), r->core()) != cpumask.end())
      mask.push_back(r->core());
  std::sort(mask.begin(), mask.end());
  mask.erase(std::unique(mask.begin(), mask.end()), mask.end());
  if (mask.empty()) return nullptr;
  auto allowed = [&mask](const Reactor& r) {
    return std::binary_search(mask.begin(), mask.end(), r.core());
  };
  std::size_t target = reactors_.size();
  if (reactor_index >= 0 && static_cast<std::size_t>(reactor_index) < reactors_.size() &&
      allowed(*reactors_[static_cast<std::size_t>(reactor_index)])) {
    target = static_cast<std::size_t>(reactor_index);
  } else {
    for (std::size_t i = 0; i < reactors_.size(); ++i)
      if (allowed(*reactors_[i]) && (target == reactors_.size() ||
                                     reactors_[i]->thread_count() < reactors_[target]->thread_count()))
        target = i;
  }
  Thread* t;
  {
    std::lock_guard lock(mu_);
    if (stopping()) return nullptr;
    threads_.push_back(std::unique_ptr<Thread>(new Thread(*this, next_thread_id_++, std::move(name),
                                                          clock_, options_.msg_ring_size,
                                                          std::move(mask))));
    t = threads_.back().get();
    live_threads_.fetch_add(1, std::memory_order_acq_rel);
  }
  reactors_[target]->adopt(t);
  return t;
}

int Framework::run(MsgFn start, void* arg) {
  if (options_.step_mode) return -EINVAL;
  Thread* app = create_thread("app_thread", 0);
  if (app == nullptr) return -ESHUTDOWN;
  if (start != nullptr) app->send_msg(start, arg);

  std::vector<std::thread> others;
  for (std::size_t i = 1; i < reactors_.size(); ++i) {
    others.emplace_back([this, i] { reactors_[i]->run(); });
    if (options_.pin_reactors && !pin_to_core(others.back().native_handle(), reactors_[i]->core()))
      std::fprintf(stderr, "pollux: cannot pin reactor %zu to core %d\n", i, reactors_[i]->core());
  }
  cpu_set_t saved;
  const bool have_saved = sched_getaffinity(0, sizeof saved, &saved) == 0;
  if (options_.pin_reactors) pin_to_core(pthread_self(), reactors_[0]->core());
  reactors_[0]->run();
  for (auto& t : others) t.join();
  if (options_.pin_reactors && have_saved) sched_setaffinity(0, sizeof saved, &saved);
  return rc_.load();
}

void Framework::stop(int rc) {
  std::lock_guard lock(mu_);
  if (stopping_.exchange(true, std::memory_order_acq_rel)) return;
  rc_.store(rc);
  for (auto& t : threads_) t->exit();
}

bool Framework::step(uint64_t overhead_ticks) {
  bool busy = false;
  for (auto& r : reactors_) busy |= r->run_once(overhead_ticks);
  return busy;
}

bool Framework::set_cpu_clock(const env::Clock* cpu) {
  if (!options_.step_mode) return false;
  if (cpu != nullptr && cpu->ticks_per_second() != clock_.ticks_per_second()) return false;
  cpu_clock_ = cpu == &clock_ ? nullptr : cpu;
  for (auto& r : reactors_) r->restart_accounting();
  return true;
}

bool Framework::finished() const { return stopping() && live_threads() == 0; }

void Framework::on_thread_exited() { live_threads_.fetch_sub(1, std::memory_order_acq_rel); }

std::vector<Thread*> Framework::threads() const {
  std::lock_guard lock(mu_);
  std::vector<Thread*> out;
  for (auto& t : threads_) out.push_back(t.get());
  return out;
}

Thread* Framework::thread_at(std::size_t index) const {
  std::lock_guard lock(mu_);
  return index < threads_.size() ? threads_[index].get() : nullptr;
}

// for_each_thread: a message hops from thread to thread, then back to the origin.
namespace {
struct ThreadWalk {
  Framework* fw;
  std::size_t index;
  MsgFn fn;
  void* ctx;
  MsgFn done;
  Thread* origin;
};
}  // namespace

static void thread_walk_step(void* arg);
static void thread_walk_send(ThreadWalk* w);
static void thread_walk_retry(void* arg) { thread_walk_send(static_cast<ThreadWalk*>(arg)); }

static void thread_walk_send(ThreadWalk* w) {
  for (;;) {
    Thread* t = w->fw->thread_at(w->index);
    if (t == nullptr) {
      if (w->origin->send_msg(
              [](void* a) {
                auto* done = static_cast<ThreadWalk*>(a);
                done->done(done->ctx);
                delete done;
              },
              w) != 0) {
        delete w;  // origin exited: nobody is left to tell
      }
      return;
    }
    const int rc = t->send_msg(thread_walk_step, w);
    if (rc == 0) return;
    if (rc == -EAGAIN && w->fw->retry_later(thread_walk_retry, w)) return;  // full: again soon
    ++w->index;  // exited: skip it
  }
}

static void thread_walk_step(void* arg) {
  auto* w = static_cast<ThreadWalk*>(arg);
  w->fn(w->ctx);
  ++w->index;
  thread_walk_send(w);
}

int Framework::for_each_thread(MsgFn fn, void* ctx, MsgFn done) {
  Thread* origin = Thread::current();
  if (origin == nullptr || origin->exited()) return -ESHUTDOWN;
  thread_walk_send(new ThreadWalk{this, 0, fn, ctx, done, origin});
  return 0;
}

void Framework::register_io_device(void* io_device, ChannelCreateFn create,
                                   ChannelDestroyFn destroy, std::size_t ctx_size,
                                   std::string name) {
  std::lock_guard lock(mu_);
  auto d = std::make_unique<IoChannel::Device>();
  d->io_device = io_device;
  d->create = create;
  d->destroy = destroy;
  d->ctx_size = ctx_size;
  d->name = std::move(name);
  devices_[io_device] = std::move(d);
}

void Framework::unregister_io_device(void* io_device, MsgFn done, void* ctx) {
  std::unique_lock lock(mu_);
  auto it = devices_.find(io_device);
  if (it == devices_.end() || it->second->unregistering) return;
  IoChannel::Device& d = *it->second;
  d.unregistering = true;
  d.unregister_thread = Thread::current();
  d.unregister_done = done;
  d.unregister_ctx = ctx;
  if (d.channels == 0) {
    devices_.erase(it);
    lock.unlock();
    if (done != nullptr) {
      Thread* t = Thread::current();
      if (t == nullptr || t->send_msg(done, ctx) != 0) done(ctx);  // never lose it
    }
  }
}

void Framework::release_device_channel(IoChannel::Device* d) {
  std::unique_lock lock(mu_);
  if (--d->channels != 0 || !d->unregistering) return;
  Thread* t = d->unregister_thread;
  MsgFn done = d->unregister_done;
  void* ctx = d->unregister_ctx;
  devices_.erase(d->io_device);
  lock.unlock();
  if (done != nullptr) {
    if (t == nullptr || t->send_msg(done, ctx) != 0) done(ctx);
  }
}

IoChannel* Framework::get_io_channel(void* io_device) {
  Thread* t = Thread::current();
  if (t == nullptr) return nullptr;
  for (IoChannel* ch : t->channels_) {
    if (ch->device_->io_device == io_device) {
      ++ch->refs_;
      return ch;
    }
  }
  IoChannel::Device* d;
  {
    std::lock_guard lock(mu_);
    auto it = devices_.find(io_device);
    if (it == devices_.end() || it->second->unregistering) return nullptr;
    d = it->second.get();
    ++d->channels;
  }
  auto* ch = new IoChannel(t, d);
  ch->ctx_ = ::operator new(std::max<std::size_t>(d->ctx_size, 1), kCtxAlign);
  if (d->create(io_device, ch->ctx_) != 0) {
    ::operator delete(ch->ctx_, kCtxAlign);
    delete ch;
    release_device_channel(d);
    return nullptr;
  }
  t->channels_.push_back(ch);
  return ch;
}

void Framework::put_io_channel(IoChannel* ch) {
  if (ch == nullptr || ch->refs_ == 0) return;
  if (--ch->refs_ != 0 || ch->destroy_pending_) return;
  // Deferred, so a caller that puts and gets again in one call chain keeps the same channel.
  ch->destroy_pending_ = true;
  // Never inline: the caller may be a callback still using the channel.
  send_reliably(ch->thread_, IoChannel::destroy_deferred, ch);
}

void Framework::for_each_channel(void* io_device, ChannelIterFn fn, void* ctx,
                                 ChannelIterDoneFn done) {
  auto* it = new ChannelIter;
  it->fw_ = this;
  it->io_device_ = io_device;
  it->fn_ = fn;
  it->ctx_ = ctx;
  it->done_ = done;
  it->origin_ = Thread::current();
  channel_iter_step(it);
}

// Runs on whichever thread the walk is at. Finds the next thread (from index_) and sends
// the walk there; that thread looks up its own channel (only it may touch its list).
bool Framework::send_reliably(Thread* t, MsgFn fn, void* arg) {
  struct Retry {
    Framework* fw;
    Thread* t;
    MsgFn fn;
    void* arg;
  };
  for (;;) {
    const int rc = t->send_msg(fn, arg);
    if (rc == 0) return true;
    if (rc == -ESHUTDOWN) return false;
    Thread* self = Thread::current();
    if (self == t) {  // our own ring is full: nobody else would drain it while we spin
      t->post_local(fn, arg);
      return true;
    }
    if (self != nullptr && self != t) {
      auto* r = new Retry{this, t, fn, arg};
      auto again = [](void* a) {
        std::unique_ptr<Retry> retry(static_cast<Retry*>(a));
        retry->fw->send_reliably(retry->t, retry->fn, retry->arg);
      };
      if (self->send_msg(again, r) == 0) return true;
      delete r;
    }
  }
}

void Framework::channel_iter_retry(void* arg) {
  auto* it = static_cast<ChannelIter*>(arg);
  it->fw_->channel_iter_step(it);
}

// Runs fn(arg) again from a message to the current thread (a walk whose next hop found a
// full ring). False if there is no current thread or its own ring is full too.
bool Framework::retry_later(MsgFn fn, void* arg) {
  Thread* self = Thread::current();
  return self != nullptr && self->send_msg(fn, arg) == 0;
}

void Framework::channel_iter_step(ChannelIter* it) {
  static const MsgFn visit = [](void* arg) {
    auto* w = static_cast<ChannelIter*>(arg);
    Thread* self = Thread::current();
    for (IoChannel* ch : self->channels_) {
      if (ch->device_->io_device == w->io_device_) {
        w->channel_ = ch;
        w->fn_(*w);  // calls w->next() now or later
        return;
      }
    }
    ++w->index_;  // no channel here after all
    w->fw_->channel_iter_step(w);
  };
  static const MsgFn finish = [](void* arg) {
    auto* w = static_cast<ChannelIter*>(arg);
    w->done_(w->ctx_, w->status_);
    delete w;
  };
  it->channel_ = nullptr;
  if (it->status_ == 0) {
    for (Thread* t = thread_at(it->index_); t != nullptr; t = thread_at(++it->index_)) {
      if (t->exited()) continue;
      const int rc = t->send_msg(visit, it);
      if (rc == 0) return;
      if (rc == -EAGAIN && retry_later(&Framework::channel_iter_retry, it))
        return;  // that thread's ring is full: try it again shortly, never skip it
    }
  }
  if (it->origin_ == nullptr || it->origin_->send_msg(finish, it) != 0) finish(it);
}

}  // namespace pollux::event
