#include "tools/top/screen.h"

#include <cstdio>
#include <vector>

namespace pollux::top {
namespace {

Table reactor_table(std::vector<ReactorRow> rows, SortOrder order) {
  sort_rows(rows, order);
  Table t{{{"REACTOR"},
           {"CORE"},
           {"BUSY%", true},
           {"ITER/S", true},
           {"ITERATIONS", true},
           {"THREADS", true}},
          {}};
  for (const ReactorRow& r : rows) {
    t.rows.push_back({r.reactor, r.core, format_percent(r.busy_pct),
                      format_rate(r.iterations_per_s), format_count(r.iterations),
                      format_count(r.threads)});
  }
  return t;
}

Table thread_table(std::vector<ThreadRow> rows, SortOrder order) {
  sort_rows(rows, order);
  Table t{{{"THREAD"}, {"REACTOR"}, {"BUSY%", true}, {"MSGS/S", true}, {"MESSAGES", true}}, {}};
  for (const ThreadRow& r : rows) {
    t.rows.push_back({r.thread, r.reactor, format_percent(r.busy_pct),
                      format_rate(r.messages_per_s), format_count(r.messages)});
  }
  return t;
}

// A poller's period as spdk_top shows it: "500us", "1ms", "2.5s".
std::string format_period(double seconds) {
  char b[32];
  if (seconds < 1e-3) std::snprintf(b, sizeof b, "%gus", seconds * 1e6);
  else if (seconds < 1) std::snprintf(b, sizeof b, "%gms", seconds * 1e3);
  else std::snprintf(b, sizeof b, "%gs", seconds);
  return b;
}

Table poller_table(std::vector<PollerRow> rows, SortOrder order) {
  sort_rows(rows, order);
  Table t{{{"POLLER"},
           {"THREAD"},
           {"REACTOR"},
           {"SHARE%", true},
           {"RUNS/S", true},
           {"BUSYRUN%", true},
           {"RUNS", true},
           {"BUSY_RUNS", true},
           {"TYPE"},
           {"PERIOD", true}},
          {}};
  for (const PollerRow& r : rows) {
    t.rows.push_back({r.poller, r.thread, r.reactor, format_percent(r.busy_share_pct),
                      format_rate(r.runs_per_s), format_percent(r.busy_run_pct),
                      format_count(r.runs), format_count(r.busy_runs), r.type,
                      r.type == "active" ? "-" : format_period(r.period_seconds)});
  }
  return t;
}

std::string clip(std::string line, std::size_t width) {
  if (line.size() > width) line.resize(width);
  return line + "\n";
}

// The first `count` lines of `text`, whose lines all end in '\n'.
std::string first_lines(const std::string& text, std::size_t count) {
  std::size_t pos = 0;
  for (std::size_t n = 0; n < count && pos < text.size(); ++n) pos = text.find('\n', pos) + 1;
  return text.substr(0, pos);
}

std::string format_uptime(double seconds) {
  long s = seconds > 0 ? static_cast<long>(seconds) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

}  // namespace

const char* view_name(View view) {
  switch (view) {
    case View::kReactors:
      return "reactors";
    case View::kThreads:
      return "threads";
    case View::kPollers:
      return "pollers";
  }
  return "?";
}

Table view_table(View view, const Snapshot& now, const Snapshot* prev, double elapsed_seconds,
                 SortOrder order) {
  switch (view) {
    case View::kReactors:
      return reactor_table(reactor_rows(now, prev, elapsed_seconds), order);
    case View::kThreads:
      return thread_table(thread_rows(now, prev, elapsed_seconds), order);
    case View::kPollers:
      return poller_table(poller_rows(now, prev, elapsed_seconds), order);
  }
  return {};
}

std::string render_screen(const ScreenStatus& status, const Table& table, std::size_t width,
                          std::size_t height) {
  const std::vector<std::string>& columns = sort_columns(status.view);
  const std::string sort =
      status.order.column < columns.size() ? columns[status.order.column] : "?";
  std::vector<std::string> lines;
  lines.push_back(clip("pollux-top  " + status.endpoint + "  up " +
                           format_uptime(status.uptime_seconds) +
                           "  view: " + view_name(status.view) + "  sort: " + sort +
                           (status.order.inverted ? " (inverted)" : ""),
                       width));
  if (!status.scrape_error.empty()) {
    lines.push_back(clip("scrape failed: " + status.scrape_error + " (retrying)", width));
  } else if (!status.has_data) {
    lines.push_back(clip("waiting for the first scrape...", width));
  } else if (status.no_framework_metrics) {
    lines.push_back(clip(kNoFrameworkMetrics, width) + "\n");
  } else {
    lines.push_back("\n");
  }
  const std::string footer =
      clip("keys: r/t/p view  s sort  i invert  q quit    malformed lines: " +
               std::to_string(status.malformed_lines),
           width);

  std::string out;
  for (const std::string& l : lines) out += l;
  // Header and status above, the footer below: the table gets what is left.
  if (status.has_data) out += first_lines(render_table(table, width), height > 3 ? height - 3 : 0);
  out += footer;
  return first_lines(out, height);
}

}  // namespace pollux::top
