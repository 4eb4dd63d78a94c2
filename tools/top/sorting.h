// Sort orders of the three views. Numeric columns put the largest first and names go A to Z;
// inverting flips that. Ties always fall back to the name, ascending, so the order is
// deterministic whatever the direction.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/top/rows.h"

namespace pollux::top {

// Column names accepted by --sort for `view`, the default first:
//   reactors: busy, iterations (rate), threads, name
//   threads:  busy, messages (rate), name
//   pollers:  share (of the thread's time), runs (rate), busy_runs (%), name
const std::vector<std::string>& sort_columns(View view);

struct SortOrder {
  std::size_t column = 0;  // Index into sort_columns(view).
  bool inverted = false;
};

// The index of `name` in sort_columns(view), or nothing if the view has no such column.
std::optional<std::size_t> find_sort_column(View view, std::string_view name);

// Compares names with digit runs taken as numbers, so reactor "2" comes before "10".
bool natural_less(std::string_view a, std::string_view b);

void sort_rows(std::vector<ReactorRow>& rows, SortOrder order);
void sort_rows(std::vector<ThreadRow>& rows, SortOrder order);
void sort_rows(std::vector<PollerRow>& rows, SortOrder order);

}  // namespace pollux::top
