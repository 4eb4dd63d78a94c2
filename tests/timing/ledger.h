// The fidelity ledger (tests/timing/ledger.yaml): published figures as rows, the runs that
// reproduce them in virtual time, and the comparison. Used by //tests/timing:ledger_test.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "emulator/nvme/result.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/run.h"

namespace pollux::sim::ledger {

enum class Bound { kEqual, kAtMost, kAtLeast };

struct Source {
  std::string title, url;
  std::string host;  // the measuring host's I/O stack: a key of Ledger::hosts
};

// A measuring host's I/O stack beyond the polled driver (JobOptions::stack_ns).
struct Host {
  uint64_t stack_ns = 0;
  std::string note;
};

struct Row {
  std::string id, profile, rw = "randread";
  uint32_t mix = 100, bs = 4096, qd = 1, devices = 1;
  std::string precondition;  // "" = the profile's own
  uint32_t pcie_gen = 0;     // 0 = the profile's own
  uint32_t scale_blocks = 0, scale_pages = 0;
  std::string metric;
  double published = 0;
  Bound bound = Bound::kEqual;
  std::string source, where, kind, note;
  std::string host;  // "" = the source's
  uint64_t stack_ns = 0;  // the host's, resolved by parse_ledger
  double time_ms = 10, warmup_ms = 2;
  double tolerance = 0.10;
  std::string gap;
  double gap_low = 0, gap_high = 0;
  bool is_gap() const { return !gap.empty(); }
};

struct Ledger {
  std::map<std::string, Host> hosts;
  std::map<std::string, Source> sources;
  std::vector<Row> rows;
  double target_mean_abs_error = 0.03;
};

emu::nvme::Result<Ledger> parse_ledger(const std::string& yaml_text);

// The run a row needs; rows with the same key share one run.
std::string run_key(const Row& r);
// Builds the run of `r` (profile changes, job). `capacity_ratio` is the scaled drive's
// capacity over the full drive's (1 when not scaled).
emu::nvme::Result<RunSpec> run_spec(const Row& r, uint64_t seed, double* capacity_ratio);

// What a run measured, by metric name. Metrics that need a series (slc_*) use the run's
// per-window completions.
struct Measured {
  std::map<std::string, double> values;
};
Measured measure(const Row& r, const RunSpec& spec, const RunReport& rep, double capacity_ratio);

// One row's outcome.
struct Outcome {
  const Row* row = nullptr;
  double model = 0;
  double error = 0;  // model / published - 1
  bool measured = false;
  bool pass = false;
  std::string status;  // "ok", "gap", "bound ok", "FAIL ..."
};
Outcome judge(const Row& r, std::optional<double> model);

struct Summary {
  size_t rows = 0, compared = 0, gaps = 0, bounds = 0, failed = 0;
  double mean_abs_error = 0, max_abs_error = 0;  // over compared rows (not gaps, not bounds)
  std::string max_row;
};
Summary summarize(const std::vector<Outcome>& outcomes, const std::string& profile = "");

// A Markdown table of every row and the statistics, for docs/FIDELITY.md.
std::string markdown(const Ledger& l, const std::vector<Outcome>& outcomes, uint64_t seed);
// Replaces the text between the ledger markers of `doc` with `table`; false if the markers
// are missing.
bool splice_markdown(std::string* doc, const std::string& table);

}  // namespace pollux::sim::ledger
