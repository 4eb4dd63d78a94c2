// pollux-top: a live view of a Pollux process's reactors, threads and pollers, read from its
// Prometheus metrics endpoint (like SPDK's spdk_top). See README.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "common/cli.h"
#include "tools/top/exposition_parser.h"
#include "tools/top/http_get.h"
#include "tools/top/options.h"
#include "tools/top/screen.h"
#include "tools/top/snapshot.h"
#include "tools/top/terminal.h"

namespace pollux::top {
namespace {

using Clock = std::chrono::steady_clock;

// Long enough for a busy Pollux to build its page, short enough to keep the keys responsive.
constexpr std::chrono::milliseconds kScrapeTimeout{2000};

struct Config {
  Endpoint endpoint;
  std::chrono::milliseconds interval{1000};
  View view = View::kReactors;
  SortOrder order;
  bool once = false;
  int iterations = 0;  // Scrapes before exiting; 0: the mode's default.
  std::string filter;
  bool detail = false;  // --once: the detail of every row instead of the table.
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The latest scrape and the one before it, with when each arrived.
struct Scrapes {
  std::optional<Snapshot> now, prev;
  Clock::time_point now_at, prev_at;

  void add(Snapshot s, Clock::time_point at) {
    prev = std::move(now);
    prev_at = now_at;
    now = std::move(s);
    now_at = at;
  }
  double elapsed() const { return seconds_between(prev_at, now_at); }
  Table table(View view, SortOrder order, const std::string& filter) const {
    if (!now) return {};
    return view_table(view, *now, prev ? &*prev : nullptr, elapsed(), order, filter);
  }
  std::string detail(View view, const Table& table, std::size_t row, std::size_t width) const {
    return render_detail(view, table, row, *now, prev ? &*prev : nullptr, elapsed(), width);
  }
};

// The program's uptime when the endpoint gives its start time, else pollux-top's own.
double uptime(const Scrapes& scrapes, Clock::time_point started) {
  if (scrapes.now && scrapes.now->start_time_seconds > 0) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return now - scrapes.now->start_time_seconds;
  }
  return seconds_between(started, Clock::now());
}

HttpResult scrape(const Config& c, Scrapes& scrapes) {
  HttpResult r = http_get(c.endpoint, kScrapeTimeout);
  if (r.ok()) scrapes.add(build_snapshot(parse_exposition(r.body)), Clock::now());
  return r;
}

// Scrapes `iterations` times (default 2, so rates exist), prints the last table and exits.
int run_once(const Config& c) {
  const int count = c.iterations > 0 ? c.iterations : 2;
  Scrapes scrapes;
  for (int i = 0; i < count; ++i) {
    if (i > 0) std::this_thread::sleep_for(c.interval);
    HttpResult r = scrape(c, scrapes);
    if (!r.ok()) {
      std::fprintf(stderr, "pollux-top: %s\n", r.error.c_str());
      return 1;
    }
  }
  // A pipe gets whole lines; a terminal gets its width.
  const std::size_t width =
      isatty(STDOUT_FILENO) ? Terminal::width() : std::numeric_limits<std::size_t>::max();
  if (scrapes.now->empty()) {
    std::fprintf(stderr, "pollux-top: %s\n", kNoFrameworkMetrics);
    return 1;
  }
  const Table table = scrapes.table(c.view, c.order, c.filter);
  if (c.detail) {
    for (std::size_t row = 0; row < table.rows.size(); ++row) {
      std::printf("%s%s %s\n", row ? "\n" : "", view_name(c.view), table.rows[row][0].c_str());
      std::fputs(scrapes.detail(c.view, table, row, width).c_str(), stdout);
    }
  } else {
    std::fputs(render_table(table, width).c_str(), stdout);
  }
  if (scrapes.now->malformed_lines > 0) {
    std::fprintf(stderr, "pollux-top: skipped %zu malformed line(s)\n",
                 scrapes.now->malformed_lines);
  }
  return 0;
}

// What the keys change on the interactive screen.
struct Interaction {
  View view = View::kReactors;
  SortOrder order;
  std::string filter;
  bool editing_filter = false;
  std::size_t selected = 0;
  bool detail = false;
};

enum class Key { kOther, kUp, kDown, kEnter, kEscape, kBackspace };

Key classify(char key) {
  switch (key) {
    case '\r':
    case '\n':
      return Key::kEnter;
    case 27:
      return Key::kEscape;
    case 127:
    case 8:
      return Key::kBackspace;
    default:
      return Key::kOther;
  }
}

// Returns false on 'q'.
bool handle_key(char key, Key kind, Interaction& ui) {
  if (ui.editing_filter) {
    if (kind == Key::kEnter)
      ui.editing_filter = false;
    else if (kind == Key::kEscape)
      ui.editing_filter = false, ui.filter.clear();
    else if (kind == Key::kBackspace && !ui.filter.empty())
      ui.filter.pop_back();
    else if (key >= 32 && key < 127)
      ui.filter += key;
    ui.selected = 0;
    return true;
  }
  if (ui.detail) {
    if (kind == Key::kEnter || kind == Key::kEscape || kind == Key::kBackspace) ui.detail = false;
    return key != 'q' && key != 'Q';
  }
  std::optional<View> next_view;
  if (kind == Key::kUp || key == 'k') {
    if (ui.selected > 0) --ui.selected;
  } else if (kind == Key::kDown || key == 'j') {
    ++ui.selected;  // Bounded by the table's length when drawn.
  } else if (kind == Key::kEnter) {
    ui.detail = true;
  } else if (kind == Key::kEscape) {
    ui.filter.clear();
  }
  switch (key) {
    case 'q':
    case 'Q':
      return false;
    case 'r':
      next_view = View::kReactors;
      break;
    case 't':
      next_view = View::kThreads;
      break;
    case 'p':
      next_view = View::kPollers;
      break;
    case 's':
      ui.order.column = (ui.order.column + 1) % sort_columns(ui.view).size();
      break;
    case 'i':
      ui.order.inverted = !ui.order.inverted;
      break;
    case '/':
      ui.editing_filter = true;
      break;
    default:
      break;
  }
  if (next_view && *next_view != ui.view) {
    ui.view = *next_view;
    ui.order = SortOrder{};  // Columns differ between views: start from the new view's default.
    ui.selected = 0;
  }
  return true;
}

// One key press; an arrow key's escape sequence (ESC [ A / B) arrives as one press.
std::optional<std::pair<char, Key>> read_press(Terminal& terminal, std::chrono::milliseconds wait) {
  std::optional<char> key = terminal.read_key(wait);
  if (!key) return std::nullopt;
  if (*key != 27) return std::make_pair(*key, classify(*key));
  std::optional<char> next = terminal.read_key(std::chrono::milliseconds(0));
  if (!next) return std::make_pair(*key, Key::kEscape);
  if (*next == '[' || *next == 'O') {
    std::optional<char> code = terminal.read_key(std::chrono::milliseconds(0));
    if (code == 'A') return std::make_pair('\0', Key::kUp);
    if (code == 'B') return std::make_pair('\0', Key::kDown);
  }
  return std::make_pair('\0', Key::kOther);  // Another sequence: ignored.
}

int run_interactive(Config c) {
  Terminal terminal;
  const Clock::time_point start = Clock::now();
  Scrapes scrapes;
  ScreenStatus status;
  status.endpoint = c.endpoint.to_string();
  Interaction ui{c.view, c.order, c.filter};
  int scrape_count = 0;
  Clock::time_point next_scrape = start;

  auto redraw = [&] {
    const Table table = scrapes.table(ui.view, ui.order, ui.filter);
    if (!table.rows.empty() && ui.selected >= table.rows.size())
      ui.selected = table.rows.size() - 1;
    if (table.rows.empty()) ui.detail = false;
    status.view = ui.view;
    status.order = ui.order;
    status.filter = ui.filter;
    status.editing_filter = ui.editing_filter;
    status.selected = ui.selected;
    status.detail = ui.detail ? scrapes.detail(ui.view, table, ui.selected, terminal.width()) : "";
    status.has_data = scrapes.now.has_value();
    status.no_framework_metrics = scrapes.now && scrapes.now->empty();
    status.malformed_lines = scrapes.now ? scrapes.now->malformed_lines : 0;
    status.program = scrapes.now ? scrapes.now->program : "";
    status.uptime_seconds = uptime(scrapes, start);
    terminal.draw(render_screen(status, table, terminal.width(), terminal.height()));
  };

  while (true) {
    if (Clock::now() >= next_scrape) {
      HttpResult r = scrape(c, scrapes);
      status.scrape_error = r.error;  // Shown until a scrape succeeds; retried every interval.
      ++scrape_count;
      const Clock::time_point done = Clock::now();
      // After a slow scrape, wait a whole interval rather than scrape again at once.
      next_scrape = next_scrape + c.interval > done ? next_scrape + c.interval : done + c.interval;
      redraw();
      if (c.iterations > 0 && scrape_count >= c.iterations) return 0;
    }
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_scrape - Clock::now());
    if (auto press = read_press(terminal, wait)) {
      if (!handle_key(press->first, press->second, ui)) return 0;
      redraw();
    }
  }
}

}  // namespace
}  // namespace pollux::top

int main(int argc, char** argv) {
  using namespace pollux::top;
  CLI::App app{
      "pollux-top: reactors, threads and pollers of a Pollux process, live (like spdk_top)"};
  std::string endpoint = "127.0.0.1:9464", interval = "1s", view = "reactors", sort;
  Config c;
  app.add_option("--endpoint", endpoint, "host:port of the Pollux Prometheus endpoint")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) { return parse_endpoint(s) ? "" : "expected host:port, got " + s; },
          "HOST:PORT"));
  app.add_option("--interval", interval, "Time between scrapes: 500ms, 1s, 2 (seconds)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            return parse_interval(s) ? "" : "expected a duration like 500ms, 1s or 2, got " + s;
          },
          "DURATION"));
  app.add_option("--view", view, "reactors, threads or pollers")
      ->capture_default_str()
      ->check(CLI::IsMember({"reactors", "threads", "pollers"}));
  app.add_option("--sort", sort,
                 "Sort column. reactors: busy|iterations|threads|name; threads: "
                 "busy|messages|name; pollers: share|runs|busy_runs|name (default: the first)");
  app.add_flag("--once", c.once,
               "Print one table and exit (the default when stdout is not a terminal)");
  app.add_option("--iterations", c.iterations,
                 "Scrapes before exiting (default: unlimited; with --once 2, as rates need two)")
      ->check(pollux::cli::kPositive);
  app.add_option("--filter", c.filter,
                 "Only rows with a name containing this text (reactor, core, thread, poller, "
                 "cpumask)");
  app.add_flag("--detail", c.detail,
               "With --once: every row's detail (all columns, a reactor's threads, a thread's "
               "pollers) instead of the table");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  c.endpoint = *parse_endpoint(endpoint);
  c.interval = *parse_interval(interval);
  c.view = *parse_view(view);
  if (!sort.empty()) {
    std::optional<std::size_t> column = find_sort_column(c.view, sort);
    if (!column) {
      std::string valid;
      for (const std::string& name : sort_columns(c.view))
        valid += (valid.empty() ? "" : ", ") + name;
      return pollux::cli::bad_input(
          app, "--sort: the " + view + " view sorts by " + valid + "; got " + sort);
    }
    c.order.column = *column;
  }
  if (c.once || !isatty(STDOUT_FILENO)) return run_once(c);
  return run_interactive(c);
}
