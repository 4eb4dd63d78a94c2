#include "scenarios/runner/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "driver/bdev/modules/nvme.h"
#include "driver/env/pattern.h"
#include "driver/metrics/event_source.h"
#include "scenarios/runner/engine.h"

namespace pollux::scenarios::engine {

std::string describe(const WorkloadSpec& w) {
  auto size = [](uint64_t b) {
    return b % (1 << 20) == 0 ? fmt::format("{} MiB", b >> 20)
                              : b % 1024 == 0 ? fmt::format("{} KiB", b >> 10) : fmt::format("{} B", b);
  };
  std::string s = fmt::format("{}, {}% reads, {}, QD {}, {}{} over {}",
                              w.pattern == Pattern::kRandom ? "random" : "sequential",
                              w.read_percent, size(w.block_size), w.queue_depth,
                              format_ns(w.duration_ns),
                              w.start_ns ? " from " + format_ns(w.start_ns) : "",
                              size(w.range_bytes));
  if (w.flush_every) s += fmt::format(", flush every {}", w.flush_every);
  if (!w.verify) s += ", not verified";
  if (w.lvol) {
    s += fmt::format(", on a {} lvol ({} clusters", w.lvol->thin ? "thin" : "thick",
                     size(w.lvol->cluster_bytes));
    if (w.lvol->snapshot_every_ns)
      s += fmt::format(", a snapshot every {}", format_ns(w.lvol->snapshot_every_ns));
    s += ")";
  }
  return s;
}

uint32_t Engine::device_index(const std::string& name) const {
  for (uint32_t i = 0; i < sc_.devices.size(); ++i)
    if (sc_.devices[i].name == name) return i;
  return 0;  // the default: the first device (validate() refused unknown names)
}

std::string Engine::setup() {
  const HostSpec host = sc_.host;
  TuneController tune = [host](nvme::ControllerOptions& co) {
    co.timeout_action = host.timeout_action == "none"    ? nvme::TimeoutAction::kNone
                        : host.timeout_action == "abort" ? nvme::TimeoutAction::kAbort
                                                         : nvme::TimeoutAction::kReset;
    co.max_reset_failures = host.max_reset_failures;
  };
  std::string err;
  target_ = sc_.devices.front().type == DeviceType::kQemu
                ? make_pcie_target(sc_, std::move(tune), &err)
            : sc_.fabric ? make_fabric_target(sc_, seed_, std::move(tune), &err)
                         : make_emulated_target(sc_, seed_, std::move(tune), &err);
  if (!target_) return err;
  auto mgr = bdev::Manager::create(target_->framework());
  if (!mgr) return mgr.error().message;
  mgr_ = std::move(mgr).value();

  event::CurrentThreadScope scope(&target_->thread());
  Target* target = target_.get();
  bdev::NvmeBdevOptions base;
  base.retry_count = host.retry_count;
  base.admin_poll_period_us = host.admin_poll_us;
  base.registry = &target_->registry();
  base.qpair.timeout_us = host.io_timeout_us;
  base.qpair.track_latency = o_.metrics != nullptr;
  if (sc_.fabric) {  // bdev_nvme's recovery knobs for a lost connection
    base.reconnect_delay_us = sc_.fabric->reconnect_delay_ns / 1000;
    base.ctrlr_loss_timeout_us = sc_.fabric->ctrlr_loss_timeout_ns / 1000;
    base.fast_io_fail_timeout_us = sc_.fabric->fast_io_fail_timeout_ns / 1000;
  }
  // Every queue pair is charged to host time; with metrics on, it is also registered (under
  // its controller's name, also for controllers the hot-plug poller attaches later).
  const bool watch_metrics = o_.metrics != nullptr;
  base.qpair_observer = [target, this, watch_metrics](nvme::Qpair* qp, bool created,
                                                      const std::string& controller) {
    if (created) {
      target->watch(qp, true);
      if (watch_metrics) qpairs_.add(qp, controller);
    } else {
      if (watch_metrics) qpairs_.remove(qp);
      target->watch(qp, false);
    }
  };
  if (o_.metrics) {
    metrics_ = std::make_unique<metrics::Exporter>();
    metrics_->add_source(metrics::event_source(target_->framework()));
    metrics_->add_source(qpairs_.source());
    metrics_->add_source([this](metrics::Builder& b) { collect_metrics(b); });
  }
  for (uint32_t i = 0; i < target_->devices(); ++i) {
    auto ctrl = target_->connect(i);
    if (!ctrl) return "device " + sc_.devices[i].name + ": " + ctrl.error().message;
    bdev::NvmeBdevOptions o = base;
    o.name = sc_.devices[i].name;
    auto names = bdev::nvme_attach_controller(*mgr_, std::move(ctrl).value(), o);
    if (!names) return "attach " + o.name + ": " + names.error().message;
    bdev::Bdev* b = mgr_->find(o.name + "n1");
    if (b == nullptr) return "device " + o.name + " has no namespace 1";
    auto t = std::make_unique<DeviceTrack>();
    t->index = i;
    t->bdev = b->name();
    t->block_size = b->block_size();
    t->num_blocks = b->num_blocks();
    t->plp = target_->power_loss_protected(i);
    t->oracle = std::make_unique<oracle::Oracle>(t->block_size, t->num_blocks);
    std::vector<uint8_t> poisoned(t->block_size);
    env::poison(poisoned.data(), poisoned.size());
    t->oracle->name_content(poisoned.data(), "the read buffer's poison: no data transferred");
    // Per-block state only for the span the workloads use (a drive has ~1e9 blocks).
    uint64_t span = 0;
    for (const WorkloadSpec& w : sc_.workloads)
      if (w.bdev == t->bdev) span = std::max(span, w.range_bytes / t->block_size);
    span = std::min(span, t->num_blocks);
    t->busy.assign(span, 0);
    t->written.assign(span, 0);
    tracks_.push_back(std::move(t));
  }
  if (host.hotplug_poll_us > 0) {
    std::vector<bdev::NvmeHotplugSlot> slots;
    for (uint32_t i = 0; i < target_->devices(); ++i) {
      slots.push_back(bdev::NvmeHotplugSlot{sc_.devices[i].name,
                                            [target, i] { return target->present(i); },
                                            [target, i] { return target->connect(i); }});
    }
    if (int rc = bdev::nvme_hotplug_start(*mgr_, std::move(slots), host.hotplug_poll_us, base);
        rc != 0) {
      return "hot-plug poller: error " + std::to_string(rc);
    }
    hotplug_ = true;
  }
  // Bdev statistics are gathered by message walks on the run's thread: a little host work
  // that only runs with metrics on (a run with metrics is deterministic too, but not the
  // same run as without).
  if (o_.metrics) {
    bdev_stats_ = metrics::BdevCollector::start(*mgr_, kBdevStatsPeriodUs);
    metrics_->add_source(bdev_stats_->source());
    metrics_->add_source(metrics::bdev_nvme_source(*mgr_));
  }
  if (!target_->starts_zeroed()) {
    if (std::string e = zero_spans(); !e.empty()) return e;
  }
  if (std::string e = setup_lvols(); !e.empty()) return e;
  t0_ = target_->clock().now();
  reactor_busy0_ = reactor_ticks(true);
  reactor_idle0_ = reactor_ticks(false);
  target_busy0_ = target_->target_busy_ns();
  target_core_busy0_ = target_->target_core_busy_ns();
  target_commands0_ = target_->target_commands();
  rec_ = std::make_unique<Recorder>(sc_.end_ns(), o_.buckets);
  for (size_t i = 0; i < sc_.workloads.size(); ++i) {
    WorkloadSpec w = sc_.workloads[i];
    if (w.lvol) w.bdev = LvolHost::lvol_bdev(sc_, w);
    DeviceTrack* t = nullptr;
    for_each_track([&](DeviceTrack& x) {
      if (x.bdev == w.bdev) t = &x;
    });
    if (t == nullptr) return "workload " + w.name + ": no bdev " + w.bdev;
    auto wl = std::make_unique<Workload>(w, *mgr_, *t, *rec_, target_->registry(),
                                         target_->clock(), seed_ * 7919 + i);
    if (std::string e = wl->init(); !e.empty()) return e;
    wl->start(target_->thread(), t0_);
    workloads_.push_back(std::move(wl));
  }
  for (const FaultSpec& f : sc_.faults) {
    Fault x;
    x.out.spec = f;
    x.out.device = f.device.empty() ? 0 : device_index(f.device);
    x.out.spec.device = sc_.devices[x.out.device].name;  // the default, named in the report
    faults_.push_back(x);
  }
  pulled_.assign(target_->devices(), false);
  for (const Fault& f : faults_) {
    gc_triggers_ |= f.out.spec.trigger == TriggerKind::kOnState && f.out.spec.state == "gc";
  }
  target_->set_after_advance([this] { tick(); });
  armed_ = true;
  return "";
}

// The lvstores and lvols of lvol workloads, each with its own oracle over the lvol's blocks.
std::string Engine::setup_lvols() {
  lvols_ = std::make_unique<LvolHost>(sc_, *mgr_, target_->clock(), target_->registry());
  if (lvols_->empty()) return "";
  if (std::string e = lvols_->create(target_->thread(), [this] { target_->step(); }, io_wait_ns());
      !e.empty()) {
    return e;
  }
  for (const WorkloadSpec& w : sc_.workloads) {
    if (!w.lvol) continue;
    const uint32_t d = device_index(w.bdev.substr(0, w.bdev.size() - 2));
    bdev::Bdev* b = mgr_->find(LvolHost::lvol_bdev(sc_, w));
    if (b == nullptr) return "lvol of workload " + w.name + ": no bdev";
    auto t = std::make_unique<DeviceTrack>();
    t->index = d;
    t->bdev = b->name();
    t->block_size = b->block_size();
    t->num_blocks = b->num_blocks();
    t->plp = tracks_[d]->plp;
    t->oracle = std::make_unique<oracle::Oracle>(t->block_size, t->num_blocks);
    std::vector<uint8_t> poisoned(t->block_size);
    env::poison(poisoned.data(), poisoned.size());
    t->oracle->name_content(poisoned.data(), "the read buffer's poison: no data transferred");
    const uint64_t span = std::min(w.range_bytes / t->block_size, t->num_blocks);
    t->busy.assign(span, 0);
    t->written.assign(span, 0);
    volume_tracks_.push_back(std::move(t));
  }
  return "";
}

uint64_t Engine::last_success(uint32_t device) const {
  uint64_t t = tracks_[device]->last_success_submit_ns;
  for (const auto& v : volume_tracks_)
    if (v->index == device) t = std::max(t, v->last_success_submit_ns);
  return t;
}

std::string Engine::fail_fault(Fault& f, const std::string& why) {
  std::string s = "fault '" + f.out.spec.label + "'";
  if (f.out.spec.line) s += " (line " + std::to_string(f.out.spec.line) + ")";
  s += ": " + why;
  runtime_errors_.push_back(s);
  return s;
}

void Engine::tick() {
  if (!armed_) return;
  const uint64_t t = now();
  if (const size_t k = t / rec_->bucket_ns(); k > poller_bucket_) sample_pollers(k);
  // State triggers fire when a device enters the state (the target says when).
  target_->poll_states(gc_triggers_, [&](uint32_t d, const char* state) {
    for (Fault& f : faults_) {
      if (!f.out.fired && f.out.spec.trigger == TriggerKind::kOnState && f.out.device == d &&
          f.out.spec.state == state && ++f.state_seen == f.out.spec.occurrence) {
        fire(f, t);
      }
    }
  });
  for (Fault& f : faults_) {
    if (f.insert_pending && t >= f.insert_at) insert(f, t);
    if (f.out.fired) continue;
    const FaultSpec& s = f.out.spec;
    if ((s.trigger == TriggerKind::kAt && t >= s.at_ns) ||
        (s.trigger == TriggerKind::kAfterIos && rec_->ios() >= s.after_ios)) {
      fire(f, t);
    }
  }
}

void Engine::fire(Fault& f, uint64_t t) {
  FaultOutcome& o = f.out;
  const FaultSpec& s = o.spec;
  o.fired = true;
  o.fired_ns = t;
  o.recovery_from_ns = t;
  const uint32_t d = o.device;
  uint64_t window = s.window_ns ? s.window_ns : kDefaultWindowNs;
  switch (s.kind) {
    case FaultKind::kHotRemove:
      if (std::string e = target_->hot_remove(d); !e.empty()) fail_fault(f, e);
      pulled_[d] = true;
      f.window = rec_->open_window(d, t, kOpenWindow);
      f.window_open = true;
      if (s.delay_ns) {
        f.insert_pending = true;
        f.insert_at = t + s.delay_ns;
      }
      o.detail = s.delay_ns ? "re-insertion after " + format_ns(s.delay_ns) : "stays out";
      return;
    case FaultKind::kHotInsert:
      if (!pulled_[d]) {
        // validate() refuses what the timeline makes certain; this is the rest (an order
        // decided by I/O counts, device states or equal instants).
        o.detail = "refused: " + sc_.devices[d].name + " is present";
        fail_fault(f, "hot_insert of " + sc_.devices[d].name +
                          ", which is present (no hot_remove took it out before)");
      } else {
        if (std::string e = target_->hot_insert(d); !e.empty()) fail_fault(f, e);
        pulled_[d] = false;
        // Close the window of the removal it ends; that removal's own re-insertion is moot.
        for (Fault& r : faults_) {
          if (r.window_open && r.out.device == d) {
            rec_->close_window(r.window, t + (r.out.spec.window_ns ? r.out.spec.window_ns
                                                                   : kDefaultWindowNs));
            r.window_open = false;
            r.insert_pending = false;
            r.out.recovery_from_ns = t;
          }
        }
      }
      break;
    case FaultKind::kHostReset: host_resets_.push_back(&f); break;
    default: {
      uint64_t range = 0;
      for (const WorkloadSpec& w : sc_.workloads)
        if (w.bdev == tracks_[d]->bdev) range = std::max(range, w.range_bytes);
      range = std::min(range / tracks_[d]->block_size, tracks_[d]->num_blocks);
      const InjectResult r =
          target_->inject(d, s, range, seed_ ^ (0x9e3779b97f4a7c15ull * (t + 1)));
      if (!r.error.empty()) fail_fault(f, r.error);
      o.detail = r.detail;
      if (is_fabric_fault(s.kind)) {
        // Errors may come while it lasts and a window after; recovery counts from its end.
        window += s.duration_ns;
        o.recovery_from_ns = t + s.duration_ns;
      }
      if (r.power_lost) {
        // The host goes down with the power (its lvstores' memory with it): every track of
        // the device learns what may have been lost.
        for_each_track([&](DeviceTrack& t) {
          if (t.index != d) return;
          t.oracle->power_loss(t.plp);
          for (auto& w : workloads_)
            if (w->spec().bdev == t.bdev) w->on_power_loss();
        });
        lvols_->crash(d);
      }
      // Errors may follow for the rest of the run (bad blocks fail reads until rewritten).
      if (r.open_window && !s.window_ns) window = kOpenWindow - t;
      break;
    }
  }
  // A fabric fault hits every controller whose connections cross the link or the target (all
  // of them): its window is every device's, not only the default device's its outcome names.
  f.window = rec_->open_window(is_fabric_fault(s.kind) ? kEveryDevice : d, t,
                               window == kOpenWindow - t ? kOpenWindow : t + window);
}

void Engine::insert(Fault& f, uint64_t t) {
  f.insert_pending = false;
  const uint32_t d = f.out.device;
  if (!pulled_[d]) return;  // a hot_insert brought it back already (and closed the window)
  if (std::string e = target_->hot_insert(d); !e.empty()) fail_fault(f, e);
  pulled_[d] = false;
  rec_->close_window(f.window, t + (f.out.spec.window_ns ? f.out.spec.window_ns : kDefaultWindowNs));
  f.window_open = false;
  f.out.recovery_from_ns = t;
}

// Host actions run between steps, never inside a set-up wait.
void Engine::host_actions() {
  if (host_resets_.empty()) return;
  std::vector<Fault*> due;
  due.swap(host_resets_);
  event::CurrentThreadScope scope(&target_->thread());
  for (Fault* f : due) {
    const std::string& name = sc_.devices[f->out.device].name;
    const int rc = bdev::nvme_reset_controller(*mgr_, name, nullptr, nullptr);
    f->out.detail = rc == 0 ? "bdev_nvme reset requested" : "no controller " + name + " to reset";
  }
}

void Engine::track_recovery(uint64_t t) {
  for (Fault& f : faults_) {
    FaultOutcome& o = f.out;
    if (!o.fired || o.recovered || f.window_open || f.insert_pending) continue;
    const uint64_t ok = last_success(o.device);
    if (ok >= o.recovery_from_ns && ok != 0) {
      o.recovered = true;
      o.recovery_ns = t - o.recovery_from_ns;
    }
  }
}

void Engine::progress(uint64_t t, bool last) {
  if (!o_.progress) return;
  const auto w = Clock::now();
  if (!last && w - last_progress_ < std::chrono::milliseconds(100)) return;
  last_progress_ = w;
  const uint64_t end = std::max<uint64_t>(sc_.end_ns(), 1);
  const int pct = static_cast<int>(std::min<uint64_t>(100, t * 100 / end));
  char bar[21];
  for (int i = 0; i < 20; ++i) bar[i] = i < pct / 5 ? '#' : '.';
  bar[20] = 0;
  // IOPS of the last full bucket.
  const auto& b = rec_->buckets();
  const size_t k = std::min<size_t>(t / rec_->bucket_ns(), b.size() - 1);
  const double iops = k > 0 ? double(b[k - 1].ios) * 1e9 / double(rec_->bucket_ns()) : 0.0;
  size_t fired = 0;
  for (const Fault& f : faults_) fired += f.out.fired;
  std::fprintf(stderr, "\r[%s] %3d%%  %s / %s  %7.0fK IOPS  %lu errors  faults %zu/%zu%s", bar,
               pct, format_ns(t).c_str(), format_ns(end).c_str(), iops / 1e3,
               static_cast<unsigned long>(rec_->errors()), fired, faults_.size(),
               last ? "\n" : "   ");
}

// Lets the hot-plug poller bring back devices that are present again before the sweep.
void Engine::settle() {
  if (!hotplug_) return;
  const uint64_t until = now() + target_->settle_ns();
  auto missing = [&] {
    for (const Fault& f : faults_)
      if (f.insert_pending) return true;
    const auto names = bdev::nvme_controller_names(*mgr_);
    for (uint32_t i = 0; i < target_->devices(); ++i) {
      if (target_->coming_back(i)) return true;
      if (!target_->present(i)) continue;
      if (std::find(names.begin(), names.end(), sc_.devices[i].name) == names.end()) return true;
      if (mgr_->find(tracks_[i]->bdev) == nullptr) return true;
    }
    return !lvols_->all_loaded();
  };
  while (missing() && now() < until) target_->step();
}

// Well past the I/O timeout and the reset it may bring.
uint64_t Engine::io_wait_ns() const {
  return std::max<uint64_t>(1'000'000'000, 50 * sc_.host.io_timeout_us * 1000);
}

Engine::IoEnd Engine::run_io(const std::function<int(bdev::IoCompletionFn, void*)>& submit) {
  auto d = std::make_unique<IoDone>();
  const int rc = submit(IoDone::cb, d.get());
  const uint64_t deadline = now() + io_wait_ns();  // the target's time: virtual or real
  while (rc == 0 && !d->done && now() < deadline) target_->step();
  if (rc == 0 && !d->done) {
    abandoned_.push_back(std::move(d));  // its completion may still come
    return IoEnd::kHung;
  }
  return rc == 0 && d->ok ? IoEnd::kOk : IoEnd::kFailed;
}

// A real device holds what earlier runs left: the span the workloads use is zeroed first, so
// the oracle's "never written" (zeroes) holds and a misdirected write is still caught.
std::string Engine::zero_spans() {
  constexpr uint64_t kChunkBlocks = 256;
  for (auto& tp : tracks_) {
    DeviceTrack& t = *tp;
    auto desc = mgr_->open(t.bdev, true);
    if (!desc) return "zeroing " + t.bdev + ": " + desc.error().message;
    event::IoChannel* ch = mgr_->get_io_channel(desc.value());
    std::string err;
    for (uint64_t lba = 0; lba < t.written.size() && err.empty(); lba += kChunkBlocks) {
      const uint64_t n = std::min<uint64_t>(kChunkBlocks, t.written.size() - lba);
      const IoEnd end = run_io([&](bdev::IoCompletionFn cb, void* arg) {
        return mgr_->write_zeroes(desc.value(), ch, lba, n, cb, arg);
      });
      if (end != IoEnd::kOk) {
        err = "zeroing " + t.bdev + ": Write Zeroes of LBA " + std::to_string(lba) +
              (end == IoEnd::kHung ? " did not complete within " + format_ns(io_wait_ns())
                                   : " failed");
      }
    }
    mgr_->put_io_channel(ch);
    mgr_->close(desc.value());
    if (!err.empty()) return err;
  }
  return "";
}

// Reads back every block ever written, through the bdev layer, and checks it.
void Engine::sweep() {
  auto mem = env::DmaRegion::create(target_->registry(), size_t{kSweepBlocks} * 4096);
  if (!mem) {
    runtime_errors_.push_back("sweep: " + mem.error().message);
    return;
  }
  event::CurrentThreadScope scope(&target_->thread());
  for_each_track([&](DeviceTrack& t) {
    auto desc = mgr_->open(t.bdev, false);
    if (!desc) return;  // the device is gone for good: nothing to read it through
    event::IoChannel* ch = mgr_->get_io_channel(desc.value());
    const uint32_t max = std::min<uint32_t>(kSweepBlocks, 4096 * kSweepBlocks / t.block_size);
    uint64_t lba = 0;
    const uint64_t span = t.written.size();
    while (lba < span) {
      if (!t.written[lba]) {
        ++lba;
        continue;
      }
      uint32_t n = 1;
      while (n < max && lba + n < span && t.written[lba + n]) ++n;
      env::poison(static_cast<uint8_t*>(mem.value()->data()), size_t{n} * t.block_size);
      const IoEnd end = run_io([&](bdev::IoCompletionFn cb, void* arg) {
        return mgr_->read(desc.value(), ch, mem.value()->data(), lba, n, cb, arg);
      });
      if (end == IoEnd::kHung) {
        // The device holds its I/O: every further read would wait as long. One line says so
        // (a hung device gave one line per read, ~250 of them).
        uint64_t unchecked = 0;
        for (uint64_t b = lba; b < span; ++b) unchecked += t.written[b];
        runtime_errors_.push_back("sweep of " + t.bdev + ": a read of LBA " +
                                  std::to_string(lba) + " did not complete within " +
                                  format_ns(io_wait_ns()) + "; " + std::to_string(unchecked) +
                                  " written blocks from there on not checked");
        break;
      }
      if (end == IoEnd::kOk) {
        t.note(t.oracle->check_read(lba, n, mem.value()->data()));
        t.swept_blocks += n;
      } else {
        ++t.sweep_read_errors;
      }
      lba += n;
    }
    mgr_->put_io_channel(ch);
    mgr_->close(desc.value());
  });
}

uint64_t Engine::outstanding() const {
  uint64_t n = 0;
  for (const auto& w : workloads_) n += w->stats().outstanding;
  return n;
}

void Engine::teardown() {
  if (!target_) return;
  metrics_.reset();  // its sources read the target
  armed_ = false;
  {
    event::CurrentThreadScope scope(&target_->thread());
    if (bdev_stats_) bdev_stats_->stop();
    // No new I/O; what is in flight still ends into the workloads' open channels (a channel
    // put with I/Os outstanding would be freed under their completions).
    for (auto& w : workloads_) w->stop_io();
    if (outstanding() > 0 && mgr_) {
      // A run that hung leaves commands a device holds: clear the devices' fault rules and
      // reset the controllers, which ends them (bdev_nvme retries them on the fresh queues).
      FaultSpec clear;
      clear.kind = FaultKind::kClear;
      for (uint32_t d = 0; d < target_->devices(); ++d) {
        if (target_->present(d)) (void)target_->inject(d, clear, 0, 0);
      }
      for (const std::string& n : bdev::nvme_controller_names(*mgr_)) {
        (void)bdev::nvme_reset_controller(*mgr_, n, nullptr, nullptr);
      }
    }
  }
  for (int g = 0; g < 1'000'000 && outstanding() > 0; ++g) target_->step();
  {
    event::CurrentThreadScope scope(&target_->thread());
    // The lvstores go first: the bdevs they stand on are about to.
    for (int g = 0; lvols_ && g < 1'000'000 && !lvols_->shut_down(); ++g) target_->step();
    if (mgr_) {
      if (hotplug_) bdev::nvme_hotplug_stop(*mgr_);
      for (const std::string& n : bdev::nvme_controller_names(*mgr_)) {
        bdev::nvme_detach_controller(*mgr_, n);
      }
    }
  }
  // Each workload closes once its I/Os ended (the controllers' bdevs go when their last user
  // closes).
  auto settled = [this] {
    event::CurrentThreadScope scope(&target_->thread());
    bool closed = true;
    for (auto& w : workloads_) {
      if (w->stats().outstanding == 0) w->stop(); else closed = false;
    }
    return closed && (!mgr_ || bdev::nvme_controller_names(*mgr_).empty());
  };
  for (int g = 0; g < 1'000'000 && !settled(); ++g) target_->step();
  if (outstanding() > 0) {
    // I/O that never ended still points into the workloads, the host's bdev layer and the
    // target (a fabric one's host connections poll on as its machines stop): nothing is freed
    // under it — the host stack is left in memory, as a fabric target that cannot stop is.
    std::fprintf(stderr, "run: %lu I/Os never ended; the host stack is left in memory\n",
                 static_cast<unsigned long>(outstanding()));
    // Kept reachable (a leak checker is told what was left, not surprised by it).
    static auto* left = new std::vector<void*>;
    for (auto& w : workloads_) left->push_back(w.release());
    left->push_back(lvols_.release());
    left->push_back(mgr_.release());
    left->push_back(bdev_stats_.release());
    left->push_back(target_.release());
    return;
  }
  workloads_.clear();
  lvols_.reset();
  mgr_.reset();
  bdev_stats_.reset();
  target_->set_after_advance(nullptr);
  target_.reset();
}

RunResult Engine::run() {
  RunResult r;
  r.scenario = sc_.name;
  r.file = sc_.file;
  r.seed = seed_;
  r.replay = o_.replay;
  r.planned_ns = sc_.end_ns();
  wall0_ = Clock::now();
  r.time = o_.time.empty() ? sc_.time : o_.time;
  if (sc_.fabric && sc_.fabric->network == "kernel" && r.time != "realtime") {
    r.error = "topology.fabric.network: kernel sockets run on the wall clock: they cannot run "
              "in virtual time (use --time realtime)";
    return r;
  }
  if (std::string e = setup(); !e.empty()) {
    r.error = e;
    return r;
  }
  // Set-up (controller initialisation) ran in the target's own time (emulated: virtual); the
  // workloads run in the mode asked for.
  if (std::string e = target_->set_realtime(r.time == "realtime"); !e.empty()) {
    r.error = e;
    return r;
  }
  // A run may overrun its plan while I/O drains after recovery; a stall beyond this is a hang.
  // The stall is counted from the last I/O that ended (or the plan's end). One step can jump
  // past it — a synchronous recovery wait on the host's reactor (a reset waiting out CAP.TO,
  // 10.5 s, as Linux's does: chaos seed 7881664) — and the run then gets one more grace
  // period from that step for I/O to end before it is called a hang.
  // A fabric host holds a lost association's writes for KATO + CQT before sending them again.
  const uint64_t grace =
      std::max<uint64_t>({100'000'000, 50 * sc_.host.io_timeout_us * 1000,
                          sc_.fabric ? fabric_write_fence_ns(*sc_.fabric, sc_.host) + 50'000'000
                                     : 0});
  // Each fabric host reset may fence the writes it ended again (a target restart, then a
  // device that loses the resent writes: fabric chaos seed 9320967, two fences back to back),
  // so a reset the host completed since the last I/O ended is progress: it buys one more
  // grace, a few times at most (a host that resets for ever with nothing completing hangs).
  constexpr int kResetExtensions = 4;
  int extensions = 0;
  uint64_t resets_seen = sc_.fabric ? host_resets() : 0, resets_read_at = now();
  bool hung = false;
  uint64_t ended = 0, last_end_ns = 0, overrun_at = 0, t_prev = now();
  for (;;) {
    target_->step();
    host_actions();
    const uint64_t t = now();
    track_recovery(t);
    progress(t, false);
    publish_metrics(false);
    bool all = true;
    uint64_t ended_now = 0;
    for (auto& w : workloads_) {
      all &= w->done();
      const WorkloadStats& st = w->stats();
      ended_now += st.reads + st.writes + st.flushes + st.errors;
    }
    if (all) break;
    if (ended_now != ended) {
      ended = ended_now;
      last_end_ns = t;
      overrun_at = 0;
      if (sc_.fabric && t - resets_read_at >= 1'000'000) {  // resets before this I/O ended
        resets_seen = host_resets();
        resets_read_at = t;
      }
    }
    if (t > std::max(sc_.end_ns(), last_end_ns) + grace && sc_.fabric &&
        extensions < kResetExtensions) {
      if (const uint64_t r = host_resets(); r != resets_seen) {
        resets_seen = r;
        ++extensions;
        last_end_ns = t;
      }
    }
    if (t > std::max(sc_.end_ns(), last_end_ns) + grace) {
      if (overrun_at == 0 && t - t_prev > grace) overrun_at = t;  // this step jumped past
      if (overrun_at == 0 || t > overrun_at + grace) {
        hung = true;
        break;
      }
    }
    t_prev = t;
  }
  progress(now(), true);
  if (hung) {
    uint64_t stuck = 0;
    std::string who;
    for (auto& w : workloads_) {
      stuck += w->stats().outstanding;
      if (w->stats().outstanding) {
        who += " " + w->spec().name + ":" + std::to_string(w->stats().outstanding);
      }
    }
    for (uint32_t i = 0; i < target_->devices(); ++i) {
      who += " " + sc_.devices[i].name + target_->describe(i);
    }
    r.failures.push_back("the run did not finish: " + std::to_string(stuck) +
                         " I/Os still outstanding " + format_ns(now() - sc_.end_ns()) +
                         " after the workloads' end (a hang):" + who);
  }
  // Re-insertions still pending happen during the settle (the timeline stays armed).
  settle();
  armed_ = false;
  r.simulated_ns = now();
  take_cpu_time(r);
  if (!lvols_->empty()) {
    // What the lvols hold is judged from what their metadata on the device says.
    event::CurrentThreadScope scope(&target_->thread());
    if (std::string e = lvols_->reload_all([this] { target_->step(); }, io_wait_ns()); !e.empty())
      runtime_errors_.push_back(e);
  }
  sweep();
  r.fabric = target_->fabric_counters();
  r.retransmissions = target_->retransmissions();
  judge(r);
  r.trace_hash = target_->trace_hash();
  r.trace_records = target_->trace_records();
  r.steps = target_->steps();
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - wall0_).count();
  expectations_judged_ = true;
  passed_ = r.passed;
  expectation_failures_ = r.failures.size();
  publish_metrics(true);
  return r;
}

}  // namespace pollux::scenarios::engine

namespace pollux::scenarios {

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  engine::Engine e(scenario, options);
  return e.run();
}

}  // namespace pollux::scenarios
