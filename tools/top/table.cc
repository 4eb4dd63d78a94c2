#include "tools/top/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pollux::top {
namespace {

constexpr std::size_t kGap = 2;           // Spaces between columns.
constexpr std::size_t kMinTextWidth = 4;  // A text column is never cut below this.

std::string printable(const std::string& cell) {
  std::string out = cell;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

std::string fit(const std::string& cell, std::size_t width, bool right_aligned) {
  if (cell.size() > width) return width == 0 ? "" : cell.substr(0, width - 1) + "~";
  std::string pad(width - cell.size(), ' ');
  return right_aligned ? pad + cell : cell + pad;
}

// Natural column widths, then the widest text column loses one character at a time until the
// table fits or every text column is down to its minimum.
std::vector<std::size_t> column_widths(const Table& table, std::size_t width) {
  const std::size_t n = table.columns.size();
  std::vector<std::size_t> widths(n), minimums(n);
  for (std::size_t i = 0; i < n; ++i) {
    widths[i] = table.columns[i].header.size();
    for (const auto& row : table.rows) {
      if (i < row.size()) widths[i] = std::max(widths[i], row[i].size());
    }
    minimums[i] =
        table.columns[i].numeric
            ? widths[i]
            : std::min(widths[i], std::max(kMinTextWidth, table.columns[i].header.size()));
  }
  std::size_t total = n == 0 ? 0 : (n - 1) * kGap;
  for (std::size_t w : widths) total += w;
  while (total > width) {
    std::size_t widest = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (widths[i] > minimums[i] && (widest == n || widths[i] > widths[widest])) widest = i;
    }
    if (widest == n) break;
    --widths[widest];
    --total;
  }
  return widths;
}

std::string render_line(const std::vector<std::string>& cells, const Table& table,
                        const std::vector<std::size_t>& widths, std::size_t width) {
  std::string line;
  for (std::size_t i = 0; i < cells.size() && i < widths.size(); ++i) {
    if (i > 0) line.append(kGap, ' ');
    line += fit(printable(cells[i]), widths[i], table.columns[i].numeric);
  }
  if (line.size() > width) line.resize(width);
  line.erase(line.find_last_not_of(' ') + 1);  // npos + 1 == 0 empties an all-blank line.
  return line + "\n";
}

std::string format_scaled(double v, const char* plain_format) {
  static constexpr struct {
    double scale;
    const char* suffix;
  } kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  char buf[64];
  for (const auto& unit : kUnits) {
    if (std::fabs(v) >= unit.scale) {
      double scaled = v / unit.scale;
      std::snprintf(buf, sizeof buf, std::fabs(scaled) < 10 ? "%.2f%s" : "%.1f%s", scaled,
                    unit.suffix);
      return buf;
    }
  }
  std::snprintf(buf, sizeof buf, plain_format, v);
  return buf;
}

}  // namespace

std::string render_table(const Table& table, std::size_t width) {
  std::vector<std::size_t> widths = column_widths(table, width);
  std::vector<std::string> headers;
  for (const Column& c : table.columns) headers.push_back(c.header);
  std::string out = render_line(headers, table, widths, width);
  for (const auto& row : table.rows) out += render_line(row, table, widths, width);
  return out;
}

std::string format_percent(std::optional<double> pct) {
  if (!pct || !std::isfinite(*pct)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", *pct);
  return buf;
}

std::string format_rate(std::optional<double> per_s) {
  if (!per_s || !std::isfinite(*per_s)) return "-";
  return format_scaled(*per_s, "%.1f");
}

std::string format_count(double count) {
  if (!std::isfinite(count)) return "-";
  if (std::fabs(count) < 1e6) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", count);
    return buf;
  }
  return format_scaled(count, "%.0f");
}

}  // namespace pollux::top
