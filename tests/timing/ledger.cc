#include "tests/timing/ledger.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "emulator/timing/yaml_section.h"

namespace pollux::sim::ledger {

namespace t = emu::timing;
using emu::nvme::Error;
using emu::nvme::Result;
using emu::nvme::Status;
using t::yaml::Section;

namespace {

constexpr uint64_t kNsPerMs = 1'000'000;

const char* const kMetrics[] = {"iops",      "mb_s",   "mean_us",  "p50_us",       "p99_us",
                                "p99999_us", "slc_gb", "slc_mb_s", "post_slc_mb_s"};

bool is_series_metric(const std::string& m) {
  return m.rfind("slc_", 0) == 0 || m == "post_slc_mb_s";
}

Status parse_row(const YAML::Node& n, size_t index, const Ledger& l, Row* r) {
  const std::string where = "rows[" + std::to_string(index) + "]";
  if (!n.IsMap()) return Error{where + ": expected a mapping" + t::yaml::where(n)};
  const std::string id = n["id"] && n["id"].IsScalar() ? n["id"].Scalar() : "";
  const std::string at = id.empty() ? where : where + " (" + id + ")";
  Section f(n, at);  // every error names the row
  POLLUX_TRY(f.string("id", &r->id));
  POLLUX_TRY(f.string("profile", &r->profile));
  POLLUX_TRY(f.string("rw", &r->rw));
  POLLUX_TRY(f.uint("mix", 0, 100, &r->mix));
  POLLUX_TRY(f.uint("bs", 512, 1 << 24, &r->bs));
  POLLUX_TRY(f.uint("qd", 1, 4095, &r->qd));
  POLLUX_TRY(f.uint("devices", 1, 64, &r->devices));
  POLLUX_TRY(f.string("precondition", &r->precondition));
  POLLUX_TRY(f.uint("pcie_gen", 1, 5, &r->pcie_gen));
  POLLUX_TRY(f.uint("scale_blocks", 2, 1 << 20, &r->scale_blocks));
  POLLUX_TRY(f.uint("scale_pages", 1, 1 << 16, &r->scale_pages));
  POLLUX_TRY(f.string("metric", &r->metric));
  POLLUX_TRY(f.number("published", 0, 1e12, &r->published));
  std::string bound = "equal";
  POLLUX_TRY(f.string("bound", &bound));
  POLLUX_TRY(f.string("source", &r->source));
  POLLUX_TRY(f.string("where", &r->where));
  POLLUX_TRY(f.string("kind", &r->kind));
  POLLUX_TRY(f.string("note", &r->note));
  POLLUX_TRY(f.string("host", &r->host));
  POLLUX_TRY(f.number("time_ms", 0.001, 60000, &r->time_ms));
  POLLUX_TRY(f.number("warmup_ms", 0, 60000, &r->warmup_ms));
  POLLUX_TRY(f.number("tolerance", 0, 10, &r->tolerance));
  POLLUX_TRY(f.string("gap", &r->gap));
  if (YAML::Node band = f.take("gap_band")) {
    if (!band.IsSequence() || band.size() != 2)
      return Error{at + ".gap_band: expected [low, high]" + t::yaml::where(band)};
    r->gap_low = band[0].as<double>();
    r->gap_high = band[1].as<double>();
    if (r->gap_low > r->gap_high) return Error{at + ".gap_band: low is above high"};
  }
  POLLUX_TRY(f.unknown_keys());

  auto bad = [&](const std::string& m) { return Error{at + ": " + m}; };
  if (r->id.empty()) return bad("id is required");
  if (r->profile.empty()) return bad("profile is required");
  if (r->published <= 0) return bad("published must be above 0");
  static const char* const kRw[] = {"randread", "randwrite", "randrw", "read", "write"};
  if (std::find(std::begin(kRw), std::end(kRw), r->rw) == std::end(kRw))
    return bad("rw '" + r->rw + "' is not one of randread, randwrite, randrw, read, write");
  if (r->rw != "randrw" && n["mix"]) return bad("mix applies to rw: randrw only");
  if (r->rw == "randrw" && !n["mix"]) return bad("rw: randrw needs mix (percentage of reads)");
  if (std::find(std::begin(kMetrics), std::end(kMetrics), r->metric) == std::end(kMetrics))
    return bad("metric '" + r->metric + "' is unknown");
  if (bound == "equal")
    r->bound = Bound::kEqual;
  else if (bound == "at_most")
    r->bound = Bound::kAtMost;
  else if (bound == "at_least")
    r->bound = Bound::kAtLeast;
  else
    return bad("bound '" + bound + "' is not one of equal, at_most, at_least");
  if (!r->precondition.empty() && r->precondition != "fresh" && r->precondition != "sequential" &&
      r->precondition != "steady")
    return bad("precondition '" + r->precondition + "' is not one of fresh, sequential, steady");
  if (!l.sources.count(r->source)) return bad("source '" + r->source + "' is not in sources");
  if (r->where.empty()) return bad("where (in the source) is required");
  if (r->host.empty()) r->host = l.sources.at(r->source).host;
  if (!l.hosts.count(r->host)) return bad("host '" + r->host + "' is not in hosts");
  r->stack_ns = l.hosts.at(r->host).stack_ns;
  static const char* const kKinds[] = {"data_sheet", "vendor_brief", "review", "paper",
                                       "user_measurement"};
  if (std::find(std::begin(kKinds), std::end(kKinds), r->kind) == std::end(kKinds))
    return bad("kind '" + r->kind +
               "' is not one of data_sheet, vendor_brief, review, paper, user_measurement");
  if (r->is_gap() && !n["gap_band"]) return bad("a gap needs gap_band (the error it is in today)");
  if (!r->is_gap() && n["gap_band"]) return bad("gap_band without gap");
  if (r->is_gap() && r->bound != Bound::kEqual) return bad("a bound cannot be a gap");
  if (is_series_metric(r->metric) && (r->rw != "write"))
    return bad("the slc metrics need rw: write (a sequential fill)");
  if (r->scale_pages && !r->scale_blocks) return bad("scale_pages needs scale_blocks");
  return {};
}

}  // namespace

Result<Ledger> parse_ledger(const std::string& yaml_text) {
  Ledger l;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Error{std::string("ledger: YAML syntax error: ") + e.what()};
  }
  if (Status s = t::yaml::unique_keys(root); !s) return Error{"ledger: " + s.error()};
  if (!root.IsMap()) return Error{"ledger: the document must be a mapping"};
  Section top(root, "");
  POLLUX_TRY(top.number("target_mean_abs_error", 0, 1, &l.target_mean_abs_error));
  const YAML::Node hosts = top.take("hosts");
  if (!hosts || !hosts.IsMap()) return Error{"ledger: hosts: expected a mapping"};
  for (const auto& kv : hosts) {
    const std::string key = kv.first.as<std::string>();
    Section s(kv.second, "hosts." + key);
    POLLUX_TRY(s.check_is_map());
    Host h;
    double ns = 0;
    POLLUX_TRY(s.number("stack_ns", 0, 1e9, &ns));
    h.stack_ns = static_cast<uint64_t>(ns);
    POLLUX_TRY(s.string("note", &h.note));
    POLLUX_TRY(s.unknown_keys());
    if (h.note.empty())
      return Error{"ledger: hosts." + key + ".note is required (what it is, why that figure)"};
    l.hosts[key] = h;
  }
  const YAML::Node sources = top.take("sources");
  if (!sources || !sources.IsMap()) return Error{"ledger: sources: expected a mapping"};
  for (const auto& kv : sources) {
    const std::string key = kv.first.as<std::string>();
    Section s(kv.second, "sources." + key);
    POLLUX_TRY(s.check_is_map());
    Source src;
    POLLUX_TRY(s.string("title", &src.title));
    POLLUX_TRY(s.string("url", &src.url));
    POLLUX_TRY(s.string("host", &src.host));
    POLLUX_TRY(s.unknown_keys());
    if (src.title.empty()) return Error{"ledger: sources." + key + ".title is required"};
    if (!l.hosts.count(src.host))
      return Error{"ledger: sources." + key + ".host: '" + src.host + "' is not in hosts"};
    l.sources[key] = src;
  }
  const YAML::Node rows = top.take("rows");
  if (!rows || !rows.IsSequence()) return Error{"ledger: rows: expected a list"};
  POLLUX_TRY(top.unknown_keys());
  for (size_t i = 0; i < rows.size(); ++i) {
    Row r;
    POLLUX_TRY(parse_row(rows[i], i, l, &r));
    for (const Row& o : l.rows)
      if (o.id == r.id) return Error{"ledger: row id '" + r.id + "' is given twice"};
    l.rows.push_back(std::move(r));
  }
  return l;
}

std::string run_key(const Row& r) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", r.profile, r.rw, r.mix, r.bs,
                     r.qd, r.devices, r.precondition, r.pcie_gen, r.scale_blocks, r.scale_pages,
                     r.time_ms, r.warmup_ms, is_series_metric(r.metric), r.stack_ns);
}

Result<RunSpec> run_spec(const Row& r, uint64_t seed, double* capacity_ratio) {
  auto p = t::load_profile(r.profile);
  if (!p) return Error{r.id + ": " + p.error()};
  RunSpec s;
  s.profile = std::move(p).value();
  *capacity_ratio = 1.0;
  if (r.scale_blocks) {
    const double before = double(s.profile.controller.namespaces.at(0).size_bytes);
    if (Status st = t::scale_capacity(s.profile, r.scale_blocks, r.scale_pages); !st)
      return Error{r.id + ": " + st.error()};
    *capacity_ratio = double(s.profile.controller.namespaces.at(0).size_bytes) / before;
  }
  if (!r.precondition.empty()) {
    if (s.profile.media != t::MediaKind::kNand)
      return Error{r.id + ": precondition applies to NAND profiles only"};
    s.profile.ftl.precondition = r.precondition == "fresh"        ? t::Precondition::kNone
                                 : r.precondition == "sequential" ? t::Precondition::kSequential
                                                                  : t::Precondition::kSteady;
  }
  if (r.pcie_gen) s.profile.pcie.generation = r.pcie_gen;
  s.devices = r.devices;
  s.seed = seed;
  JobOptions& j = s.job;
  j.queue_depth = r.qd;
  j.io_bytes = r.bs;
  j.read_percent = r.rw == "randread" || r.rw == "read" ? 100 : r.rw == "randrw" ? r.mix : 0;
  j.pattern = r.rw == "read" || r.rw == "write" ? Pattern::kSequential : Pattern::kRandom;
  j.warmup_ns = static_cast<uint64_t>(r.warmup_ms * kNsPerMs);
  j.duration_ns = static_cast<uint64_t>(r.time_ms * kNsPerMs);
  j.stack_ns = r.stack_ns;
  if (is_series_metric(r.metric)) {
    j.warmup_ns = 0;  // the fill starts on the fresh drive
    j.series_window_ns = std::max<uint64_t>(j.duration_ns / 200, 100'000);
  }
  return s;
}

Measured measure(const Row& r, const RunSpec& spec, const RunReport& rep, double capacity_ratio) {
  Measured m;
  if (rep.devices.empty()) return m;
  const JobResult& j = rep.devices[0].job;
  m.values["iops"] = rep.total_iops;
  m.values["mb_s"] = rep.total_iops * r.bs / 1e6;
  const auto& h = j.latency_ns;
  if (h.count()) {
    m.values["mean_us"] = h.mean() / 1e3;
    m.values["p50_us"] = double(h.quantile(0.5)) / 1e3;
    m.values["p99_us"] = double(h.quantile(0.99)) / 1e3;
    m.values["p99999_us"] = double(h.quantile(0.99999)) / 1e3;
  }
  if (!j.series.empty() && spec.job.series_window_ns) {
    // The rate per window (bytes written / window); the fill is at its starting rate until the
    // first window below 70% of it (windows 1-3: the first holds the start-up).
    const double window_s = double(spec.job.series_window_ns) * 1e-9;
    std::vector<double> rate;
    for (uint64_t c : j.series) rate.push_back(double(c) * r.bs / window_s);
    if (rate.size() > 4) {
      std::vector<double> head(rate.begin() + 1, rate.begin() + 4);
      std::sort(head.begin(), head.end());
      const double start = head[1];
      size_t drop = 1;
      while (drop < rate.size() && rate[drop] >= 0.7 * start) ++drop;
      double written = 0, sum = 0;
      for (size_t w = 0; w < drop; ++w) written += rate[w] * window_s;
      for (size_t w = 1; w < drop; ++w) sum += rate[w];
      if (drop > 1) m.values["slc_mb_s"] = sum / double(drop - 1) / 1e6;
      if (drop < rate.size()) {
        // The drive's DRAM write buffer fills after the SLC cache before the rate drops; it is
        // not scaled with the drive, so it is taken out before scaling back and put back after.
        const double dram = double(spec.profile.cache.bytes);
        m.values["slc_gb"] = ((written - dram) / capacity_ratio + dram) / 1e9;
        // After the drop (two windows of transition left out), to the end of the run (the
        // last window may be cut short by the end of the measurement: left out too).
        double post = 0;
        size_t n = 0;
        for (size_t w = drop + 2; w + 1 < rate.size(); ++w, ++n) post += rate[w];
        if (n) m.values["post_slc_mb_s"] = post / double(n) / 1e6;
      }
    }
  }
  return m;
}

Outcome judge(const Row& r, std::optional<double> model) {
  Outcome o;
  o.row = &r;
  if (!model) {
    o.status = "FAIL: not measured (run too short for this metric?)";
    return o;
  }
  o.measured = true;
  o.model = *model;
  o.error = *model / r.published - 1.0;
  switch (r.bound) {
    case Bound::kAtMost:
      o.pass = *model <= r.published;
      o.status = o.pass ? "bound ok" : "FAIL: above the stated limit";
      return o;
    case Bound::kAtLeast:
      o.pass = *model >= r.published;
      o.status = o.pass ? "bound ok" : "FAIL: below the stated limit";
      return o;
    case Bound::kEqual:
      break;
  }
  if (r.is_gap()) {
    o.pass = o.error >= r.gap_low && o.error <= r.gap_high;
    o.status = o.pass ? "gap"
                      : fmt::format("FAIL: gap left its band [{:+.0f}%, {:+.0f}%]", r.gap_low * 100,
                                    r.gap_high * 100);
    return o;
  }
  o.pass = std::fabs(o.error) <= r.tolerance;
  o.status = o.pass ? "ok" : fmt::format("FAIL: beyond ±{:.0f}%", r.tolerance * 100);
  return o;
}

Summary summarize(const std::vector<Outcome>& outcomes, const std::string& profile) {
  Summary s;
  double sum = 0;
  for (const Outcome& o : outcomes) {
    if (!profile.empty() && o.row->profile != profile) continue;
    ++s.rows;
    if (!o.pass) ++s.failed;
    if (o.row->bound != Bound::kEqual) {
      ++s.bounds;
      continue;
    }
    if (o.row->is_gap()) {
      ++s.gaps;
      continue;
    }
    if (!o.measured) continue;
    ++s.compared;
    sum += std::fabs(o.error);
    if (std::fabs(o.error) > s.max_abs_error) {
      s.max_abs_error = std::fabs(o.error);
      s.max_row = o.row->id;
    }
  }
  if (s.compared) s.mean_abs_error = sum / double(s.compared);
  return s;
}

namespace {

std::string workload(const Row& r) {
  std::string w = r.rw == "randrw" ? fmt::format("randrw {}/{}", r.mix, 100 - r.mix) : r.rw;
  const std::string bs =
      r.bs >= 1 << 20 ? fmt::format("{} MiB", r.bs >> 20) : fmt::format("{} KiB", r.bs >> 10);
  w += fmt::format(" {} QD{}", bs, r.qd);
  if (r.devices > 1) w += fmt::format(" ×{}", r.devices);
  if (!r.precondition.empty()) w += ", " + r.precondition;
  if (r.pcie_gen) w += fmt::format(", PCIe gen{}", r.pcie_gen);
  w += ", " + r.host + " host";
  return w;
}

std::string number(double v) {
  if (v >= 1e6) return fmt::format("{:.3f} M", v / 1e6);
  if (v >= 100000) return fmt::format("{:.1f} K", v / 1e3);
  if (v >= 1000) return fmt::format("{:.0f}", v);
  if (v >= 100) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

std::string escape(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

}  // namespace

std::string markdown(const Ledger& l, const std::vector<Outcome>& outcomes, uint64_t seed) {
  std::string out;
  out += fmt::format(
      "Generated by `//tests/timing:ledger_test` from `tests/timing/ledger.yaml` (seed {}, "
      "virtual time: the same on any machine).\n\n",
      seed);
  out +=
      "| profile | rows | compared | mean \\|error\\| | largest \\|error\\| | known gaps | bounds "
      "|\n";
  out += "|---|---|---|---|---|---|---|\n";
  std::vector<std::string> profiles;
  for (const Row& r : l.rows)
    if (std::find(profiles.begin(), profiles.end(), r.profile) == profiles.end())
      profiles.push_back(r.profile);
  auto line = [&](const std::string& name, const Summary& s) {
    out += fmt::format("| {} | {} | {} | {:.1f}% | {:.1f}% | {} | {} |\n", name, s.rows, s.compared,
                       s.mean_abs_error * 100, s.max_abs_error * 100, s.gaps, s.bounds);
  };
  for (const auto& p : profiles) line(p, summarize(outcomes, p));
  line("**all**", summarize(outcomes));
  out += "\n| row | workload | metric | published | model | error | status | source |\n";
  out += "|---|---|---|---|---|---|---|---|\n";
  for (const Outcome& o : outcomes) {
    const Row& r = *o.row;
    const std::string bound = r.bound == Bound::kAtMost    ? "≤ "
                              : r.bound == Bound::kAtLeast ? "≥ "
                                                           : "";
    std::string status = o.status;
    if (r.is_gap()) status = "known gap: " + r.gap;
    std::string src =
        fmt::format("[{}]({}) ({}): {}", r.source, l.sources.at(r.source).url, r.kind, r.where);
    if (!r.note.empty()) src += ". " + r.note;
    out += fmt::format(
        "| {} | {} | {} | {}{} | {} | {} | {} | {} |\n", r.id, escape(workload(r)), r.metric, bound,
        number(r.published), o.measured ? number(o.model) : "—",
        o.measured && r.bound == Bound::kEqual ? fmt::format("{:+.1f}%", o.error * 100) : "",
        escape(status), escape(src));
  }
  return out;
}

static const char kBegin[] = "<!-- ledger:begin (generated: do not edit by hand) -->";
static const char kEnd[] = "<!-- ledger:end -->";

bool splice_markdown(std::string* doc, const std::string& table) {
  const size_t b = doc->find(kBegin);
  const size_t e = doc->find(kEnd);
  if (b == std::string::npos || e == std::string::npos || e < b) return false;
  const size_t from = b + sizeof(kBegin) - 1;
  doc->replace(from, e - from, "\n" + table + "\n");
  return true;
}

}  // namespace pollux::sim::ledger
