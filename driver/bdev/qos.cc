// Per-bdev QoS: the token buckets' refill poller, and setting or clearing limits (the I/O
// path's admission against the buckets is in io.cc).
#include <algorithm>
#include <memory>
#include <mutex>

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

// ------------------------------------------------------------------------------ QoS ----

// Each millisecond adds a millisecond's budget (fractions carried to the next slice), capped
// at one slice's worth so that idle time does not save up into a burst; debt is paid back.
event::PollStatus Manager::qos_refill(void* ctx) {
  auto* b = static_cast<Bdev*>(ctx);
  for (int i = 0; i < Bdev::kQosBuckets; ++i) {
    const uint64_t limit = b->qos_limit_[i].load(std::memory_order_relaxed);
    if (limit == 0) continue;
    b->qos_carry_[i] += limit;
    const auto budget = static_cast<int64_t>(b->qos_carry_[i] / 1000);
    b->qos_carry_[i] %= 1000;
    const int64_t cap = std::max<int64_t>(static_cast<int64_t>(limit / 1000), 1);
    int64_t cur = b->qos_tokens_[i].load(std::memory_order_relaxed);
    while (!b->qos_tokens_[i].compare_exchange_weak(cur, std::min(cur + budget, cap),
                                                    std::memory_order_relaxed)) {
    }
  }
  return event::PollStatus::kBusy;
}

void Manager::stop_qos_poller(Bdev& b, event::MsgFn then, void* ctx) {
  struct Stop {
    event::Poller* poller;
    event::MsgFn then;
    void* ctx;
  };
  event::Poller* p = nullptr;
  event::Thread* t = nullptr;
  {
    std::lock_guard lock(mu_);
    std::swap(p, b.qos_poller_);
    t = b.qos_thread_;
  }
  if (p == nullptr) {
    if (then) then(ctx);
    return;
  }
  auto* stop = new Stop{p, then, ctx};
  auto run = [](void* arg) {
    std::unique_ptr<Stop> s(static_cast<Stop*>(arg));
    event::Thread::current()->unregister_poller(s->poller);
    if (s->then) s->then(s->ctx);
  };
  if (t == event::Thread::current()) {
    event::CurrentThreadScope on(t);
    run(stop);
    return;
  }
  fw_.send_reliably(t, run, stop);  // the owner must do it
}

int Manager::set_qos(Bdev& b, const QosLimits& l) {
  event::Thread* t = event::Thread::current();
  if (t == nullptr) return -EINVAL;
  stop_qos_poller(b, nullptr, nullptr);
  const uint64_t limits[Bdev::kQosBuckets] = {l.iops, l.bps, l.read_bps, l.write_bps};
  for (int i = 0; i < Bdev::kQosBuckets; ++i) {
    b.qos_limit_[i].store(limits[i], std::memory_order_relaxed);
    b.qos_tokens_[i].store(std::max<int64_t>(static_cast<int64_t>(limits[i] / 1000), 1));
  }
  const bool on = l.iops || l.bps || l.read_bps || l.write_bps;
  b.qos_on_.store(on, std::memory_order_relaxed);
  if (on) {
    std::lock_guard lock(mu_);
    b.qos_poller_ = t->register_poller(qos_refill, &b, 1000, "bdev_qos_" + b.name());
    b.qos_thread_ = t;
  }
  return 0;
}

}  // namespace pollux::bdev
