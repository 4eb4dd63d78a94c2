// One scrape of the event-framework metrics, keyed by entity. Every counter is cumulative.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>

#include "tools/top/exposition_parser.h"

namespace pollux::top {

struct ReactorCounters {
  std::string core;
  double busy_seconds = 0;
  double idle_seconds = 0;
  double iterations = 0;
  double threads = 0;  // A gauge.
};

struct ThreadCounters {
  double busy_seconds = 0;
  double idle_seconds = 0;
  double messages = 0;
  std::string cpumask;  // pollux_thread_info's label: the cores the thread may run on
};

struct PollerCounters {
  double runs = 0;
  double busy_runs = 0;
  double busy_seconds = 0;
  double period_seconds = 0;  // Gauges: 0 is an active poller (spdk_top's "active"),
  double paused = 0;          // > 0 a timed one; paused 1: a paused one.
};

using ThreadKey = std::tuple<std::string, std::string>;               // reactor, thread
using PollerKey = std::tuple<std::string, std::string, std::string>;  // reactor, thread, poller

struct Snapshot {
  std::map<std::string, ReactorCounters> reactors;  // By the reactor label.
  std::map<ThreadKey, ThreadCounters> threads;
  std::map<PollerKey, PollerCounters> pollers;
  // Lines the parser could not read, plus known metrics missing a label they need.
  std::size_t malformed_lines = 0;
  std::string program;            // pollux_process_info's label ("" if absent)
  double start_time_seconds = 0;  // process_start_time_seconds (0 if absent)
  bool empty() const { return reactors.empty() && threads.empty() && pollers.empty(); }
};

// What to say when an endpoint answers without any event-framework metric (a Prometheus
// server, another exporter, a Pollux program whose framework is not running yet).
inline const char* kNoFrameworkMetrics =
    "no event-framework metrics at this endpoint (pollux_reactor_*, pollux_thread_*, "
    "pollux_poller_*): point it at a Pollux program's --metrics address";

// Keeps the pollux_reactor_*, pollux_thread_* and pollux_poller_* series listed in README.md and
// ignores every other metric.
Snapshot build_snapshot(const ParseResult& parsed);

}  // namespace pollux::top
