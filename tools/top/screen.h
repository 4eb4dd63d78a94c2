// From scrapes to text: the table of a view, and the full interactive screen around it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "tools/top/rows.h"
#include "tools/top/snapshot.h"
#include "tools/top/sorting.h"
#include "tools/top/table.h"

namespace pollux::top {

const char* view_name(View view);  // "reactors", "threads", "pollers"

// The rows of `view` computed from the two scrapes (see rows.h), sorted, as a table; with a
// filter, only the rows with a name cell (a text column) containing it.
Table view_table(View view, const Snapshot& now, const Snapshot* prev, double elapsed_seconds,
                 SortOrder order, const std::string& filter = "");
Table filter_rows(Table table, const std::string& filter);

// The detail of row `row` of `table` (a table of `view`): each column on its own line, whatever
// the terminal's width cut from the table, then what runs there (a reactor's threads, a
// thread's pollers) from the same scrapes.
std::string render_detail(View view, const Table& table, std::size_t row, const Snapshot& now,
                          const Snapshot* prev, double elapsed_seconds, std::size_t width);

struct ScreenStatus {
  std::string endpoint;
  std::string program;        // The program at the endpoint, if it says (pollux_process_info).
  double uptime_seconds = 0;  // The program's (or pollux-top's own when it does not say).
  std::string filter;
  bool editing_filter = false;
  std::optional<std::size_t> selected;  // The marked table row (interactive).
  std::string detail;                   // Shown instead of the table when not empty.
  View view = View::kReactors;
  SortOrder order;
  std::string scrape_error;           // Empty while scrapes succeed.
  bool has_data = false;              // False until the first successful scrape.
  bool no_framework_metrics = false;  // The last scrape had none of the series pollux-top reads.
  std::size_t malformed_lines = 0;
};

// Header and status lines, the table, then a footer with the keys and the malformed-line count;
// at most `height` lines (table rows are dropped from the bottom), none longer than `width`.
std::string render_screen(const ScreenStatus& status, const Table& table, std::size_t width,
                          std::size_t height);

}  // namespace pollux::top
