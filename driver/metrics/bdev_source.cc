#include "driver/metrics/bdev_source.h"

#include <algorithm>
#include <utility>

#include "driver/bdev/modules/nvme.h"
#include "driver/event/thread.h"

namespace pollux::metrics {

std::unique_ptr<BdevCollector> BdevCollector::start(bdev::Manager& mgr, uint64_t period_us) {
  std::unique_ptr<BdevCollector> c(new BdevCollector(mgr));
  c->thread_ = event::Thread::current();
  c->seconds_per_tick_ = 1.0 / static_cast<double>(mgr.framework().clock().ticks_per_second());
  c->poller_ = c->thread_->register_poller(gather, c.get(), period_us, "metrics_bdev_stats");
  gather(c.get());
  return c;
}

BdevCollector::~BdevCollector() = default;

void BdevCollector::stop(event::MsgFn done, void* ctx) {
  if (stopped_) return;
  stopped_ = true;
  stopped_fn_ = done;
  stopped_ctx_ = ctx;
  thread_->unregister_poller(poller_);
  poller_ = nullptr;
  std::vector<Watch*> idle;
  for (auto& w : watches_) {
    if (w->walking) w->close_after_walk = true;
    else idle.push_back(w.get());
  }
  for (Watch* w : idle) release(*w);
  if (watches_.empty() && stopped_fn_ != nullptr) std::exchange(stopped_fn_, nullptr)(stopped_ctx_);
}

event::PollStatus BdevCollector::gather(void* arg) {
  auto* self = static_cast<BdevCollector*>(arg);
  int started = 0;
  // By name: a watched bdev cannot be replaced by a namesake while we hold its descriptor,
  // and the descriptor (not a pointer from a listing) says which bdev we hold.
  for (const std::string& name : self->mgr_.bdev_names()) {
    auto known = std::find_if(self->watches_.begin(), self->watches_.end(),
                              [&name](const auto& w) { return w->name == name; });
    if (known != self->watches_.end()) continue;
    auto w = std::make_unique<Watch>();
    w->owner = self;
    w->name = name;
    auto desc = self->mgr_.open(name, false, on_event, w.get());
    if (!desc) continue;  // being removed
    w->desc = *desc;
    self->watches_.push_back(std::move(w));
  }
  // Walks may start a release (a bdev that left): iterate over a copy.
  std::vector<Watch*> ready;
  for (auto& w : self->watches_)
    if (!w->walking && !w->close_after_walk) ready.push_back(w.get());
  for (Watch* w : ready) {
    w->walking = true;
    ++started;
    self->mgr_.get_stats(w->desc->bdev(), walk_done, w);
  }
  return started > 0 ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

void BdevCollector::walk_done(const bdev::IoStats& stats, void* ctx) {
  auto* w = static_cast<Watch*>(ctx);
  BdevCollector* self = w->owner;
  {
    std::lock_guard lock(self->mu_);
    self->published_[w->name] = {stats, w->desc->bdev().qos_limits()};
  }
  w->walking = false;
  if (w->close_after_walk) self->release(*w);
}

void BdevCollector::on_event(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
  if (e != bdev::DescEvent::kRemove) return;
  auto* w = static_cast<Watch*>(ctx);
  if (w->walking) w->close_after_walk = true;
  else w->owner->release(*w);
}

void BdevCollector::release(Watch& w) {
  mgr_.close(w.desc);
  {
    std::lock_guard lock(mu_);
    published_.erase(w.name);
  }
  std::erase_if(watches_, [&w](const auto& p) { return p.get() == &w; });
  // The last walk of a stopped collector has ended.
  if (stopped_ && watches_.empty() && stopped_fn_ != nullptr)
    std::exchange(stopped_fn_, nullptr)(stopped_ctx_);
}

Source BdevCollector::source() {
  return [this](Builder& b) {
    std::map<std::string, Published> published;
    {
      std::lock_guard lock(mu_);  // only the copy: the app thread's walk_done waits for it
      published = published_;
    }
    for (const auto& [name, p] : published) {
      const bdev::IoStats& s = p.stats;
      for (std::size_t t = 0; t < bdev::kIoTypes; ++t) {
        const auto type = static_cast<bdev::IoType>(t);
        const bdev::IoTypeStats& ts = s.by_type[t];
        // Reads and writes always (dashboards chart them); other types once they happen.
        if (ts.ops == 0 && type != bdev::IoType::kRead && type != bdev::IoType::kWrite) continue;
        const Labels l{{"bdev", name}, {"type", bdev::to_string(type)}};
        b.counter("pollux_bdev_ops_total", "I/Os the bdev completed, by type", l,
                  static_cast<double>(ts.ops));
        b.counter("pollux_bdev_bytes_total", "Data moved by the bdev's successful I/Os", l,
                  static_cast<double>(ts.bytes));
        b.counter("pollux_bdev_errors_total", "I/Os that completed with an error", l,
                  static_cast<double>(ts.errors));
      }
      const std::pair<const char*, const env::LatencyHistogram*> lat[] = {
          {"read", &s.read_latency}, {"write", &s.write_latency}, {"other", &s.other_latency}};
      for (const auto& [type, h] : lat)
        b.histogram("pollux_bdev_latency_seconds", "Latency of the bdev's I/Os (submit to callback)",
                    {{"bdev", name}, {"type", type}}, *h, seconds_per_tick_, latency_bounds());
      const Labels l{{"bdev", name}};
      b.counter("pollux_bdev_retries_total", "I/Os requeued because the module or a buffer pool ran dry", l,
                static_cast<double>(s.retries));
      b.counter("pollux_bdev_splits_total", "I/Os split at the module's boundaries", l,
                static_cast<double>(s.splits));
      b.counter("pollux_bdev_bounced_total", "I/Os copied through a bounce buffer", l,
                static_cast<double>(s.bounced));
      b.counter("pollux_bdev_qos_queued_total", "I/Os QoS held back until the budget refilled", l,
                static_cast<double>(s.qos_queued));
      b.counter("pollux_bdev_reset_queued_total", "I/Os that waited for a reset to finish", l,
                static_cast<double>(s.reset_queued));
      const std::pair<const char*, uint64_t> limits[] = {{"ios", p.qos.iops},
                                                         {"bytes", p.qos.bps},
                                                         {"read_bytes", p.qos.read_bps},
                                                         {"write_bytes", p.qos.write_bps}};
      for (const auto& [kind, v] : limits)
        b.gauge("pollux_bdev_qos_limit_per_second", "QoS rate limit (0: unlimited)",
                {{"bdev", name}, {"kind", kind}}, static_cast<double>(v));
    }
  };
}

Source bdev_nvme_source(bdev::Manager& mgr) {
  return [&mgr](Builder& b) {
    const std::vector<std::string> names = bdev::nvme_controller_names(mgr);
    for (const std::string& name : names) {
      auto cs = bdev::nvme_controller_stats(mgr, name);
      if (!cs) continue;  // detached since the listing
      const Labels l = {{"controller", name}};
      auto counter = [&](const char* metric, const char* help, uint64_t v) {
        b.counter(metric, help, l, static_cast<double>(v));
      };
      counter("pollux_bdev_nvme_resets_total", "Controller resets bdev_nvme completed",
              cs->resets);
      counter("pollux_bdev_nvme_reset_failures_total", "Controller resets that failed",
              cs->reset_failures);
      counter("pollux_bdev_nvme_retries_total", "Commands resubmitted after a retriable status",
              cs->retries);
      counter("pollux_bdev_nvme_removed_failures_total", "I/O failed because the device left",
              cs->removed_failures);
      counter("pollux_nvme_controller_timeouts_total",
              "I/O commands that outlived their queue pair's timeout (the driver's count)",
              cs->io_timeouts);
      counter("pollux_nvme_controller_aborts_sent_total",
              "Abort commands the driver sent for timed-out commands", cs->aborts_sent);
      counter("pollux_nvme_controller_reset_aborted_ios_total",
              "I/Os the device held that a reset ended (retriable)", cs->reset_aborted_ios);
      counter("pollux_nvme_controller_async_events_total",
              "Asynchronous Event Request completions", cs->async_events);
    }
    b.gauge("pollux_bdev_nvme_controllers", "Attached NVMe controllers", {},
            static_cast<double>(names.size()));
    b.counter("pollux_bdev_nvme_hotplug_attaches_total", "Devices the hot-plug poller attached",
              {}, static_cast<double>(bdev::nvme_hotplug_stats(mgr).attaches));
  };
}

}  // namespace pollux::metrics
