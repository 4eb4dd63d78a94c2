#include "tools/top/screen.h"

#include <cstdio>
#include <utility>
#include <vector>

namespace pollux::top {
namespace {

// Busy and idle time of a core in the interval, as spdk_top's cores tab shows them.
std::string format_seconds(double seconds) {
  char b[32];
  if (!(seconds > 0)) return "0";
  if (seconds < 1e-3) std::snprintf(b, sizeof b, "%.0fus", seconds * 1e6);
  else if (seconds < 1) std::snprintf(b, sizeof b, "%.1fms", seconds * 1e3);
  else std::snprintf(b, sizeof b, "%.2fs", seconds);
  return b;
}

Table reactor_table(std::vector<ReactorRow> rows, SortOrder order) {
  sort_rows(rows, order);
  Table t{{{"REACTOR"},
           {"CORE"},
           {"BUSY%", true},
           {"BUSY", true},
           {"IDLE", true},
           {"ITER/S", true},
           {"ITERATIONS", true},
           {"THREADS", true},
           {"POLLERS", true}},
          {}};
  for (const ReactorRow& r : rows) {
    t.rows.push_back({r.reactor, r.core, format_percent(r.busy_pct), format_seconds(r.busy_seconds),
                      format_seconds(r.idle_seconds), format_rate(r.iterations_per_s),
                      format_count(r.iterations), format_count(r.threads),
                      std::to_string(r.pollers)});
  }
  return t;
}

Table thread_table(std::vector<ThreadRow> rows, SortOrder order) {
  sort_rows(rows, order);
  Table t{{{"THREAD"},
           {"REACTOR"},
           {"CORE"},
           {"CPUMASK"},
           {"BUSY%", true},
           {"MSGS/S", true},
           {"MESSAGES", true},
           {"POLLERS", true}},
          {}};
  for (const ThreadRow& r : rows) {
    t.rows.push_back({r.thread, r.reactor, r.core.empty() ? "-" : r.core,
                      r.cpumask.empty() ? "-" : r.cpumask, format_percent(r.busy_pct),
                      format_rate(r.messages_per_s), format_count(r.messages),
                      std::to_string(r.pollers)});
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

Table filter_rows(Table table, const std::string& filter) {
  if (filter.empty()) return table;
  std::vector<std::vector<std::string>> kept;
  for (auto& row : table.rows) {
    bool match = false;
    for (std::size_t c = 0; c < row.size() && c < table.columns.size() && !match; ++c)
      match = !table.columns[c].numeric && row[c].find(filter) != std::string::npos;
    if (match) kept.push_back(std::move(row));
  }
  table.rows = std::move(kept);
  return table;
}

Table view_table(View view, const Snapshot& now, const Snapshot* prev, double elapsed_seconds,
                 SortOrder order, const std::string& filter) {
  switch (view) {
    case View::kReactors:
      return filter_rows(reactor_table(reactor_rows(now, prev, elapsed_seconds), order), filter);
    case View::kThreads:
      return filter_rows(thread_table(thread_rows(now, prev, elapsed_seconds), order), filter);
    case View::kPollers:
      return filter_rows(poller_table(poller_rows(now, prev, elapsed_seconds), order), filter);
  }
  return {};
}

namespace {

std::size_t column_of(const Table& table, const std::string& header) {
  for (std::size_t c = 0; c < table.columns.size(); ++c)
    if (table.columns[c].header == header) return c;
  return table.columns.size();
}

// The rows of `table` whose cells in the named columns equal the given values exactly.
Table rows_where(Table table, const std::vector<std::pair<std::string, std::string>>& equal) {
  std::vector<std::vector<std::string>> kept;
  for (auto& row : table.rows) {
    bool match = true;
    for (const auto& [header, value] : equal) {
      const std::size_t c = column_of(table, header);
      match = match && c < row.size() && row[c] == value;
    }
    if (match) kept.push_back(std::move(row));
  }
  table.rows = std::move(kept);
  return table;
}

}  // namespace

std::string render_detail(View view, const Table& table, std::size_t row, const Snapshot& now,
                          const Snapshot* prev, double elapsed_seconds, std::size_t width) {
  if (row >= table.rows.size()) return clip("no row selected", width);
  const std::vector<std::string>& cells = table.rows[row];
  auto cell = [&](const std::string& header) {
    const std::size_t c = column_of(table, header);
    return c < cells.size() ? cells[c] : std::string();
  };
  std::string out;
  for (std::size_t c = 0; c < table.columns.size() && c < cells.size(); ++c) {
    std::string name = table.columns[c].header;
    name.resize(12, ' ');
    out += clip("  " + name + cells[c], width);
  }
  // What runs there: a reactor's threads, a thread's pollers (sorted by their default column).
  if (view == View::kReactors) {
    out += clip("\nthreads on reactor " + cell("REACTOR") + ":", width);
    out += render_table(rows_where(view_table(View::kThreads, now, prev, elapsed_seconds, {}),
                                   {{"REACTOR", cell("REACTOR")}}),
                        width);
  } else if (view == View::kThreads) {
    out += clip("\npollers of thread " + cell("THREAD") + ":", width);
    out += render_table(rows_where(view_table(View::kPollers, now, prev, elapsed_seconds, {}),
                                   {{"REACTOR", cell("REACTOR")}, {"THREAD", cell("THREAD")}}),
                        width);
  }
  return out;
}

std::string render_screen(const ScreenStatus& status, const Table& table, std::size_t width,
                          std::size_t height) {
  const std::vector<std::string>& columns = sort_columns(status.view);
  const std::string sort =
      status.order.column < columns.size() ? columns[status.order.column] : "?";
  std::vector<std::string> lines;
  const std::string who = status.program.empty() ? "pollux-top  " + status.endpoint
                                                 : status.program + " @ " + status.endpoint;
  std::string filter;
  if (status.editing_filter) filter = "  filter: " + status.filter + "_";
  else if (!status.filter.empty()) filter = "  filter: " + status.filter;
  lines.push_back(clip(who + "  up " + format_uptime(status.uptime_seconds) + "  " +
                           view_name(status.view) + " by " + sort +
                           (status.order.inverted ? " (inverted)" : "") + filter,
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
  const std::string keys = status.editing_filter
                               ? "type a filter, Enter keep it, Esc clear it"
                               : !status.detail.empty()
                                     ? "Enter/Esc back  q quit"
                                     : "r/t/p view  s sort  i invert  j/k select  Enter detail  "
                                       "/ filter  q quit";
  const std::string malformed =
      status.malformed_lines ? "malformed lines: " + std::to_string(status.malformed_lines) + "  "
                             : "";
  const std::string footer = clip(malformed + "keys: " + keys, width);

  std::string out;
  for (const std::string& l : lines) out += l;
  // Header and status above, the footer below: the body gets what is left.
  const std::size_t body = height > 3 ? height - 3 : 0;
  if (!status.detail.empty()) {
    out += first_lines(status.detail, body);
  } else if (status.has_data && !status.selected) {
    out += first_lines(render_table(table, width), body);
  } else if (status.has_data) {
    // The selected row is marked and kept in view: rows scroll up under the header.
    const std::string text = render_table(table, width > 2 ? width - 2 : 0);
    std::vector<std::string> table_lines;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t end = text.find('\n', pos) + 1;
      table_lines.push_back(text.substr(pos, end - pos));
      pos = end;
    }
    const std::size_t rows_shown = body > 1 ? body - 1 : 0;
    const std::size_t selected = *status.selected;
    const std::size_t first = selected >= rows_shown ? selected + 1 - rows_shown : 0;
    if (!table_lines.empty()) out += "  " + table_lines[0];
    for (std::size_t i = first; i + 1 < table_lines.size() && i < first + rows_shown; ++i)
      out += (i == selected ? "> " : "  ") + table_lines[i + 1];
  }
  out += footer;
  return first_lines(out, height);
}

}  // namespace pollux::top
