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
  Table table(View view, SortOrder order) const {
    if (!now) return {};
    return view_table(view, *now, prev ? &*prev : nullptr, seconds_between(prev_at, now_at), order);
  }
};

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
  std::fputs(render_table(scrapes.table(c.view, c.order), width).c_str(), stdout);
  if (scrapes.now->malformed_lines > 0) {
    std::fprintf(stderr, "pollux-top: skipped %zu malformed line(s)\n",
                 scrapes.now->malformed_lines);
  }
  return 0;
}

// Returns false on 'q'.
bool handle_key(char key, View& view, SortOrder& order) {
  std::optional<View> next_view;
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
      order.column = (order.column + 1) % sort_columns(view).size();
      break;
    case 'i':
      order.inverted = !order.inverted;
      break;
    default:
      break;
  }
  if (next_view && *next_view != view) {
    view = *next_view;
    order = SortOrder{};  // Columns differ between views: start from the new view's default.
  }
  return true;
}

int run_interactive(Config c) {
  Terminal terminal;
  const Clock::time_point start = Clock::now();
  Scrapes scrapes;
  ScreenStatus status;
  status.endpoint = c.endpoint.to_string();
  int scrape_count = 0;
  Clock::time_point next_scrape = start;

  auto redraw = [&] {
    status.view = c.view;
    status.order = c.order;
    status.has_data = scrapes.now.has_value();
    status.no_framework_metrics = scrapes.now && scrapes.now->empty();
    status.malformed_lines = scrapes.now ? scrapes.now->malformed_lines : 0;
    status.uptime_seconds = seconds_between(start, Clock::now());
    terminal.draw(
        render_screen(status, scrapes.table(c.view, c.order), terminal.width(), terminal.height()));
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
    if (std::optional<char> key = terminal.read_key(wait)) {
      if (!handle_key(*key, c.view, c.order)) return 0;
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
