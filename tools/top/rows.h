// What each view shows, computed from two consecutive scrapes: busy percentages and rates over
// the interval between them. Without a previous scrape the percentages come from the totals
// since start and rates are empty (shown as "-").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tools/top/snapshot.h"

namespace pollux::top {

enum class View { kReactors, kThreads, kPollers };

struct ReactorRow {
  std::string reactor;
  std::string core;
  std::optional<double> busy_pct;  // busy / (busy + idle)
  double busy_seconds = 0;         // In the interval (since start on a first scrape).
  double idle_seconds = 0;
  std::optional<double> iterations_per_s;
  double iterations = 0;  // Total.
  double threads = 0;
  std::size_t pollers = 0;  // Pollers of the threads on this reactor.
};

struct ThreadRow {
  std::string reactor;
  std::string thread;
  std::string core;     // The reactor's core ("" if the reactor is not in the scrape).
  std::string cpumask;  // The cores the thread may run on ("" from a Pollux without it).
  std::optional<double> busy_pct;  // busy / (busy + idle)
  std::optional<double> messages_per_s;
  double messages = 0;  // Total.
  std::size_t pollers = 0;
};

struct PollerRow {
  std::string reactor;
  std::string thread;
  std::string poller;
  std::optional<double> runs_per_s;
  std::optional<double> busy_run_pct;    // busy runs / runs
  std::optional<double> busy_share_pct;  // busy seconds / the owning thread's (busy + idle)
  double runs = 0;                       // Totals.
  double busy_runs = 0;
  std::string type;                      // active | timed | paused (spdk_top's poller types)
  double period_seconds = 0;
};

// `prev` is the previous scrape (nullptr on the first) and `elapsed_seconds` the wall time
// between the two; rates need both (a non-positive interval counts as no previous scrape).
// Rows come in key order; see sorting.h.
std::vector<ReactorRow> reactor_rows(const Snapshot& now, const Snapshot* prev,
                                     double elapsed_seconds);
std::vector<ThreadRow> thread_rows(const Snapshot& now, const Snapshot* prev,
                                   double elapsed_seconds);
std::vector<PollerRow> poller_rows(const Snapshot& now, const Snapshot* prev,
                                   double elapsed_seconds);

}  // namespace pollux::top
