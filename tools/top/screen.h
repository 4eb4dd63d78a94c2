// From scrapes to text: the table of a view, and the full interactive screen around it.
#pragma once

#include <cstddef>
#include <string>

#include "tools/top/rows.h"
#include "tools/top/snapshot.h"
#include "tools/top/sorting.h"
#include "tools/top/table.h"

namespace pollux::top {

const char* view_name(View view);  // "reactors", "threads", "pollers"

// The rows of `view` computed from the two scrapes (see rows.h), sorted, as a table.
Table view_table(View view, const Snapshot& now, const Snapshot* prev, double elapsed_seconds,
                 SortOrder order);

struct ScreenStatus {
  std::string endpoint;
  double uptime_seconds = 0;
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
