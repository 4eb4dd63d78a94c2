#include "scenarios/runner/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/env/pattern.h"
#include "driver/metrics/bdev_source.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/nvme_source.h"
#include "scenarios/runner/lvol_host.h"
#include "scenarios/runner/target.h"
#include "scenarios/runner/workload.h"

namespace pollux::scenarios {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kDefaultWindowNs = 10'000'000;
constexpr uint32_t kSweepBlocks = 64;
constexpr uint64_t kBdevStatsPeriodUs = 1000;  // virtual time: runs last milliseconds

struct Fault {
  FaultOutcome out;
  bool insert_pending = false;  // hot_remove with reinsert_after
  uint64_t insert_at = 0;
  size_t window = 0;
  bool window_open = false;
  uint32_t state_seen = 0;
};

class Engine {
 public:
  Engine(const Scenario& sc, const RunOptions& o) : sc_(sc), o_(o) {
    seed_ = o.seed ? o.seed : sc.seed;
  }
  ~Engine() { teardown(); }
  RunResult run();

 private:
  std::string setup();
  void tick();  // after every advance of virtual time: the fault timeline
  void fire(Fault& f, uint64_t now);
  void insert(Fault& f, uint64_t now);
  void host_actions();
  void track_recovery(uint64_t now);
  void progress(uint64_t now, bool last);
  void settle();
  void sweep();
  std::string zero_spans();
  // One bdev I/O (submit(cb, arg) returns the submission's rc), run to its end or for at
  // most io_wait_ns() of the target's time (kHung: given up on, its completion may come).
  enum class IoEnd { kOk, kFailed, kHung };
  IoEnd run_io(const std::function<int(bdev::IoCompletionFn, void*)>& submit);
  uint64_t io_wait_ns() const;
  struct IoDone {
    bool done = false, ok = false;
    static void cb(bdev::BdevIo&, bool success, void* arg) {
      auto* d = static_cast<IoDone*>(arg);
      d->done = true;
      d->ok = success;
    }
  };
  void judge(RunResult& r);
  void teardown();
  void sample_pollers(size_t bucket);  // poller runs since the last sample, into `bucket`
  void collect_metrics(metrics::Builder& b) const;  // devices, controllers, the run itself
  void publish_metrics(bool now);
  uint64_t now() const { return target_->clock().now() - t0_; }
  uint32_t device_index(const std::string& name) const;
  std::string fail_fault(Fault& f, const std::string& why);
  std::string setup_lvols();
  uint64_t last_success(uint32_t device) const;  // of its own and its lvols' workloads
  template <class F>
  void for_each_track(F&& f) {  // devices' and lvols'
    for (auto& t : tracks_) f(*t);
    for (auto& t : volume_tracks_) f(*t);
  }

  Scenario sc_;
  RunOptions o_;
  uint64_t seed_ = 1;
  std::unique_ptr<Target> target_;
  std::unique_ptr<bdev::Manager> mgr_;
  std::vector<std::unique_ptr<DeviceTrack>> tracks_;          // per device
  std::vector<std::unique_ptr<DeviceTrack>> volume_tracks_;   // per lvol workload
  std::unique_ptr<LvolHost> lvols_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  std::unique_ptr<Recorder> rec_;
  std::vector<Fault> faults_;
  std::vector<bool> pulled_;  // per device: hot-removed by the timeline, not inserted again
  bool gc_triggers_ = false;
  std::vector<Fault*> host_resets_;  // host actions waiting for the main loop
  std::vector<std::string> runtime_errors_;
  std::vector<std::unique_ptr<IoDone>> abandoned_;  // I/Os given up on: kept past teardown
  uint64_t t0_ = 0;
  bool armed_ = false;
  bool hotplug_ = false;
  Clock::time_point wall0_, last_progress_, last_metrics_;
  metrics::QpairRegistry qpairs_;
  std::unique_ptr<metrics::Exporter> metrics_;  // the sources, collected on this thread
  std::unique_ptr<metrics::BdevCollector> bdev_stats_;
  struct PollerTrack {
    uint64_t runs = 0, busy_runs = 0;  // at the last sample
    PollerSeries series;
  };
  std::map<std::string, PollerTrack> pollers_;
  size_t poller_bucket_ = 0;  // the bucket the next sample's runs belong to
  bool expectations_judged_ = false, passed_ = false;
  uint64_t expectation_failures_ = 0;
};

// "random, 50% reads, 4 KiB, QD 16, 12ms from 0 over 8 MiB, flush every 32, on a thin lvol"
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
  base.qpair_observer = [target, this, watch_metrics](const nvme::Qpair* qp, bool created,
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
  f.window = rec_->open_window(d, t, window == kOpenWindow - t ? kOpenWindow : t + window);
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

void Engine::teardown() {
  if (!target_) return;
  metrics_.reset();  // its sources read the target
  armed_ = false;
  {
    event::CurrentThreadScope scope(&target_->thread());
    if (bdev_stats_) bdev_stats_->stop();
    for (auto& w : workloads_) w->stop();
    // The lvstores go first: the bdevs they stand on are about to.
    for (int g = 0; lvols_ && g < 1'000'000 && !lvols_->shut_down(); ++g) target_->step();
    if (mgr_) {
      if (hotplug_) bdev::nvme_hotplug_stop(*mgr_);
      for (const std::string& n : bdev::nvme_controller_names(*mgr_)) {
        bdev::nvme_detach_controller(*mgr_, n);
      }
    }
  }
  for (int g = 0; mgr_ && g < 1'000'000 && !bdev::nvme_controller_names(*mgr_).empty(); ++g) {
    target_->step();
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
  if (std::string e = setup(); !e.empty()) {
    r.error = e;
    return r;
  }
  r.time = o_.time.empty() ? sc_.time : o_.time;
  // Set-up (controller initialisation) ran in the target's own time (emulated: virtual); the
  // workloads run in the mode asked for.
  if (std::string e = target_->set_realtime(r.time == "realtime"); !e.empty()) {
    r.error = e;
    return r;
  }
  // A run may overrun its plan while I/O drains after recovery; a stall beyond this is a hang.
  const uint64_t grace = std::max<uint64_t>(100'000'000, 50 * sc_.host.io_timeout_us * 1000);
  bool hung = false;
  for (;;) {
    target_->step();
    host_actions();
    const uint64_t t = now();
    track_recovery(t);
    progress(t, false);
    publish_metrics(false);
    bool all = true;
    for (auto& w : workloads_) all &= w->done();
    if (all) break;
    if (t > sc_.end_ns() + grace) {
      hung = true;
      break;
    }
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
  if (!lvols_->empty()) {
    // What the lvols hold is judged from what their metadata on the device says.
    event::CurrentThreadScope scope(&target_->thread());
    if (std::string e = lvols_->reload_all([this] { target_->step(); }, io_wait_ns()); !e.empty())
      runtime_errors_.push_back(e);
  }
  sweep();
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

// ------------------------------------------------------------------------- metrics ----

void Engine::collect_metrics(metrics::Builder& b) const {
  using metrics::Labels;
  target_->collect_metrics(b, now());
  const Labels sl = {{"scenario", sc_.name}};
  b.counter("pollux_scenario_ios_total", "I/Os the workloads completed", sl,
            static_cast<double>(rec_->ios()));
  b.counter("pollux_scenario_io_errors_total", "I/Os that ended in error", sl,
            static_cast<double>(rec_->errors()));
  b.counter("pollux_scenario_io_errors_outside_windows_total",
            "I/O errors outside every fault window", sl,
            static_cast<double>(rec_->errors_outside_windows()));
  std::map<std::string, uint64_t> fired;
  for (const Fault& f : faults_) fired[to_string(f.out.spec.kind)] += f.out.fired;
  for (const auto& [kind, count] : fired) {
    b.counter("pollux_scenario_faults_fired_total", "Faults of the timeline that fired",
              {{"scenario", sc_.name}, {"kind", kind}}, static_cast<double>(count));
  }
  b.gauge("pollux_scenario_faults_planned", "Faults in the timeline", sl,
          static_cast<double>(faults_.size()));
  uint64_t violations = 0;
  for (const auto& t : tracks_) violations += t->violations;
  for (const auto& t : volume_tracks_) violations += t->violations;
  b.counter("pollux_scenario_oracle_violations_total",
            "Reads the data-integrity oracle rejected (lost, stale, torn, misdirected)", sl,
            static_cast<double>(violations));
  b.histogram("pollux_scenario_io_latency_seconds", "Latency of the workloads' I/O", sl,
              rec_->latency(), 1e-9, metrics::latency_bounds());
  if (!expectations_judged_) return;
  b.gauge("pollux_scenario_expectations", "Expectations judged at the end, by result",
          {{"scenario", sc_.name}, {"result", "failed"}},
          static_cast<double>(expectation_failures_));
  b.gauge("pollux_scenario_passed", "1 if every expectation was met", sl, passed_ ? 1 : 0);
}

void Engine::publish_metrics(bool now) {
  if (!o_.metrics || !metrics_) return;
  const auto w = Clock::now();
  if (!now && w - last_metrics_ < std::chrono::milliseconds(50)) return;
  last_metrics_ = w;
  o_.metrics->publish(metrics_->collect());
}

void Engine::sample_pollers(size_t next_bucket) {
  const size_t buckets = rec_->buckets().size();
  // Pollers of one name on one thread (every bdev channel has a "bdev_retry") are one series,
  // as in the metrics: sum them first.
  std::map<std::string, std::pair<uint64_t, uint64_t>> now;  // name -> (runs, busy runs)
  for (const event::Thread* th : target_->framework().threads()) {
    for (const event::PollerSample& p : th->poller_samples()) {
      auto& [runs, busy] = now[th->name() + "/" + p.name];
      runs += p.runs;
      busy += p.busy_runs;
    }
  }
  for (const auto& [name, counts] : now) {
    PollerTrack& pt = pollers_[name];
    if (pt.series.busy_share.empty()) {
      pt.series.name = name;
      pt.series.busy_share.assign(buckets, 0);
    }
    // Fewer than last time: pollers of this name went and came back (a re-attach); count
    // from zero.
    const bool restarted = counts.first < pt.runs;
    const uint64_t runs = restarted ? counts.first : counts.first - pt.runs;
    const uint64_t busy =
        restarted ? counts.second : counts.second - std::min(counts.second, pt.busy_runs);
    if (runs > 0 && poller_bucket_ < buckets) {
      pt.series.busy_share[poller_bucket_] = double(busy) / double(runs);
    }
    pt.series.runs += runs;
    pt.series.busy_runs += busy;
    pt.runs = counts.first;
    pt.busy_runs = counts.second;
  }
  poller_bucket_ = next_bucket;
}

void Engine::judge(RunResult& r) {
  const Expectations& e = sc_.expect;
  r.ios = rec_->ios();
  r.errors = rec_->errors();
  r.errors_outside_windows = rec_->errors_outside_windows();
  r.latency = rec_->latency();
  r.latency_outside = rec_->latency_outside_faults();
  r.series = rec_->buckets();
  r.bucket_ns = rec_->bucket_ns();
  sample_pollers(poller_bucket_ + 1);
  for (auto& [name, pt] : pollers_) r.pollers.push_back(pt.series);
  std::stable_sort(r.pollers.begin(), r.pollers.end(),
                   [](const PollerSeries& a, const PollerSeries& b) { return a.busy_runs > b.busy_runs; });
  for (const std::string& s : runtime_errors_) r.failures.push_back(s);
  r.notes = lvols_->log();
  for (const std::string& s : target_->errors()) r.failures.push_back(s);
  r.devices_at_end = 0;
  for (uint32_t i = 0; i < target_->devices(); ++i) {
    DeviceOutcome d;
    d.name = sc_.devices[i].name;
    d.profile = sc_.devices[i].profile;
    d.bdev = tracks_[i]->bdev;
    d.attached_at_end = mgr_->find(d.bdev) != nullptr;
    r.devices_at_end += d.attached_at_end;
    if (auto s = bdev::nvme_controller_stats(*mgr_, d.name)) {
      d.host_resets = s.value().resets;
      d.host_reset_failures = s.value().reset_failures;
      d.retries = s.value().retries;
      d.removed_failures = s.value().removed_failures;
    }
    target_->outcome(i, &d);
    for_each_track([&](DeviceTrack& t) {  // the device's and its lvols'
      if (t.index != i) return;
      d.swept_blocks += t.swept_blocks;
      d.sweep_read_errors += t.sweep_read_errors;
      d.violations += t.violations;
      r.violation_count += t.violations;
      for (const std::string& v : t.violation_text)
        if (r.violations.size() < 20) r.violations.push_back(v);
    });
    r.devices.push_back(d);
  }
  uint64_t ok_ios = 0;
  for (auto& w : workloads_) {
    const WorkloadStats& s = w->stats();
    r.workloads.push_back(WorkloadOutcome{w->spec().name, w->spec().bdev, describe(w->spec()),
                                          s.reads, s.writes, s.flushes, s.errors,
                                          s.verified_reads, s.reopens, s.crossed_power_loss});
    ok_ios += s.reads + s.writes + s.flushes - s.errors;
  }
  for (const Fault& f : faults_) {
    r.faults.push_back(f.out);
    if (f.out.fired) {
      const Window& w = rec_->window(f.window);
      r.faults.back().window_from_ns = w.from_ns;
      r.faults.back().window_to_ns = w.to_ns;
    }
  }

  // Every expectation is recorded with what was measured (report.json, report.html); a
  // failed one is also a failure in words.
  auto expect = [&r](std::string name, std::string measured, std::string limit, bool ok,
                     std::string failure) {
    r.expectations.push_back({std::move(name), std::move(measured), std::move(limit), ok});
    if (!ok) r.failures.push_back(std::move(failure));
  };
  const auto n = [](uint64_t v) { return std::to_string(v); };
  if (e.no_lost_writes) {
    expect("data integrity: oracle violations", n(r.violation_count), "= 0", r.violation_count == 0,
           r.violation_count ? "data integrity: " + n(r.violation_count) + " violations (first: " +
                                   r.violations.front() + ")"
                             : "");
  }
  for (const oracle::ViolationKind k : e.detects) {
    uint64_t seen = 0;
    for_each_track([&](DeviceTrack& t) { seen += t.violations_by_kind[static_cast<size_t>(k)]; });
    expect(std::string("the oracle detects ") + oracle::to_string(k) + " data", n(seen), ">= 1",
           seen > 0,
           std::string("the oracle was to detect ") + oracle::to_string(k) +
               " data and found none: a corruption went unnoticed");
  }
  if (e.errors_only_in_windows) {
    expect("I/O errors outside fault windows", n(r.errors_outside_windows), "= 0",
           r.errors_outside_windows == 0,
           n(r.errors_outside_windows) + " I/O errors outside every fault window (first at " +
               format_ns(rec_->first_error_outside_ns()) + ")");
  }
  if (e.max_errors != ~0ull) {
    expect("I/O errors", n(r.errors), "<= " + n(e.max_errors), r.errors <= e.max_errors,
           n(r.errors) + " I/O errors (at most " + n(e.max_errors) + " expected)");
  }
  if (e.min_errors > 0) {
    expect("I/O errors", n(r.errors), ">= " + n(e.min_errors), r.errors >= e.min_errors,
           n(r.errors) + " I/O errors (at least " + n(e.min_errors) + " expected)");
  }
  if (e.errors_within_ns != 0 && r.errors > 0) {
    const uint64_t slowest = rec_->max_error_latency_ns();
    expect("slowest failed I/O", format_ns(slowest), "<= " + format_ns(e.errors_within_ns),
           slowest <= e.errors_within_ns,
           "an I/O took " + format_ns(slowest) + " to fail (at most " +
               format_ns(e.errors_within_ns) + " expected)");
  }
  expect("successful I/Os", n(ok_ios), ">= " + n(e.min_ios), ok_ios >= e.min_ios,
         n(ok_ios) + " successful I/Os (at least " + n(e.min_ios) + " expected)");
  for (const Fault& f : faults_) {
    const FaultOutcome& o = f.out;
    const std::string what = "fault '" + o.spec.label + "'" +
                             (o.spec.line ? " (line " + std::to_string(o.spec.line) + ")" : "");
    if (!o.fired) {
      expect(what + " fires", "never", "fires", false, what + " never fired");
      continue;
    }
    if (e.recovery_within_ns == 0 || f.window_open || o.recovery_from_ns > sc_.end_ns()) continue;
    const std::string bound = format_ns(e.recovery_within_ns);
    if (!o.recovered) {
      expect("recovery after " + what, "none", "<= " + bound, false,
             what + ": no successful I/O on " + sc_.devices[o.device].name +
                 " after it (recovery bound " + bound + ")");
    } else {
      expect("recovery after " + what, format_ns(o.recovery_ns), "<= " + bound,
             o.recovery_ns <= e.recovery_within_ns,
             what + ": recovered in " + format_ns(o.recovery_ns) + " (bound " + bound + ")");
    }
  }
  for (const LatencyExpectation& l : e.latency_outside_faults) {
    const uint64_t v = r.latency_outside.quantile(l.percentile / 100.0);
    char b[160];
    std::snprintf(b, sizeof b, "p%g latency outside fault windows is %.1f us (at most %lu us)",
                  l.percentile, v / 1e3, static_cast<unsigned long>(l.max_us));
    expect(fmt::format("p{:g} latency outside fault windows", l.percentile),
           fmt::format("{:.1f} us", v / 1e3), fmt::format("<= {} us", l.max_us),
           v <= l.max_us * 1000, b);
  }
  if (e.devices_at_end >= 0) {
    expect("devices attached at the end", n(r.devices_at_end), "= " + n(e.devices_at_end),
           r.devices_at_end == static_cast<uint32_t>(e.devices_at_end),
           n(r.devices_at_end) + " devices attached at the end (" + n(e.devices_at_end) +
               " expected)");
  }
  r.passed = r.failures.empty();
}

}  // namespace

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  Engine e(scenario, options);
  return e.run();
}

}  // namespace pollux::scenarios
