// Plain-text tables that fit a terminal width, and the number formats the views use.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace pollux::top {

struct Column {
  std::string header;
  bool numeric = false;  // Right-aligned, and never shortened.
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;  // One cell per column.
};

// A header line then one line per row, each ending in '\n' and at most `width` characters long.
// When the table is too wide the widest text columns give up characters first (a cut name ends
// in '~'); past that, lines are clipped. Control characters in cells (a label value may hold a
// newline) are shown as '?'.
std::string render_table(const Table& table, std::size_t width);

// "-" stands for a figure that cannot be computed (no previous scrape, nothing to divide by).
std::string format_percent(std::optional<double> pct);  // "12.3"
std::string format_rate(std::optional<double> per_s);   // "950.0", "12.3k", "4.56M"
std::string format_count(double count);                 // "123456", "12.3M"

}  // namespace pollux::top
