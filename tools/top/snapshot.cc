#include "tools/top/snapshot.h"

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

namespace pollux::top {
namespace {

// The values of `names` in `labels`, or nothing if one is missing.
std::optional<std::vector<std::string>> required_labels(const Labels& labels,
                                                        std::initializer_list<const char*> names) {
  std::vector<std::string> values;
  for (const char* name : names) {
    auto it = labels.find(name);
    if (it == labels.end()) return std::nullopt;
    values.push_back(it->second);
  }
  return values;
}

// Which counter a metric name fills, or nullptr if the name is not one of that entity's.
double ReactorCounters::*reactor_field(std::string_view name) {
  if (name == "pollux_reactor_busy_seconds_total") return &ReactorCounters::busy_seconds;
  if (name == "pollux_reactor_idle_seconds_total") return &ReactorCounters::idle_seconds;
  if (name == "pollux_reactor_iterations_total") return &ReactorCounters::iterations;
  if (name == "pollux_reactor_threads") return &ReactorCounters::threads;
  return nullptr;
}

double ThreadCounters::*thread_field(std::string_view name) {
  if (name == "pollux_thread_busy_seconds_total") return &ThreadCounters::busy_seconds;
  if (name == "pollux_thread_idle_seconds_total") return &ThreadCounters::idle_seconds;
  if (name == "pollux_thread_messages_total") return &ThreadCounters::messages;
  return nullptr;
}

double PollerCounters::*poller_field(std::string_view name) {
  if (name == "pollux_poller_runs_total") return &PollerCounters::runs;
  if (name == "pollux_poller_busy_runs_total") return &PollerCounters::busy_runs;
  if (name == "pollux_poller_busy_seconds_total") return &PollerCounters::busy_seconds;
  if (name == "pollux_poller_period_seconds") return &PollerCounters::period_seconds;
  if (name == "pollux_poller_paused") return &PollerCounters::paused;
  return nullptr;
}

}  // namespace

Snapshot build_snapshot(const ParseResult& parsed) {
  Snapshot snap;
  snap.malformed_lines = parsed.malformed_lines;
  for (const Sample& s : parsed.samples) {
    if (s.name == "process_start_time_seconds") {
      snap.start_time_seconds = s.value;
      continue;
    }
    if (s.name == "pollux_process_info") {
      if (auto l = required_labels(s.labels, {"program"})) snap.program = (*l)[0];
      continue;
    }
    if (s.name == "pollux_thread_info") {
      if (auto l = required_labels(s.labels, {"reactor", "thread", "cpumask"})) {
        snap.threads[{(*l)[0], (*l)[1]}].cpumask = (*l)[2];
        continue;
      }
      ++snap.malformed_lines;
      continue;
    }
    if (auto field = reactor_field(s.name)) {
      if (auto l = required_labels(s.labels, {"reactor", "core"})) {
        ReactorCounters& r = snap.reactors[(*l)[0]];
        r.core = (*l)[1];
        r.*field = s.value;
        continue;
      }
    } else if (auto field = thread_field(s.name)) {
      if (auto l = required_labels(s.labels, {"reactor", "thread"})) {
        snap.threads[{(*l)[0], (*l)[1]}].*field = s.value;
        continue;
      }
    } else if (auto field = poller_field(s.name)) {
      if (auto l = required_labels(s.labels, {"reactor", "thread", "poller"})) {
        snap.pollers[{(*l)[0], (*l)[1], (*l)[2]}].*field = s.value;
        continue;
      }
    } else {
      continue;  // Not one of ours.
    }
    ++snap.malformed_lines;  // One of ours without the labels that place it.
  }
  return snap;
}

}  // namespace pollux::top
