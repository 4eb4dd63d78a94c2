// pollux-top's logic without a terminal: exposition parsing, snapshots, rates, sorting, table
// rendering, option values, and the HTTP client against loopback servers run by the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tools/top/exposition_parser.h"
#include "tools/top/http_get.h"
#include "tools/top/options.h"
#include "tools/top/rows.h"
#include "tools/top/screen.h"
#include "tools/top/snapshot.h"
#include "tools/top/sorting.h"
#include "tools/top/table.h"

namespace pollux::top {
namespace {

using std::chrono::milliseconds;

Snapshot snapshot_of(const std::string& text) {
  return build_snapshot(parse_exposition(text));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// --- Parser ---------------------------------------------------------------------------------

TEST(ExpositionParserTest, UnescapesLabelValues) {
  ParseResult r = parse_exposition(
      R"(m{quote="say \"hi\"",slash="a\\b",newline="one\ntwo",plain="x y",punct="} {,# ="} 7)"
      "\n");
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.malformed_lines, 0u);
  const Labels& l = r.samples[0].labels;
  EXPECT_EQ(l.at("quote"), "say \"hi\"");
  EXPECT_EQ(l.at("slash"), "a\\b");
  EXPECT_EQ(l.at("newline"), "one\ntwo");
  EXPECT_EQ(l.at("plain"), "x y");
  EXPECT_EQ(l.at("punct"), "} {,# =");
  EXPECT_EQ(r.samples[0].value, 7);
}

TEST(ExpositionParserTest, SkipsCommentsAndBlankLines) {
  ParseResult r = parse_exposition(
      "# HELP m Something with \"quotes\" and {braces}\n"
      "# TYPE m counter\n"
      "\n"
      "   \t\n"
      "# any other comment\n"
      "m{a=\"1\"} 3\n"
      "m{a=\"2\",} 4\n"  // A trailing comma is valid.
      "n 5");            // No final newline.
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_EQ(r.malformed_lines, 0u);
  EXPECT_EQ(r.samples[0].name, "m");
  EXPECT_EQ(r.samples[1].labels.at("a"), "2");
  EXPECT_EQ(r.samples[2].name, "n");
  EXPECT_EQ(r.samples[2].value, 5);
}

TEST(ExpositionParserTest, HistogramSeriesParseButSnapshotIgnoresThem) {
  const std::string text =
      "# TYPE pollux_scenario_io_latency_seconds histogram\n"
      "pollux_scenario_io_latency_seconds_bucket{scenario=\"s\",le=\"0.001\"} 2\n"
      "pollux_scenario_io_latency_seconds_bucket{scenario=\"s\",le=\"+Inf\"} 5\n"
      "pollux_scenario_io_latency_seconds_sum{scenario=\"s\"} 0.02\n"
      "pollux_scenario_io_latency_seconds_count{scenario=\"s\"} 5\n"
      "pollux_reactor_threads{reactor=\"0\",core=\"0\"} 1\n";
  ParseResult r = parse_exposition(text);
  EXPECT_EQ(r.samples.size(), 5u);
  EXPECT_EQ(r.malformed_lines, 0u);
  Snapshot s = build_snapshot(r);
  EXPECT_EQ(s.reactors.size(), 1u);
  EXPECT_TRUE(s.threads.empty());
  EXPECT_TRUE(s.pollers.empty());
  EXPECT_EQ(s.malformed_lines, 0u);
}

TEST(ExpositionParserTest, CountsAndSkipsMalformedLines) {
  const std::vector<std::string> bad = {
      "m{a=\"x\" 1",          // Unclosed braces.
      "m{a=x} 1",             // Unquoted value.
      "m{a=\"x} 1",           // Unterminated quote.
      "m{a=\"\\q\"} 1",       // Unknown escape.
      "m{1a=\"x\"} 1",        // Bad label name.
      "m{a=\"x\"b=\"y\"} 1",  // Missing comma.
      "{a=\"x\"} 1",          // No name.
      "1m 2",                 // Name starting with a digit.
      "m",                    // No value.
      "m abc",                // Value not a number.
      "m 1 12.5",             // Timestamp not an integer.
      "m 1 2 3",              // Trailing junk.
      "m 0x10",               // Hex is not in the format.
  };
  std::string text = "good 1\n";
  for (const std::string& line : bad) text += line + "\n";
  text += "also_good 2\n";
  ParseResult r = parse_exposition(text);
  EXPECT_EQ(r.malformed_lines, bad.size());
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[0].name, "good");
  EXPECT_EQ(r.samples[1].name, "also_good");
}

TEST(ExpositionParserTest, AcceptsTimestampsAndDropsThem) {
  ParseResult r = parse_exposition(
      "a 1.5 1700000000000\n"
      "b{x=\"y\"} 2 -5\n"
      "c\t3\t42   \n");
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_EQ(r.malformed_lines, 0u);
  EXPECT_EQ(r.samples[0].value, 1.5);
  EXPECT_EQ(r.samples[1].value, 2);
  EXPECT_EQ(r.samples[2].value, 3);
}

TEST(ExpositionParserTest, ReadsSpecialAndExponentValues) {
  ParseResult r = parse_exposition("a Nan\nb +Inf\nc -Inf\nd 1.5e3\ne -0.25\nf +7\r\n");
  ASSERT_EQ(r.samples.size(), 6u);
  EXPECT_EQ(r.malformed_lines, 0u);
  EXPECT_TRUE(std::isnan(r.samples[0].value));
  EXPECT_TRUE(std::isinf(r.samples[1].value) && r.samples[1].value > 0);
  EXPECT_TRUE(std::isinf(r.samples[2].value) && r.samples[2].value < 0);
  EXPECT_EQ(r.samples[3].value, 1500);
  EXPECT_EQ(r.samples[4].value, -0.25);
  EXPECT_EQ(r.samples[5].value, 7);  // And the CRLF line ending is tolerated.
}

TEST(ExpositionParserTest, EveryLineIsASampleOrCountedOnRandomInput) {
  // Lines built from the format's own characters hit every branch of the parser; each line that
  // is not blank or a comment must come out as a sample or as a malformed line, never a crash.
  const std::string alphabet = "ab_:{}=\",\\n# \t0123456789.+-eNaInf";
  std::mt19937 random(42);
  std::string text;
  std::size_t data_lines = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string line = "m";
    if (random() % 2) line += "{a=\"";
    for (std::size_t n = random() % 24; n > 0; --n) line += alphabet[random() % alphabet.size()];
    if (random() % 2) line += "\"} 1";
    ++data_lines;  // Starts with 'm': never blank, never a comment.
    text += line + "\n";
  }
  ParseResult r = parse_exposition(text);
  EXPECT_EQ(r.samples.size() + r.malformed_lines, data_lines);
  EXPECT_GT(r.samples.size(), 0u);
  EXPECT_GT(r.malformed_lines, 0u);
}

TEST(SnapshotTest, CountsOurMetricsWithoutTheirLabelsAsMalformed) {
  Snapshot s = snapshot_of(
      "pollux_reactor_busy_seconds_total{reactor=\"0\"} 1\n"  // No core.
      "pollux_thread_messages_total{thread=\"app\"} 1\n"      // No reactor.
      "pollux_poller_runs_total{reactor=\"0\",thread=\"app\",poller=\"p\"} 9\n"
      "pollux_reactor_unknown_total{reactor=\"0\"} 1\n"  // Not one of ours: ignored.
      "garbage line\n");
  EXPECT_EQ(s.malformed_lines, 3u);
  EXPECT_TRUE(s.reactors.empty());
  EXPECT_TRUE(s.threads.empty());
  ASSERT_EQ(s.pollers.size(), 1u);
  EXPECT_EQ(s.pollers.begin()->second.runs, 9);
}

TEST(SnapshotTest, ReadsTheProgramItsStartAndThreadCpumasks) {
  Snapshot s = snapshot_of(
      "pollux_process_info{program=\"pollux-tgt\"} 1\n"
      "process_start_time_seconds 1764000000.5\n"
      "pollux_thread_info{reactor=\"1\",thread=\"nvmf_pg1\",cpumask=\"0x2\"} 1\n"
      "pollux_thread_info{reactor=\"1\",thread=\"nomask\"} 1\n");  // No cpumask: malformed.
  EXPECT_EQ(s.program, "pollux-tgt");
  EXPECT_DOUBLE_EQ(s.start_time_seconds, 1764000000.5);
  ASSERT_EQ(s.threads.size(), 1u);
  EXPECT_EQ(s.threads.begin()->second.cpumask, "0x2");
  EXPECT_EQ(s.malformed_lines, 1u);
}

// --- Rates ------------------------------------------------------------------------------------

// Two scrapes 2 s apart. Reactor 0: 1.5 s busy, 0.5 s idle, 4000 iterations. Thread app: 1 s
// busy, 1 s idle, 200 messages. Poller p: 600 runs, 150 busy, 0.4 s busy.
const char* kFirstScrape = R"(
pollux_reactor_busy_seconds_total{reactor="0",core="2"} 10
pollux_reactor_idle_seconds_total{reactor="0",core="2"} 30
pollux_reactor_iterations_total{reactor="0",core="2"} 1000
pollux_reactor_threads{reactor="0",core="2"} 3
pollux_thread_busy_seconds_total{reactor="0",thread="app"} 4
pollux_thread_idle_seconds_total{reactor="0",thread="app"} 6
pollux_thread_messages_total{reactor="0",thread="app"} 100
pollux_poller_runs_total{reactor="0",thread="app",poller="p"} 1000
pollux_poller_busy_runs_total{reactor="0",thread="app",poller="p"} 100
pollux_poller_busy_seconds_total{reactor="0",thread="app",poller="p"} 0.5
)";
const char* kSecondScrape = R"(
pollux_reactor_busy_seconds_total{reactor="0",core="2"} 11.5
pollux_reactor_idle_seconds_total{reactor="0",core="2"} 30.5
pollux_reactor_iterations_total{reactor="0",core="2"} 5000
pollux_reactor_threads{reactor="0",core="2"} 4
pollux_thread_busy_seconds_total{reactor="0",thread="app"} 5
pollux_thread_idle_seconds_total{reactor="0",thread="app"} 7
pollux_thread_messages_total{reactor="0",thread="app"} 300
pollux_poller_runs_total{reactor="0",thread="app",poller="p"} 1600
pollux_poller_busy_runs_total{reactor="0",thread="app",poller="p"} 250
pollux_poller_busy_seconds_total{reactor="0",thread="app",poller="p"} 0.9
pollux_thread_info{reactor="0",thread="app",cpumask="0x4"} 1
)";

TEST(RowsTest, ComputesRatesAndBusyFromTheDifference) {
  Snapshot first = snapshot_of(kFirstScrape), second = snapshot_of(kSecondScrape);

  std::vector<ReactorRow> reactors = reactor_rows(second, &first, 2.0);
  ASSERT_EQ(reactors.size(), 1u);
  EXPECT_EQ(reactors[0].reactor, "0");
  EXPECT_EQ(reactors[0].core, "2");
  EXPECT_DOUBLE_EQ(*reactors[0].busy_pct, 75);  // 1.5 / (1.5 + 0.5)
  EXPECT_DOUBLE_EQ(*reactors[0].iterations_per_s, 2000);
  EXPECT_EQ(reactors[0].iterations, 5000);
  EXPECT_EQ(reactors[0].threads, 4);
  // The core's busy and idle time in the interval (spdk_top's cores tab), and its pollers.
  EXPECT_DOUBLE_EQ(reactors[0].busy_seconds, 1.5);
  EXPECT_DOUBLE_EQ(reactors[0].idle_seconds, 0.5);
  EXPECT_EQ(reactors[0].pollers, 1u);

  std::vector<ThreadRow> threads = thread_rows(second, &first, 2.0);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_DOUBLE_EQ(*threads[0].busy_pct, 50);
  EXPECT_DOUBLE_EQ(*threads[0].messages_per_s, 100);
  EXPECT_EQ(threads[0].core, "2");
  EXPECT_EQ(threads[0].cpumask, "0x4");
  EXPECT_EQ(threads[0].pollers, 1u);
  EXPECT_EQ(thread_rows(first, nullptr, 0).at(0).cpumask, "");  // A Pollux without the info.

  std::vector<PollerRow> pollers = poller_rows(second, &first, 2.0);
  ASSERT_EQ(pollers.size(), 1u);
  EXPECT_EQ(pollers[0].poller, "p");
  EXPECT_DOUBLE_EQ(*pollers[0].runs_per_s, 300);
  EXPECT_DOUBLE_EQ(*pollers[0].busy_run_pct, 25);    // 150 / 600
  EXPECT_DOUBLE_EQ(*pollers[0].busy_share_pct, 20);  // 0.4 / (1 + 1)
  EXPECT_EQ(pollers[0].runs, 1600);
  EXPECT_EQ(pollers[0].busy_runs, 250);
}

TEST(RowsTest, FirstScrapeUsesTotalsAndHasNoRates) {
  Snapshot first = snapshot_of(kFirstScrape);
  ReactorRow r = reactor_rows(first, nullptr, 0).at(0);
  EXPECT_DOUBLE_EQ(*r.busy_pct, 25);  // 10 / (10 + 30)
  EXPECT_FALSE(r.iterations_per_s);
  ThreadRow t = thread_rows(first, nullptr, 0).at(0);
  EXPECT_DOUBLE_EQ(*t.busy_pct, 40);
  EXPECT_FALSE(t.messages_per_s);
  PollerRow p = poller_rows(first, nullptr, 0).at(0);
  EXPECT_FALSE(p.runs_per_s);
  EXPECT_DOUBLE_EQ(*p.busy_run_pct, 10);
  EXPECT_DOUBLE_EQ(*p.busy_share_pct, 5);  // 0.5 / (4 + 6)

  // A table of the first scrape shows the missing rates as "-".
  std::string table = render_table(view_table(View::kReactors, first, nullptr, 0, {}), 80);
  const std::string row = lines_of(table).at(1);
  EXPECT_NE(row.find(" 25.0 "), std::string::npos) << table;
  EXPECT_NE(row.find(" - "), std::string::npos) << table;
}

TEST(RowsTest, NoElapsedTimeCountsAsAFirstScrape) {
  Snapshot first = snapshot_of(kFirstScrape), second = snapshot_of(kSecondScrape);
  ReactorRow r = reactor_rows(second, &first, 0).at(0);
  EXPECT_FALSE(r.iterations_per_s);
  EXPECT_DOUBLE_EQ(*r.busy_pct, 100 * 11.5 / 42);
}

TEST(RowsTest, NewEntitiesGetFirstScrapeFiguresAndResetsCountFromZero) {
  Snapshot first = snapshot_of(kFirstScrape);
  // Reactor 0 restarted (its counters went down); reactor 1 is new.
  Snapshot second = snapshot_of(R"(
pollux_reactor_busy_seconds_total{reactor="0",core="2"} 1
pollux_reactor_idle_seconds_total{reactor="0",core="2"} 3
pollux_reactor_iterations_total{reactor="0",core="2"} 100
pollux_reactor_busy_seconds_total{reactor="1",core="5"} 9
pollux_reactor_idle_seconds_total{reactor="1",core="5"} 1
pollux_reactor_iterations_total{reactor="1",core="5"} 10
)");
  std::vector<ReactorRow> rows = reactor_rows(second, &first, 2.0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(*rows[0].busy_pct, 25);
  EXPECT_DOUBLE_EQ(*rows[0].iterations_per_s, 50);
  EXPECT_DOUBLE_EQ(*rows[1].busy_pct, 90);
  EXPECT_FALSE(rows[1].iterations_per_s);
}

TEST(RowsTest, IdleEntitiesHaveNoPercentages) {
  Snapshot first = snapshot_of(kFirstScrape);
  // Nothing moved: busy % and busy-run % have nothing to divide by.
  PollerRow p = poller_rows(first, &first, 2.0).at(0);
  EXPECT_FALSE(p.busy_run_pct);
  EXPECT_FALSE(p.busy_share_pct);
  EXPECT_DOUBLE_EQ(*p.runs_per_s, 0);
  EXPECT_FALSE(reactor_rows(first, &first, 2.0).at(0).busy_pct);
}

// --- Sorting ----------------------------------------------------------------------------------

ReactorRow reactor(std::string name, std::optional<double> busy, std::optional<double> iter_rate,
                   double threads) {
  ReactorRow r;
  r.reactor = std::move(name);
  r.busy_pct = busy;
  r.iterations_per_s = iter_rate;
  r.threads = threads;
  return r;
}

template <typename Row, typename Name>
std::string order_of(const std::vector<Row>& rows, Name name) {
  std::string out;
  for (const Row& r : rows) out += (out.empty() ? "" : " ") + name(r);
  return out;
}

std::string reactor_order(std::vector<ReactorRow> rows, const char* column, bool inverted) {
  std::optional<std::size_t> index = find_sort_column(View::kReactors, column);
  EXPECT_TRUE(index) << column;
  sort_rows(rows, SortOrder{index.value_or(0), inverted});
  return order_of(rows, [](const ReactorRow& r) { return r.reactor; });
}

TEST(SortingTest, ReactorsByEachColumnWithTiesByName) {
  const std::vector<ReactorRow> rows = {reactor("10", 50, 100, 1), reactor("2", 50, 300, 2),
                                        reactor("1", 90, std::nullopt, 2),
                                        reactor("3", 10, 200, 1)};
  EXPECT_EQ(sort_columns(View::kReactors).front(), "busy");  // The default.
  EXPECT_EQ(reactor_order(rows, "busy", false), "1 2 10 3");
  EXPECT_EQ(reactor_order(rows, "busy", true), "3 2 10 1");         // Ties stay by name.
  EXPECT_EQ(reactor_order(rows, "iterations", false), "2 3 10 1");  // "-" last.
  EXPECT_EQ(reactor_order(rows, "iterations", true), "1 10 3 2");
  EXPECT_EQ(reactor_order(rows, "threads", false), "1 2 3 10");
  EXPECT_EQ(reactor_order(rows, "threads", true), "3 10 1 2");
  EXPECT_EQ(reactor_order(rows, "name", false), "1 2 3 10");  // Numbers in natural order.
  EXPECT_EQ(reactor_order(rows, "name", true), "10 3 2 1");
}

TEST(SortingTest, ThreadsByEachColumn) {
  auto thread = [](std::string reactor, std::string name, double busy, double msgs) {
    ThreadRow t;
    t.reactor = std::move(reactor);
    t.thread = std::move(name);
    t.busy_pct = busy;
    t.messages_per_s = msgs;
    return t;
  };
  const std::vector<ThreadRow> rows = {thread("1", "app", 20, 5), thread("0", "app", 20, 7),
                                       thread("0", "bdev", 60, 1), thread("0", "nvme", 5, 9)};
  auto order = [&](const char* column, bool inverted) {
    std::vector<ThreadRow> sorted = rows;
    sort_rows(sorted, SortOrder{*find_sort_column(View::kThreads, column), inverted});
    return order_of(sorted, [](const ThreadRow& t) { return t.thread + "@" + t.reactor; });
  };
  EXPECT_EQ(sort_columns(View::kThreads).front(), "busy");
  EXPECT_EQ(order("busy", false), "bdev@0 app@0 app@1 nvme@0");  // Same thread name: by reactor.
  EXPECT_EQ(order("busy", true), "nvme@0 app@0 app@1 bdev@0");
  EXPECT_EQ(order("messages", false), "nvme@0 app@0 app@1 bdev@0");
  EXPECT_EQ(order("name", false), "app@0 app@1 bdev@0 nvme@0");
  EXPECT_EQ(order("name", true), "nvme@0 bdev@0 app@1 app@0");
}

TEST(SortingTest, PollersByEachColumn) {
  auto poller = [](std::string name, double share, double runs, double busy_runs) {
    PollerRow p;
    p.reactor = "0";
    p.thread = "app";
    p.poller = std::move(name);
    p.busy_share_pct = share;
    p.runs_per_s = runs;
    p.busy_run_pct = busy_runs;
    return p;
  };
  const std::vector<PollerRow> rows = {poller("c", 30, 100, 5), poller("a", 10, 300, 50),
                                       poller("b", 30, 200, 50)};
  auto order = [&](const char* column, bool inverted) {
    std::vector<PollerRow> sorted = rows;
    sort_rows(sorted, SortOrder{*find_sort_column(View::kPollers, column), inverted});
    return order_of(sorted, [](const PollerRow& p) { return p.poller; });
  };
  EXPECT_EQ(sort_columns(View::kPollers).front(), "share");
  EXPECT_EQ(order("share", false), "b c a");
  EXPECT_EQ(order("share", true), "a b c");
  EXPECT_EQ(order("runs", false), "a b c");
  EXPECT_EQ(order("busy_runs", false), "a b c");
  EXPECT_EQ(order("busy_runs", true), "c a b");
  EXPECT_EQ(order("name", false), "a b c");
}

TEST(SortingTest, KnowsEachViewsColumns) {
  EXPECT_EQ(find_sort_column(View::kThreads, "messages"), 1u);
  EXPECT_FALSE(find_sort_column(View::kThreads, "iterations"));
  EXPECT_FALSE(find_sort_column(View::kReactors, "share"));
  EXPECT_EQ(find_sort_column(View::kPollers, "name"), sort_columns(View::kPollers).size() - 1);
}

TEST(SortingTest, NaturalOrder) {
  EXPECT_TRUE(natural_less("reactor2", "reactor10"));
  EXPECT_FALSE(natural_less("reactor10", "reactor2"));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_TRUE(natural_less("1", "01"));  // Equal numbers: the shorter spelling first.
  EXPECT_FALSE(natural_less("x", "x"));
  EXPECT_TRUE(natural_less("app", "app0"));
}

// --- Tables -----------------------------------------------------------------------------------

std::string many_reactors(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    const std::string l =
        "{reactor=\"" + std::to_string(i) + "\",core=\"" + std::to_string(i) + "\"}";
    text += "pollux_reactor_busy_seconds_total" + l + " " + std::to_string(i + 1) + "\n";
    text += "pollux_reactor_idle_seconds_total" + l + " 10\n";
  }
  return text;
}

TEST(TableTest, HeaderAndOneRowPerEntity) {
  Snapshot s = snapshot_of(many_reactors(3));
  std::vector<std::string> lines =
      lines_of(render_table(view_table(View::kReactors, s, nullptr, 0, {}), 100));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("REACTOR", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("BUSY%"), std::string::npos);
  // Busiest first: reactor 2 (3 / 13 busy).
  EXPECT_EQ(lines[1].rfind("2 ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("23.1"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[3].rfind("0 ", 0), 0u) << lines[3];
}

TEST(TableTest, EachViewHasItsColumns) {
  Snapshot s = snapshot_of(kSecondScrape);
  auto header = [&](View v) {
    return lines_of(render_table(view_table(v, s, nullptr, 0, {}), 200)).at(0);
  };
  EXPECT_NE(header(View::kThreads).find("MSGS/S"), std::string::npos);
  EXPECT_NE(header(View::kPollers).find("SHARE%"), std::string::npos);
  EXPECT_NE(header(View::kPollers).find("BUSYRUN%"), std::string::npos);
  EXPECT_NE(header(View::kReactors).find("ITER/S"), std::string::npos);
}

TEST(TableTest, RespectsTheWidth) {
  const std::string long_name(120, 'x');
  // The long name is the busier thread, so it is the first row.
  Snapshot s = snapshot_of("pollux_thread_busy_seconds_total{reactor=\"0\",thread=\"" + long_name +
                           "\"} 1\n"
                           "pollux_thread_busy_seconds_total{reactor=\"0\",thread=\"short\"} 1\n"
                           "pollux_thread_idle_seconds_total{reactor=\"0\",thread=\"short\"} 1\n");
  const Table table = view_table(View::kThreads, s, nullptr, 0, {});
  for (std::size_t width : {10u, 30u, 50u, 80u, 200u}) {
    std::vector<std::string> lines = lines_of(render_table(table, width));
    ASSERT_EQ(lines.size(), 3u) << width;
    for (const std::string& line : lines) EXPECT_LE(line.size(), width) << line;
  }
  // Wide enough for the numbers: only the name is cut, and the cut shows.
  std::vector<std::string> lines = lines_of(render_table(table, 60));
  EXPECT_NE(lines[1].find("~"), std::string::npos) << lines[1];
  EXPECT_NE(lines[0].find("MESSAGES"), std::string::npos) << lines[0];
  // Wide enough for everything: nothing is cut.
  EXPECT_NE(render_table(table, 200).find(long_name), std::string::npos);
}

TEST(TableTest, ControlCharactersInNamesCannotBreakLines) {
  Snapshot s =
      snapshot_of("pollux_thread_busy_seconds_total{reactor=\"0\",thread=\"two\\nlines\"} 1\n");
  std::vector<std::string> lines =
      lines_of(render_table(view_table(View::kThreads, s, nullptr, 0, {}), 80));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].rfind("two?lines", 0), 0u) << lines[1];
}

TEST(TableTest, FormatsNumbers) {
  EXPECT_EQ(format_percent(12.345), "12.3");
  EXPECT_EQ(format_percent(std::nullopt), "-");
  EXPECT_EQ(format_rate(950), "950.0");
  EXPECT_EQ(format_rate(1234), "1.23k");
  EXPECT_EQ(format_rate(45.6e6), "45.6M");
  EXPECT_EQ(format_rate(std::nullopt), "-");
  EXPECT_EQ(format_rate(NAN), "-");
  EXPECT_EQ(format_count(123456), "123456");
  EXPECT_EQ(format_count(12.3e6), "12.3M");
}

TEST(ScreenTest, FitsTheTerminalAndShowsStatus) {
  Snapshot s = snapshot_of(many_reactors(40));
  ScreenStatus status;
  status.endpoint = "127.0.0.1:9464/metrics";
  status.uptime_seconds = 3725;
  status.has_data = true;
  status.malformed_lines = 2;
  status.scrape_error = "GET http://127.0.0.1:9464/metrics: cannot connect: Connection refused";
  std::string screen =
      render_screen(status, view_table(View::kReactors, s, nullptr, 0, {}), 80, 20);
  std::vector<std::string> lines = lines_of(screen);
  ASSERT_EQ(lines.size(), 20u);
  for (const std::string& line : lines) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_NE(lines[0].find("127.0.0.1:9464"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("01:02:05"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("reactors by busy"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("scrape failed"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("REACTOR", 0), 0u);
  EXPECT_NE(lines.back().find("malformed lines: 2"), std::string::npos) << lines.back();

  // Scrapes that hold none of the series pollux-top reads say so instead of an empty table.
  ScreenStatus empty = status;
  empty.scrape_error.clear();
  empty.no_framework_metrics = true;
  const std::vector<std::string> hint = lines_of(
      render_screen(empty, view_table(View::kReactors, Snapshot{}, nullptr, 0, {}), 200, 20));
  ASSERT_GE(hint.size(), 2u);
  EXPECT_NE(hint[1].find("no event-framework metrics"), std::string::npos) << hint[1];

  // Tall enough: every row, then the footer.
  status.scrape_error.clear();
  EXPECT_EQ(
      lines_of(render_screen(status, view_table(View::kReactors, s, nullptr, 0, {}), 100, 100))
          .size(),
      2u + 41u + 1u);
}

// Two reactors, a thread on each with a poller (one thread has two).
const char* kTwoReactors = R"(
pollux_process_info{program="pollux-tgt"} 1
pollux_reactor_busy_seconds_total{reactor="0",core="0"} 1
pollux_reactor_idle_seconds_total{reactor="0",core="0"} 3
pollux_reactor_busy_seconds_total{reactor="1",core="1"} 3
pollux_reactor_idle_seconds_total{reactor="1",core="1"} 1
pollux_thread_busy_seconds_total{reactor="0",thread="app_thread"} 1
pollux_thread_idle_seconds_total{reactor="0",thread="app_thread"} 3
pollux_thread_info{reactor="0",thread="app_thread",cpumask="0x3"} 1
pollux_thread_busy_seconds_total{reactor="1",thread="nvmf_pg1"} 3
pollux_thread_idle_seconds_total{reactor="1",thread="nvmf_pg1"} 1
pollux_thread_info{reactor="1",thread="nvmf_pg1",cpumask="0x2"} 1
pollux_poller_runs_total{reactor="0",thread="app_thread",poller="rpc"} 10
pollux_poller_runs_total{reactor="1",thread="nvmf_pg1",poller="nvmf_tcp_poll_group"} 99
pollux_poller_runs_total{reactor="1",thread="nvmf_pg1",poller="nvmf_poll_group_poll"} 98
)";

TEST(ScreenTest, FilterKeepsRowsWithAMatchingName) {
  Snapshot s = snapshot_of(kTwoReactors);
  Table pollers = view_table(View::kPollers, s, nullptr, 0, {}, "nvmf_tcp");
  ASSERT_EQ(pollers.rows.size(), 1u);
  EXPECT_EQ(pollers.rows[0][0], "nvmf_tcp_poll_group");
  // Any name column matches (here the thread's), never a number.
  EXPECT_EQ(view_table(View::kPollers, s, nullptr, 0, {}, "pg1").rows.size(), 2u);
  EXPECT_EQ(view_table(View::kPollers, s, nullptr, 0, {}, "99").rows.size(), 0u);
  EXPECT_EQ(view_table(View::kThreads, s, nullptr, 0, {}, "0x2").rows.size(), 1u);
  EXPECT_EQ(view_table(View::kReactors, s, nullptr, 0, {}, "").rows.size(), 2u);
}

TEST(ScreenTest, DetailShowsEveryColumnAndWhatRunsThere) {
  Snapshot s = snapshot_of(kTwoReactors);
  Table reactors = view_table(View::kReactors, s, nullptr, 0, {});
  ASSERT_EQ(reactors.rows.at(0).at(0), "1");  // The busier first.
  const std::string reactor = render_detail(View::kReactors, reactors, 0, s, nullptr, 0, 100);
  EXPECT_NE(reactor.find("BUSY%       75.0"), std::string::npos) << reactor;
  EXPECT_NE(reactor.find("POLLERS     2"), std::string::npos) << reactor;
  EXPECT_NE(reactor.find("threads on reactor 1:"), std::string::npos) << reactor;
  EXPECT_NE(reactor.find("nvmf_pg1"), std::string::npos) << reactor;
  EXPECT_EQ(reactor.find("app_thread"), std::string::npos) << reactor;  // On reactor 0.

  Table threads = view_table(View::kThreads, s, nullptr, 0, {}, "nvmf_pg1");
  const std::string thread = render_detail(View::kThreads, threads, 0, s, nullptr, 0, 100);
  EXPECT_NE(thread.find("CPUMASK     0x2"), std::string::npos) << thread;
  EXPECT_NE(thread.find("pollers of thread nvmf_pg1:"), std::string::npos) << thread;
  EXPECT_NE(thread.find("nvmf_tcp_poll_group"), std::string::npos) << thread;
  EXPECT_NE(thread.find("nvmf_poll_group_poll"), std::string::npos) << thread;
  EXPECT_EQ(thread.find(" rpc "), std::string::npos) << thread;
  EXPECT_EQ(render_detail(View::kThreads, threads, 5, s, nullptr, 0, 100), "no row selected\n");
}

TEST(ScreenTest, SelectionIsMarkedAndKeptInViewWithTheProgramInTheHeader) {
  Snapshot s = snapshot_of(many_reactors(40));
  ScreenStatus status;
  status.endpoint = "127.0.0.1:9464/metrics";
  status.program = "pollux-tgt";
  status.has_data = true;
  status.filter = "1";
  status.selected = 12;
  const Table table = view_table(View::kReactors, s, nullptr, 0, {}, status.filter);
  const std::vector<std::string> lines = lines_of(render_screen(status, table, 80, 10));
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_NE(lines[0].find("pollux-tgt @ 127.0.0.1:9464"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("filter: 1"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[2].rfind("  REACTOR", 0), 0u) << lines[2];
  // 7 lines for rows: the selected (13th) row is the last shown, marked.
  std::size_t marked = 0;
  for (const std::string& l : lines) marked += l.rfind("> ", 0) == 0;
  EXPECT_EQ(marked, 1u);
  EXPECT_EQ(lines[8].rfind("> " + table.rows[12][0] + " ", 0), 0u) << lines[8];

  status.detail = "  REACTOR     7\n";
  const std::vector<std::string> detail = lines_of(render_screen(status, table, 80, 10));
  EXPECT_EQ(detail[2], "  REACTOR     7");
  EXPECT_NE(detail.back().find("Enter/Esc back"), std::string::npos) << detail.back();
}

// --- Option values ----------------------------------------------------------------------------

TEST(OptionsTest, ParsesIntervals) {
  EXPECT_EQ(parse_interval("500ms"), milliseconds(500));
  EXPECT_EQ(parse_interval("1s"), milliseconds(1000));
  EXPECT_EQ(parse_interval("2"), milliseconds(2000));
  EXPECT_EQ(parse_interval("1.5s"), milliseconds(1500));
  for (const char* bad : {"", "s", "ms", "0", "0.0001", "-1", "5x", "1 s", "nan", "inf"}) {
    EXPECT_FALSE(parse_interval(bad)) << bad;
  }
}

TEST(OptionsTest, ParsesEndpoints) {
  std::optional<Endpoint> e = parse_endpoint("127.0.0.1:9464");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 9464);
  EXPECT_EQ(e->path, "/metrics");
  e = parse_endpoint("http://localhost:80/custom");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "localhost");
  EXPECT_EQ(e->path, "/custom");
  e = parse_endpoint("[::1]:9464");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->to_string(), "[::1]:9464/metrics");
  for (const char* bad : {"nohost", ":80", "h:0", "h:70000", "h:abc", "h:", "[::1]9464"}) {
    EXPECT_FALSE(parse_endpoint(bad)) << bad;
  }
  EXPECT_EQ(parse_view("pollers"), View::kPollers);
  EXPECT_FALSE(parse_view("cores"));
}

// --- HTTP -------------------------------------------------------------------------------------

// Every wait is bounded so a broken client fails the test instead of hanging it.
constexpr int kServerWaitMs = 5000;

// Listens on a free loopback port; one thread accepts one connection, reads the request, then
// writes `response` and closes (or, with no response, waits for the client to give up).
class OneShotServer {
 public:
  explicit OneShotServer(std::optional<std::string> response) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listener_, 1), 0);
    EXPECT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, response = std::move(response)] { serve(response); });
  }
  ~OneShotServer() {
    thread_.join();
    close(listener_);
  }

  uint16_t port() const { return port_; }
  Endpoint endpoint() const { return {"127.0.0.1", port_, "/metrics"}; }
  // Read only after the client returned (the server thread has written it by then).
  const std::string& request() const { return request_; }

 private:
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, kServerWaitMs) == 1;
  }

  void serve(const std::optional<std::string>& response) {
    if (!readable(listener_)) return;
    int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos && readable(fd)) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<std::size_t>(n));
    }
    if (response) {
      send(fd, response->data(), response->size(), MSG_NOSIGNAL);
    } else {
      while (readable(fd) && recv(fd, buf, sizeof buf, 0) > 0) {
      }
    }
    close(fd);
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  std::string request_;
  std::thread thread_;
};

const std::string kMetricsBody =
    "# TYPE pollux_reactor_threads gauge\n"
    "pollux_reactor_threads{reactor=\"0\",core=\"1\"} 2\n"
    "pollux_reactor_busy_seconds_total{reactor=\"0\",core=\"1\"} 1.25\n";

TEST(HttpGetTest, FetchesAndParsesAMetricsPage) {
  OneShotServer server(
      "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
      "Content-Length: " +
      std::to_string(kMetricsBody.size()) + "\r\n\r\n" + kMetricsBody);
  HttpResult r = http_get(server.endpoint(), milliseconds(kServerWaitMs));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, kMetricsBody);
  EXPECT_EQ(server.request().rfind("GET /metrics HTTP/1.0\r\n", 0), 0u) << server.request();
  Snapshot s = build_snapshot(parse_exposition(r.body));
  ASSERT_EQ(s.reactors.count("0"), 1u);
  EXPECT_EQ(s.reactors.at("0").threads, 2);
  EXPECT_EQ(s.reactors.at("0").busy_seconds, 1.25);
}

TEST(HttpGetTest, ReadsUntilCloseWithoutContentLength) {
  OneShotServer server("HTTP/1.0 200 OK\r\n\r\n" + kMetricsBody);
  HttpResult r = http_get(server.endpoint(), milliseconds(kServerWaitMs));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, kMetricsBody);
}

TEST(HttpGetTest, RefusedConnectionIsAnError) {
  // A port that was free a moment ago and has no listener now.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  HttpResult r = http_get({"127.0.0.1", ntohs(addr.sin_port), "/metrics"}, milliseconds(1000));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("Connection refused"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(std::to_string(ntohs(addr.sin_port))), std::string::npos) << r.error;
}

TEST(HttpGetTest, BadStatusIsAnErrorNamingIt) {
  OneShotServer server("HTTP/1.0 404 Not Found\r\nContent-Length: 9\r\n\r\nnot here\n");
  HttpResult r = http_get(server.endpoint(), milliseconds(kServerWaitMs));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("404 Not Found"), std::string::npos) << r.error;
}

TEST(HttpGetTest, SilentServerTimesOut) {
  OneShotServer server(std::nullopt);
  HttpResult r = http_get(server.endpoint(), milliseconds(100));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
}

TEST(HttpResponseTest, ChecksStatusAndLength) {
  EXPECT_EQ(parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef").body, "abc");
  EXPECT_NE(parse_http_response("HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .error.find("truncated"),
            std::string::npos);
  EXPECT_NE(parse_http_response("").error.find("empty"), std::string::npos);
  EXPECT_NE(parse_http_response("garbage\r\n\r\n").error.find("status line"), std::string::npos);
  EXPECT_NE(parse_http_response("HTTP/1.0 500 Oops\r\n\r\n").error.find("500 Oops"),
            std::string::npos);
  EXPECT_NE(parse_http_response("HTTP/1.0 200 OK\r\nContent-Length: x\r\n\r\n")
                .error.find("Content-Length"),
            std::string::npos);
  EXPECT_TRUE(parse_http_response("HTTP/1.0 200 OK\n\nbody").ok());
}

}  // namespace
}  // namespace pollux::top
