#include "tools/top/rows.h"

#include <cmath>
#include <tuple>

namespace pollux::top {
namespace {

// A counter that went down was reset (the process restarted): as Prometheus does, assume it
// counted up from zero since.
double increase(double now, double before) {
  return now >= before ? now - before : now;
}

std::optional<double> finite(double v) {
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<double> percent(double part, double whole) {
  if (!(whole > 0)) return std::nullopt;
  return finite(100 * part / whole);
}

template <typename Map, typename Key>
const typename Map::mapped_type* find(const Map& map, const Key& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// What the counters did since `before`, or their totals when there is no `before`.
ReactorCounters change(const ReactorCounters& now, const ReactorCounters* before) {
  if (!before) return now;
  ReactorCounters d = now;  // The thread count is a gauge: its current value stays.
  d.busy_seconds = increase(now.busy_seconds, before->busy_seconds);
  d.idle_seconds = increase(now.idle_seconds, before->idle_seconds);
  d.iterations = increase(now.iterations, before->iterations);
  return d;
}

ThreadCounters change(const ThreadCounters& now, const ThreadCounters* before) {
  if (!before) return now;
  return {increase(now.busy_seconds, before->busy_seconds),
          increase(now.idle_seconds, before->idle_seconds),
          increase(now.messages, before->messages), now.cpumask};
}

PollerCounters change(const PollerCounters& now, const PollerCounters* before) {
  if (!before) return now;
  return {increase(now.runs, before->runs), increase(now.busy_runs, before->busy_runs),
          increase(now.busy_seconds, before->busy_seconds)};
}

// Pollers per reactor and per thread.
std::size_t pollers_of(const Snapshot& s, const std::string& reactor,
                       const std::string* thread = nullptr) {
  std::size_t n = 0;
  for (const auto& entry : s.pollers) {
    const PollerKey& key = entry.first;
    n += std::get<0>(key) == reactor && (thread == nullptr || std::get<1>(key) == *thread);
  }
  return n;
}

// The previous scrape when rates can be computed from it.
const Snapshot* usable(const Snapshot* prev, double elapsed_seconds) {
  return elapsed_seconds > 0 ? prev : nullptr;
}

}  // namespace

std::vector<ReactorRow> reactor_rows(const Snapshot& now, const Snapshot* prev,
                                     double elapsed_seconds) {
  prev = usable(prev, elapsed_seconds);
  std::vector<ReactorRow> rows;
  for (const auto& [reactor, counters] : now.reactors) {
    // An entity missing from the previous scrape is new: it gets first-scrape figures.
    const ReactorCounters* before = prev ? find(prev->reactors, reactor) : nullptr;
    ReactorCounters d = change(counters, before);
    ReactorRow& row = rows.emplace_back();
    row.reactor = reactor;
    row.core = counters.core;
    row.busy_pct = percent(d.busy_seconds, d.busy_seconds + d.idle_seconds);
    row.busy_seconds = d.busy_seconds;
    row.idle_seconds = d.idle_seconds;
    if (before) row.iterations_per_s = finite(d.iterations / elapsed_seconds);
    row.iterations = counters.iterations;
    row.threads = counters.threads;
    row.pollers = pollers_of(now, reactor);
  }
  return rows;
}

std::vector<ThreadRow> thread_rows(const Snapshot& now, const Snapshot* prev,
                                   double elapsed_seconds) {
  prev = usable(prev, elapsed_seconds);
  std::vector<ThreadRow> rows;
  for (const auto& [key, counters] : now.threads) {
    const ThreadCounters* before = prev ? find(prev->threads, key) : nullptr;
    ThreadCounters d = change(counters, before);
    ThreadRow& row = rows.emplace_back();
    std::tie(row.reactor, row.thread) = key;
    if (const ReactorCounters* r = find(now.reactors, row.reactor)) row.core = r->core;
    row.cpumask = counters.cpumask;
    row.busy_pct = percent(d.busy_seconds, d.busy_seconds + d.idle_seconds);
    if (before) row.messages_per_s = finite(d.messages / elapsed_seconds);
    row.messages = counters.messages;
    row.pollers = pollers_of(now, row.reactor, &row.thread);
  }
  return rows;
}

std::vector<PollerRow> poller_rows(const Snapshot& now, const Snapshot* prev,
                                   double elapsed_seconds) {
  prev = usable(prev, elapsed_seconds);
  std::vector<PollerRow> rows;
  for (const auto& [key, counters] : now.pollers) {
    const PollerCounters* before = prev ? find(prev->pollers, key) : nullptr;
    PollerCounters d = change(counters, before);
    PollerRow& row = rows.emplace_back();
    std::tie(row.reactor, row.thread, row.poller) = key;
    if (before) row.runs_per_s = finite(d.runs / elapsed_seconds);
    row.busy_run_pct = percent(d.busy_runs, d.runs);
    row.runs = counters.runs;
    row.busy_runs = counters.busy_runs;
    row.period_seconds = counters.period_seconds;
    row.type = counters.paused > 0 ? "paused" : counters.period_seconds > 0 ? "timed" : "active";

    // The share is over the owning thread's time in the same window as the poller's figures.
    const ThreadKey thread_key{row.reactor, row.thread};
    const ThreadCounters* thread_now = find(now.threads, thread_key);
    const ThreadCounters* thread_before = before ? find(prev->threads, thread_key) : nullptr;
    if (thread_now && (before == nullptr) == (thread_before == nullptr)) {
      ThreadCounters t = change(*thread_now, thread_before);
      row.busy_share_pct = percent(d.busy_seconds, t.busy_seconds + t.idle_seconds);
    }
  }
  return rows;
}

}  // namespace pollux::top
