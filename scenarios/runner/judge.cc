// The end of a run: the expectations judged (each with what was measured), the metrics the run
// publishes, and the pollers' busy-run series.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "driver/bdev/modules/nvme.h"
#include "driver/event/reactor.h"
#include "scenarios/runner/engine.h"

namespace pollux::scenarios::engine {

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

uint64_t Engine::reactor_ticks(bool busy) const {
  event::Framework& fw = target_->framework();
  uint64_t t = 0;
  for (std::size_t i = 0; i < fw.reactor_count(); ++i) {
    const event::ReactorStats& s = fw.reactor(i).stats();
    t += (busy ? s.busy_ticks : s.idle_ticks).load(std::memory_order_relaxed);
  }
  return t;
}

uint64_t Engine::host_resets() const {
  if (!mgr_) return 0;
  uint64_t n = 0;
  for (const std::string& name : bdev::nvme_controller_names(*mgr_)) {
    if (auto s = bdev::nvme_controller_stats(*mgr_, name)) n += s.value().resets;
  }
  return n;
}

void Engine::sample_pollers(size_t next_bucket) {
  const size_t buckets = rec_->buckets().size();
  const env::Clock& cpu = target_->framework().cpu_clock();
  const uint64_t t = now();
  const double span_ns = static_cast<double>(std::max<uint64_t>(1, t - poller_sampled_ns_));
  poller_sampled_ns_ = t;
  // Pollers of one name on one thread (every bdev channel has a "bdev_retry") are one series,
  // as in the metrics: sum them first.
  struct Counts {
    uint64_t runs = 0, busy_runs = 0, busy_ticks = 0;
  };
  std::map<std::string, Counts> now;
  for (const event::Thread* th : target_->framework().threads()) {
    for (const event::PollerSample& p : th->poller_samples()) {
      Counts& c = now[th->name() + "/" + p.name];
      c.runs += p.runs;
      c.busy_runs += p.busy_runs;
      c.busy_ticks += p.busy_ticks;
    }
  }
  for (const auto& [name, c] : now) {
    PollerTrack& pt = pollers_[name];
    if (pt.series.busy_share.empty()) {
      pt.series.name = name;
      pt.series.busy_share.assign(buckets, 0);
      pt.series.busy_time_share.assign(buckets, 0);
    }
    // Fewer than last time: pollers of this name went and came back (a re-attach); count
    // from zero.
    const bool restarted = c.runs < pt.runs;
    const uint64_t runs = restarted ? c.runs : c.runs - pt.runs;
    const uint64_t busy = restarted ? c.busy_runs : c.busy_runs - std::min(c.busy_runs, pt.busy_runs);
    const uint64_t ticks =
        restarted ? c.busy_ticks : c.busy_ticks - std::min(c.busy_ticks, pt.busy_ticks);
    const uint64_t busy_ns = static_cast<uint64_t>(cpu.ticks_to_seconds(ticks) * 1e9);
    if (poller_bucket_ < buckets) {
      if (runs > 0) pt.series.busy_share[poller_bucket_] = double(busy) / double(runs);
      pt.series.busy_time_share[poller_bucket_] = std::min(1.0, double(busy_ns) / span_ns);
    }
    pt.series.runs += runs;
    pt.series.busy_runs += busy;
    pt.series.busy_ns += busy_ns;
    pt.runs = c.runs;
    pt.busy_runs = c.busy_runs;
    pt.busy_ticks = c.busy_ticks;
  }
  poller_bucket_ = next_bucket;
}

// At the run's end, before the sweep: what the sweep's reads cost is not the run's.
void Engine::take_cpu_time(RunResult& r) {
  sample_pollers(poller_bucket_ + 1);
  for (auto& [name, pt] : pollers_) r.pollers.push_back(pt.series);
  std::stable_sort(r.pollers.begin(), r.pollers.end(),
                   [](const PollerSeries& a, const PollerSeries& b) {
                     return a.busy_ns != b.busy_ns ? a.busy_ns > b.busy_ns
                                                   : a.busy_runs > b.busy_runs;
                   });
  const env::Clock& cpu = target_->framework().cpu_clock();
  auto ns = [&cpu](uint64_t ticks) { return static_cast<uint64_t>(cpu.ticks_to_seconds(ticks) * 1e9); };
  r.host_busy_ns = ns(reactor_ticks(true) - reactor_busy0_);
  r.host_idle_ns = ns(reactor_ticks(false) - reactor_idle0_);
  r.target_busy_ns = target_->target_busy_ns() - target_busy0_;
  r.target_commands = target_->target_commands() - target_commands0_;
  r.target_cores = target_->target_cores();
  r.target_core_busy_ns = target_->target_core_busy_ns();
  for (size_t i = 0; i < r.target_core_busy_ns.size() && i < target_core_busy0_.size(); ++i)
    r.target_core_busy_ns[i] -= target_core_busy0_[i];
  r.realtime_max_lag_ns = target_->realtime_max_lag_ns();
}

void Engine::judge(RunResult& r) {
  const Expectations& e = sc_.expect;
  r.ios = rec_->ios();
  r.errors = rec_->errors();
  r.errors_outside_windows = rec_->errors_outside_windows();
  r.latency = rec_->latency();
  r.latency_outside = rec_->latency_outside_faults();
  rec_->finish();
  r.series = rec_->buckets();
  r.bucket_ns = rec_->bucket_ns();

  for (const std::string& s : runtime_errors_) r.failures.push_back(s);
  for (const std::string& n : lvols_->log()) r.notes.push_back("lvol: " + n);
  for (const std::string& n : target_->notes()) r.notes.push_back(n);
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
  if (e.min_retransmissions > 0) {
    expect("retransmissions", n(r.retransmissions), ">= " + n(e.min_retransmissions),
           r.retransmissions >= e.min_retransmissions,
           n(r.retransmissions) + " packets or segments sent again (at least " +
               n(e.min_retransmissions) + " expected: the fault was to cost retransmissions)");
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

}  // namespace pollux::scenarios::engine
