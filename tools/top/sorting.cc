#include "tools/top/sorting.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <optional>
#include <utility>

namespace pollux::top {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// -1, 0 or 1 as a is before, equal to or after b in natural order.
int natural_compare(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && is_digit(a[ie])) ++ie;
      while (je < b.size() && is_digit(b[je])) ++je;
      std::string_view x = a.substr(i, ie - i), y = b.substr(j, je - j);
      // Leading zeros do not change a number; more digits make it larger.
      std::string_view xs = x.substr(std::min(x.find_first_not_of('0'), x.size()));
      std::string_view ys = y.substr(std::min(y.find_first_not_of('0'), y.size()));
      if (xs.size() != ys.size()) return xs.size() < ys.size() ? -1 : 1;
      if (int c = xs.compare(ys)) return c < 0 ? -1 : 1;
      if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;  // "01" after "1".
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j] ? -1 : 1;
      ++i;
      ++j;
    }
  }
  if (i < a.size()) return 1;
  if (j < b.size()) return -1;
  return 0;
}

// Compares name parts in turn, most significant first.
int compare_names(std::initializer_list<std::pair<std::string_view, std::string_view>> parts) {
  for (const auto& [a, b] : parts) {
    if (int c = natural_compare(a, b)) return c;
  }
  return 0;
}

int compare_name(const ReactorRow& a, const ReactorRow& b) {
  return compare_names({{a.reactor, b.reactor}, {a.core, b.core}});
}
int compare_name(const ThreadRow& a, const ThreadRow& b) {
  return compare_names({{a.thread, b.thread}, {a.reactor, b.reactor}});
}
int compare_name(const PollerRow& a, const PollerRow& b) {
  return compare_names({{a.poller, b.poller}, {a.thread, b.thread}, {a.reactor, b.reactor}});
}

// Missing figures ("-") sort as the smallest; so does NaN, which would break std::sort.
double sort_key(std::optional<double> v) {
  return v && !std::isnan(*v) ? *v : -HUGE_VAL;
}

int compare_figures(std::optional<double> a, std::optional<double> b) {
  double x = sort_key(a), y = sort_key(b);
  if (x == y) return 0;
  return x < y ? -1 : 1;
}

template <typename Row>
using Figure = std::function<std::optional<double>(const Row&)>;

// `figure` is null for the name column.
template <typename Row>
void sort_by(std::vector<Row>& rows, const Figure<Row>& figure, bool inverted) {
  std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (!figure) return inverted ? compare_name(b, a) < 0 : compare_name(a, b) < 0;
    int c = compare_figures(figure(a), figure(b));
    if (c != 0) return inverted ? c < 0 : c > 0;  // Largest first unless inverted.
    return compare_name(a, b) < 0;
  });
}

template <typename Row>
const Figure<Row>& figure_at(const std::vector<Figure<Row>>& figures, std::size_t column) {
  static const Figure<Row> kName;
  return column < figures.size() ? figures[column] : kName;
}

}  // namespace

const std::vector<std::string>& sort_columns(View view) {
  static const std::vector<std::string> kReactors = {"busy", "iterations", "threads", "name"};
  static const std::vector<std::string> kThreads = {"busy", "messages", "name"};
  static const std::vector<std::string> kPollers = {"share", "runs", "busy_runs", "name"};
  switch (view) {
    case View::kReactors:
      return kReactors;
    case View::kThreads:
      return kThreads;
    case View::kPollers:
      return kPollers;
  }
  return kReactors;
}

std::optional<std::size_t> find_sort_column(View view, std::string_view name) {
  const std::vector<std::string>& columns = sort_columns(view);
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return i;
  }
  return std::nullopt;
}

bool natural_less(std::string_view a, std::string_view b) {
  return natural_compare(a, b) < 0;
}

// Each figure list follows sort_columns(); the name column, last, has no figure.
void sort_rows(std::vector<ReactorRow>& rows, SortOrder order) {
  static const std::vector<Figure<ReactorRow>> kFigures = {
      [](const ReactorRow& r) { return r.busy_pct; },
      [](const ReactorRow& r) { return r.iterations_per_s; },
      [](const ReactorRow& r) { return std::optional<double>(r.threads); },
  };
  sort_by(rows, figure_at(kFigures, order.column), order.inverted);
}

void sort_rows(std::vector<ThreadRow>& rows, SortOrder order) {
  static const std::vector<Figure<ThreadRow>> kFigures = {
      [](const ThreadRow& r) { return r.busy_pct; },
      [](const ThreadRow& r) { return r.messages_per_s; },
  };
  sort_by(rows, figure_at(kFigures, order.column), order.inverted);
}

void sort_rows(std::vector<PollerRow>& rows, SortOrder order) {
  static const std::vector<Figure<PollerRow>> kFigures = {
      [](const PollerRow& r) { return r.busy_share_pct; },
      [](const PollerRow& r) { return r.runs_per_s; },
      [](const PollerRow& r) { return r.busy_run_pct; },
  };
  sort_by(rows, figure_at(kFigures, order.column), order.inverted);
}

}  // namespace pollux::top
