// The fidelity ledger in virtual time: every row of tests/timing/ledger.yaml is run (rows that
// need the same run share it), compared with its published figure and judged: a row beyond
// its tolerance, a known gap that left its band, a stated limit the model breaks, or a mean
// |error| above the ledger's target fails the test. Prints the table; with
// --update-doc=docs/FIDELITY.md (bazel run) it rewrites the generated part of that file.
//
//   bazel test //tests/timing:ledger_test
//   bazel run //tests/timing:ledger_test -- --update-doc=docs/FIDELITY.md
//   POLLUX_LEDGER_FILTER=p3700 bazel run //tests/timing:ledger_test   (rows whose id has it)
#include "tests/timing/ledger.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace pollux::sim::ledger {
namespace {

constexpr uint64_t kSeed = 1;  // every run's seed; POLLUX_SEED replaces it
std::string g_update_doc;      // --update-doc=PATH

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t seed() {
  const char* s = std::getenv("POLLUX_SEED");
  return s && *s ? std::strtoull(s, nullptr, 0) : kSeed;
}

TEST(Ledger, EveryRowMatchesItsPublishedFigure) {
  const std::string text = read_file("tests/timing/ledger.yaml");
  ASSERT_FALSE(text.empty()) << "tests/timing/ledger.yaml not found (run under bazel)";
  auto parsed = parse_ledger(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const Ledger& l = parsed.value();
  const char* filter = std::getenv("POLLUX_LEDGER_FILTER");
  const uint64_t s = seed();
  std::printf("fidelity ledger: %zu rows, seed %" PRIu64 " (POLLUX_SEED replays another)\n",
              l.rows.size(), s);

  // One run per distinct run key, in ledger order.
  struct Run {
    RunSpec spec;
    RunReport report;
    double ratio = 1;
  };
  std::map<std::string, Run> runs;
  std::vector<Outcome> outcomes;
  const auto wall0 = std::chrono::steady_clock::now();
  for (const Row& r : l.rows) {
    if (filter && *filter && r.id.find(filter) == std::string::npos) continue;
    const std::string key = run_key(r);
    auto it = runs.find(key);
    if (it == runs.end()) {
      Run run;
      auto spec = run_spec(r, s, &run.ratio);
      ASSERT_TRUE(spec.ok()) << spec.error();
      run.spec = std::move(spec).value();
      const auto w0 = std::chrono::steady_clock::now();
      run.report = run_perf(run.spec);
      ASSERT_EQ(run.report.error, "") << r.id;
      for (const auto& d : run.report.devices) {
        EXPECT_EQ(d.job.errors, 0u) << r.id;
        EXPECT_EQ(d.device.engine_mismatches, 0u) << r.id;
      }
      std::printf("  run %-44s %8.2f s wall, %6.1f ms simulated, %9.0f I/O\n", r.id.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count(),
                  double(run.report.simulated_ns) / 1e6, double(run.report.total_ios));
      it = runs.emplace(key, std::move(run)).first;
    }
    const Measured m = measure(r, it->second.spec, it->second.report, it->second.ratio);
    const auto v = m.values.find(r.metric);
    outcomes.push_back(judge(r, v == m.values.end() ? std::nullopt : std::optional(v->second)));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  std::printf("\n%-46s %10s %10s %8s  %s\n", "row", "published", "model", "error", "status");
  for (const Outcome& o : outcomes) {
    std::printf("%-46s %10.4g %10.4g %+7.1f%%  %s\n", o.row->id.c_str(), o.row->published, o.model,
                o.error * 100, o.status.c_str());
    EXPECT_TRUE(o.pass) << o.row->id << ": " << o.status << " (published " << o.row->published
                        << ", model " << o.model << ")";
  }
  std::vector<std::string> profiles;
  for (const Outcome& o : outcomes)
    if (std::find(profiles.begin(), profiles.end(), o.row->profile) == profiles.end())
      profiles.push_back(o.row->profile);
  std::printf("\n");
  for (const std::string& p : profiles) {
    const Summary sp = summarize(outcomes, p);
    std::printf(
        "%-9s %3zu rows, %3zu compared: mean |error| %.1f%%, largest %.1f%% (%s); %zu "
        "known gaps, %zu bounds\n",
        p.c_str(), sp.rows, sp.compared, sp.mean_abs_error * 100, sp.max_abs_error * 100,
        sp.max_row.c_str(), sp.gaps, sp.bounds);
  }
  const Summary all = summarize(outcomes);
  std::printf(
      "all       %3zu rows, %3zu compared: mean |error| %.1f%% (target %.1f%%), largest "
      "%.1f%% (%s); %zu known gaps, %zu bounds, %zu failed; %.1f s wall\n",
      all.rows, all.compared, all.mean_abs_error * 100, l.target_mean_abs_error * 100,
      all.max_abs_error * 100, all.max_row.c_str(), all.gaps, all.bounds, all.failed, wall);
  if (!filter || !*filter) {
    EXPECT_LE(all.mean_abs_error, l.target_mean_abs_error) << "mean |error| over compared rows";
  }

  if (!g_update_doc.empty()) {
    ASSERT_TRUE(!filter || !*filter) << "--update-doc needs every row (no POLLUX_LEDGER_FILTER)";
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // bazel run: the source tree
    const std::string path =
        g_update_doc[0] == '/' || !ws ? g_update_doc : std::string(ws) + "/" + g_update_doc;
    std::string doc = read_file(path);
    ASSERT_FALSE(doc.empty()) << path << ": cannot read";
    ASSERT_TRUE(splice_markdown(&doc, markdown(l, outcomes, s)))
        << path << ": no ledger markers (<!-- ledger:begin ... --> ... <!-- ledger:end -->)";
    std::ofstream(path) << doc;
    std::printf("wrote the ledger table into %s\n", path.c_str());
  }
}

// The measuring host: a source's host applies to its rows, a row may name another, and a
// host nobody defined is an error naming where.
TEST(LedgerHosts, ResolveFromTheSourceOrTheRow) {
  const std::string head = R"(
hosts:
  polled: {stack_ns: 0, note: "polled"}
  kernel: {stack_ns: 1900, note: "a kernel"}
sources:
  s: {title: "t", url: "u", host: kernel}
rows:
)";
  const std::string row =
      "  - {id: a, profile: p4800x, metric: iops, published: 1, source: s, kind: review, "
      "where: w";
  auto l = parse_ledger(head + row + "}\n" + row.substr(0, row.find("id: a")) +
                        "id: b" + row.substr(row.find("id: a") + 5) + ", host: polled}\n");
  ASSERT_TRUE(l.ok()) << l.error();
  EXPECT_EQ(l.value().rows[0].host, "kernel");
  EXPECT_EQ(l.value().rows[0].stack_ns, 1900u);
  EXPECT_EQ(l.value().rows[1].host, "polled");
  EXPECT_EQ(l.value().rows[1].stack_ns, 0u);
  EXPECT_NE(run_key(l.value().rows[0]), run_key(l.value().rows[1]));  // not one shared run

  auto bad_row = parse_ledger(head + row + ", host: fio}\n");
  ASSERT_FALSE(bad_row.ok());
  EXPECT_NE(bad_row.error().find("host 'fio' is not in hosts"), std::string::npos)
      << bad_row.error();
  std::string no_host = head;
  no_host.replace(no_host.find(", host: kernel"), 14, "");
  auto bad_source = parse_ledger(no_host + row + "}\n");
  ASSERT_FALSE(bad_source.ok());
  EXPECT_NE(bad_source.error().find("sources.s.host"), std::string::npos) << bad_source.error();
}

}  // namespace
}  // namespace pollux::sim::ledger

// SystemC's library defines main() and calls sc_main(); this main() runs the tests instead.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--update-doc=", 13) == 0)
      pollux::sim::ledger::g_update_doc = argv[i] + 13;
  }
  return RUN_ALL_TESTS();
}
