#include "scenarios/runner/report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/text.h"

namespace pollux::scenarios {
namespace {

using nlohmann::json;

std::string us(uint64_t ns) { return fmt::format("{:.1f}", ns / 1e3); }

// 583300 -> "583K", 0.25 -> "0.25": axis labels a reader takes in at a glance.
std::string si(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g}K", v / 1e3);
  return fmt::format("{:.3g}", v);
}

// A round step for about `n` ticks up to `top` (1, 2 or 5 times a power of ten).
double tick_step(double top, int n) {
  const double raw = top / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Line {
  const std::vector<double>* values;
  std::string colour, label;  // an empty label: no legend
};

// A line chart over the run's time buckets, one polyline per line; faults are vertical
// markers.
std::string svg_chart(const RunResult& r, const std::string& title, const std::string& unit,
                      const std::vector<Line>& lines) {
  constexpr int kW = 900, kL = 60, kR = 10, kT = 24, kB = 30, kPlot = 166, kLegend = 14;
  int labelled = 0;
  for (const Line& l : lines) labelled += !l.label.empty();
  const int kH = kT + kPlot + kB + labelled * kLegend;
  const int axis_y = kT + kPlot;
  std::size_t n = 0;
  double top = 0;
  for (const Line& l : lines) {
    n = std::max(n, l.values->size());
    for (double v : *l.values) top = std::max(top, v);
  }
  const double span = double(std::max<uint64_t>(1, r.bucket_ns * n));
  if (top <= 0) top = 1;
  auto x = [&](double t_ns) { return kL + (kW - kL - kR) * t_ns / span; };
  auto y = [&](double v) { return kT + kPlot * (1 - v / top); };
  // Round ticks: the top of the y axis goes up to the next one.
  const double ystep = tick_step(top, 4);
  top = std::ceil(top / ystep) * ystep;
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>"
      "<text x='{}' y='16' class='title'>{} ({})</text>",
      kW, kH, kL, html_escape(title), unit);
  // Fault windows first (under the lines): a band from the fault to the end of its window,
  // a mark where it fired and, after a hot removal, where the device came back.
  for (const FaultOutcome& f : r.faults) {
    if (!f.fired) continue;
    const double fx = x(double(f.fired_ns));
    const double to = f.window_to_ns == kOpenWindow ? span : std::min(span, double(f.window_to_ns));
    s += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' class='window'/>", fx,
                     kT, std::max(1.0, x(to) - fx), kPlot);
    s += fmt::format(
        "<line x1='{0:.1f}' y1='{1}' x2='{0:.1f}' y2='{2}' class='fault'/>"
        "<text x='{3:.1f}' y='{4}' class='flabel'>{5}</text>",
        fx, kT, axis_y, fx + 2, kT + 10, html_escape(f.spec.label));
    if (f.recovery_from_ns > f.fired_ns && f.recovery_from_ns < span) {
      const double bx = x(double(f.recovery_from_ns));
      s += fmt::format(
          "<line x1='{0:.1f}' y1='{1}' x2='{0:.1f}' y2='{2}' class='back'/>"
          "<text x='{3:.1f}' y='{4}' class='blabel'>back</text>",
          bx, kT, axis_y, bx + 2, kT + 22);
    }
  }
  s += fmt::format(
      "<line x1='{}' y1='{}' x2='{}' y2='{}' class='axis'/>"
      "<line x1='{}' y1='{}' x2='{}' y2='{}' class='axis'/>",
      kL, kT, kL, axis_y, kL, axis_y, kW - kR, axis_y);
  for (double v = 0; v <= top + ystep / 2; v += ystep) {
    s += fmt::format(
        "<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' class='grid'/>"
        "<text x='{}' y='{:.1f}' class='tick' text-anchor='end'>{}</text>",
        kL, y(v), kW - kR, y(v), kL - 4, y(v) + 3, si(v));
  }
  const double xstep = tick_step(span, 6);
  for (double t = 0; t <= span + 1; t += xstep) {
    s += fmt::format(
        "<line x1='{0:.1f}' y1='{1}' x2='{0:.1f}' y2='{2}' class='axis'/>"
        "<text x='{0:.1f}' y='{3}' class='tick' text-anchor='middle'>{4}</text>",
        x(t), axis_y, axis_y + 4, axis_y + 16, t == 0 ? std::string("0") : format_ns(uint64_t(t)));
  }
  int legend_y = axis_y + kB + kLegend - 4;
  // Lines drawn over each other stay visible: the first solid and widest, the next ones
  // dashed and thinner (a busy poller's series used to hide another's).
  static const char* kDash[] = {"", "7 3", "3 3", "1 3", "9 2 2 2", "5 5"};
  std::size_t nth = 0;
  for (const Line& l : lines) {
    const char* dash = kDash[nth % (sizeof kDash / sizeof kDash[0])];
    const double width = nth == 0 ? 2.0 : 1.5;
    ++nth;
    std::string pts;
    for (size_t i = 0; i < l.values->size(); ++i) {
      pts += fmt::format("{:.1f},{:.1f} ", x((double(i) + 0.5) * double(r.bucket_ns)),
                         y((*l.values)[i]));
    }
    s += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='{}'{}/>", pts,
                     l.colour, width,
                     *dash ? fmt::format(" stroke-dasharray='{}'", dash) : std::string());
    if (l.label.empty()) continue;
    s += fmt::format(
        "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='3'{}/>"
        "<text x='{}' y='{}' class='tick'>{}</text>",
        kL, legend_y - 4, kL + 20, legend_y - 4, l.colour,
        *dash ? fmt::format(" stroke-dasharray='{}'", dash) : std::string(), kL + 26, legend_y,
        html_escape(l.label));
    legend_y += kLegend;
  }
  return s + "</svg>";
}

std::string svg_chart(const RunResult& r, const std::string& title, const std::string& unit,
                      const std::vector<double>& values, const std::string& colour) {
  return svg_chart(r, title, unit, {Line{&values, colour, ""}});
}

// The busiest pollers' busy-run share over time (the Grafana reactors dashboard's
// "busy-run %" panel), so a reader without Grafana sees it too.
// Shares of I/Os per latency band, four bands per decade on a log axis from 1 us: the whole
// run and the I/Os outside fault windows side by side, so a fault's tail shows as the bars
// that only "all I/O" has.
std::string latency_distribution_chart(const RunResult& r) {
  constexpr int kPerDecade = 4, kW = 900, kL = 60, kR = 10, kT = 24, kPlot = 166, kB = 44;
  using H = env::LatencyHistogram;
  const uint64_t top_ns = std::max<uint64_t>(r.latency.max(), 1000);
  const int bands = std::max(kPerDecade, static_cast<int>(std::ceil(
                                             kPerDecade * std::log10(double(top_ns) / 1e3) + 1e-9)));
  auto band_of = [](double ns) {  // band 0: below 1.78 us (and everything under 1 us)
    return ns < 1e3 ? 0 : static_cast<int>(std::floor(kPerDecade * std::log10(ns / 1e3)));
  };
  auto shares = [&](const H& h) {
    std::vector<double> v(static_cast<std::size_t>(bands), 0.0);
    if (h.count() == 0) return v;
    for (int b = 0; b < H::kBuckets; ++b) {
      if (h.bucket_count(b) == 0) continue;
      const int band = std::min(bands - 1, band_of(double(H::bucket_floor(b))));
      v[static_cast<std::size_t>(band)] += 100.0 * double(h.bucket_count(b)) / double(h.count());
    }
    return v;
  };
  const std::vector<double> all = shares(r.latency), outside = shares(r.latency_outside);
  double top = 1;
  for (double x : all) top = std::max(top, x);
  for (double x : outside) top = std::max(top, x);
  const double ystep = tick_step(top, 4);
  top = std::ceil(top / ystep) * ystep;
  const double bw = double(kW - kL - kR) / bands;
  auto y = [&](double v) { return kT + kPlot * (1 - v / top); };
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>"
      "<text x='{}' y='16' class='title'>Latency distribution (% of I/Os per band, log scale)"
      "</text><line x1='{}' y1='{}' x2='{}' y2='{}' class='axis'/>",
      kW, kT + kPlot + kB, kL, kL, kT + kPlot, kW - kR, kT + kPlot);
  for (double v = 0; v <= top + ystep / 2; v += ystep)
    s += fmt::format(
        "<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' class='grid'/>"
        "<text x='{}' y='{:.1f}' class='tick' text-anchor='end'>{}%</text>",
        kL, y(v), kW - kR, y(v), kL - 4, y(v) + 3, si(v));
  for (int b = 0; b < bands; ++b) {
    const double x0 = kL + b * bw;
    for (const auto& [v, colour, off] :
         {std::tuple{all[static_cast<std::size_t>(b)], "#06c", 0.1},
          std::tuple{outside[static_cast<std::size_t>(b)], "#6a6", 0.5}})
      if (v > 0)
        s += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}' "
                         "class='bar'><title>{:.2f}%</title></rect>",
                         x0 + off * bw, y(v), 0.4 * bw, kT + kPlot - y(v), colour, v);
  }
  for (int b = 0; b <= bands; b += kPerDecade)  // a tick per decade: 1us, 10us, ...
    s += fmt::format("<text x='{:.1f}' y='{}' class='tick' text-anchor='middle'>{}</text>",
                     kL + b * bw, kT + kPlot + 14,
                     format_ns(static_cast<uint64_t>(std::pow(10.0, 3 + b / kPerDecade))));
  s += fmt::format(
      "<rect x='{0}' y='{1}' width='12' height='8' fill='#06c'/><text x='{2}' y='{3}' "
      "class='tick'>all I/O</text><rect x='{4}' y='{1}' width='12' height='8' fill='#6a6'/>"
      "<text x='{5}' y='{3}' class='tick'>outside fault windows</text>",
      kL, kT + kPlot + 26, kL + 16, kT + kPlot + 34, kL + 90, kL + 106);
  return s + "</svg>";
}

std::string poller_chart(const RunResult& r) {
  static const char* kColours[] = {"#06c", "#c60", "#080", "#a0a", "#c00", "#088"};
  constexpr std::size_t kMax = sizeof kColours / sizeof kColours[0];
  std::vector<const PollerSeries*> busiest;  // r.pollers is busiest first
  for (const PollerSeries& p : r.pollers)
    if (p.busy_ns > 0 && busiest.size() < kMax) busiest.push_back(&p);
  if (busiest.empty()) return "";
  // The host reactor's time over the run (one reactor); its virtual time if there is none.
  const uint64_t cpu = r.host_busy_ns + r.host_idle_ns;
  const double span = static_cast<double>(std::max<uint64_t>(1, cpu ? cpu : r.simulated_ns));
  std::vector<std::vector<double>> pct(busiest.size());  // sized once: lines point into it
  std::vector<Line> lines;
  for (std::size_t i = 0; i < busiest.size(); ++i) {
    const PollerSeries& p = *busiest[i];
    for (double share : p.busy_time_share) pct[i].push_back(100 * share);
    lines.push_back({&pct[i], kColours[i],
                     fmt::format("{} ({:.1f}% of the time, {:.1f}% of {} runs busy)", p.name,
                                 100.0 * double(p.busy_ns) / span,
                                 100.0 * double(p.busy_runs) / double(std::max<uint64_t>(1, p.runs)),
                                 p.runs)});
  }
  return svg_chart(r, "Pollers: host CPU time in busy runs", "% of time", lines);
}

}  // namespace

std::string result_table(const RunResult& r) {
  std::string s;
  s += fmt::format("scenario {}  seed {}  {}\n", r.scenario, r.seed, r.passed ? "PASSED" : "FAILED");
  if (!r.error.empty()) return s + "error: " + r.error + "\n";
  // Only emulated devices keep an event trace.
  const std::string trace = r.trace_records
                                ? fmt::format(", trace {:016x} ({} records)", r.trace_hash,
                                              r.trace_records)
                                : std::string();
  s += fmt::format("{} time {} (planned {}), wall {:.2f} s, {} steps{}\n", r.time,
                   format_ns(r.simulated_ns), format_ns(r.planned_ns), r.wall_seconds, r.steps,
                   trace);
  s += fmt::format("I/O {} completed, {} errors ({} outside fault windows); latency p50 {} us "
                   "p99 {} us max {} us; outside faults p99 {} us\n",
                   r.ios, r.errors, r.errors_outside_windows, us(r.latency.quantile(0.5)),
                   us(r.latency.quantile(0.99)), us(r.latency.max()),
                   us(r.latency_outside.quantile(0.99)));
  if (const uint64_t cpu = r.host_busy_ns + r.host_idle_ns; cpu > 0) {
    s += fmt::format("host CPU: reactor busy {:.1f}% ({} of {})", 100.0 * double(r.host_busy_ns) / double(cpu),
                     format_ns(r.host_busy_ns), format_ns(cpu));
    if (!r.pollers.empty() && r.pollers[0].busy_ns > 0)
      s += fmt::format("; busiest poller {} {:.1f}%", r.pollers[0].name,
                       100.0 * double(r.pollers[0].busy_ns) / double(cpu));
    s += "\n";
  }
  if (r.realtime_max_lag_ns > 0) {
    s += fmt::format("realtime: the devices' model fell up to {} behind the wall clock{}\n",
                     format_ns(r.realtime_max_lag_ns),
                     r.realtime_max_lag_ns > kRealtimeLagWarnNs
                         ? fmt::format(" — WARNING: beyond {}, the latencies above are this "
                                       "machine's, not the device profiles'",
                                       format_ns(kRealtimeLagWarnNs))
                         : "");
  }
  if (r.target_busy_ns > 0 && r.simulated_ns > 0) {
    // Busy: the cores' average share of the run.
    const std::string cores =
        r.target_cores == 1 ? std::string("core") : fmt::format("{} cores", r.target_cores);
    s += fmt::format("target CPU: {} busy {:.1f}% ({} commands, {:.0f} ns each)\n", cores,
                     100.0 * double(r.target_busy_ns) / double(r.simulated_ns) /
                         std::max<uint32_t>(1, r.target_cores),
                     r.target_commands,
                     double(r.target_busy_ns) / double(std::max<uint64_t>(1, r.target_commands)));
  }
  s += fmt::format("\n{:<10} {:>8} {:>8} {:>7} {:>7} {:>9} {:>7}\n", "workload", "reads",
                   "writes", "flushes", "errors", "verified", "reopens");
  for (const WorkloadOutcome& w : r.workloads) {
    s += fmt::format("{:<10} {:>8} {:>8} {:>7} {:>7} {:>9} {:>7}\n", w.name, w.reads, w.writes,
                     w.flushes, w.errors, w.verified_reads, w.reopens);
  }
  s += fmt::format("\n{:<8} {:<9} {:>6} {:>7} {:>7} {:>8} {:>7} {:>9} {:>10}\n", "device",
                   "profile", "at end", "resets", "retries", "dev rst", "faults", "swept",
                   "violations");
  for (const DeviceOutcome& d : r.devices) {
    auto device = [&](uint64_t v) { return d.device_counters ? std::to_string(v) : "-"; };
    s += fmt::format("{:<8} {:<9} {:>6} {:>7} {:>7} {:>8} {:>7} {:>9} {:>10}\n", d.name,
                     d.profile, d.attached_at_end ? "yes" : "no", d.host_resets, d.retries,
                     device(d.device_resets), device(d.fault_hits), d.swept_blocks, d.violations);
  }
  if (!r.faults.empty()) {
    s += fmt::format("\n{:<4} {:<22} {:<7} {:>10} {:>12}  {}\n", "line", "fault", "device", "at",
                     "recovery", "detail");
    for (const FaultOutcome& f : r.faults) {
      s += fmt::format("{:<4} {:<22} {:<7} {:>10} {:>12}  {}\n", f.spec.line,
                       f.spec.label.substr(0, 22), f.spec.device.empty() ? "-" : f.spec.device,
                       f.fired ? format_ns(f.fired_ns) : "never",
                       f.recovered ? format_ns(f.recovery_ns) : "-", f.detail.substr(0, 60));
    }
  }
  if (!r.notes.empty()) s += "\n";
  for (const std::string& n : r.notes) s += n + "\n";
  if (!r.fabric.empty()) {  // the transport's counters at the end
    s += "\nfabric counters:";
    for (size_t i = 0; i < r.fabric.size(); ++i)
      s += fmt::format("{} {} {}", i ? "," : "", r.fabric[i].first, r.fabric[i].second);
    s += "\n";
  }
  if (!r.expectations.empty()) s += "\n";
  for (const ExpectationOutcome& x : r.expectations) {
    s += fmt::format("expect {:<4} {}: {} ({})\n", x.passed ? "ok" : "NOT", x.name, x.measured,
                     x.limit);
  }
  for (const std::string& v : r.violations) s += "violation: " + v + "\n";
  for (const std::string& f : r.failures) s += "FAILED: " + f + "\n";
  if (!r.passed && !r.replay.empty()) s += "replay: " + r.replay + "\n";
  return s;
}

std::string report_json(const RunResult& r) {
  json j;
  j["scenario"] = r.scenario;
  j["file"] = r.file;
  j["seed"] = r.seed;
  j["passed"] = r.passed;
  j["error"] = r.error;
  j["failures"] = r.failures;
  j["replay"] = r.replay;
  j["trace_hash"] = fmt::format("{:016x}", r.trace_hash);
  j["trace_records"] = r.trace_records;
  j["time"] = r.time;
  j["simulated_ns"] = r.simulated_ns;
  j["planned_ns"] = r.planned_ns;
  j["wall_seconds"] = r.wall_seconds;
  j["steps"] = r.steps;
  j["host_busy_ns"] = r.host_busy_ns;
  j["host_idle_ns"] = r.host_idle_ns;
  j["target_busy_ns"] = r.target_busy_ns;
  j["target_commands"] = r.target_commands;
  j["target_cores"] = r.target_cores;
  j["target_core_busy_ns"] = r.target_core_busy_ns;
  j["realtime_max_lag_ns"] = r.realtime_max_lag_ns;
  j["realtime_fell_behind"] = r.realtime_max_lag_ns > kRealtimeLagWarnNs;
  j["ios"] = r.ios;
  j["errors"] = r.errors;
  j["errors_outside_windows"] = r.errors_outside_windows;
  auto lat = [](const env::LatencyHistogram& h) {
    return json{{"count", h.count()},        {"mean_ns", h.mean()},
                {"p50_ns", h.quantile(0.5)}, {"p99_ns", h.quantile(0.99)},
                {"p999_ns", h.quantile(0.999)}, {"max_ns", h.max()}};
  };
  j["latency"] = lat(r.latency);
  j["latency_outside_faults"] = lat(r.latency_outside);
  j["violation_count"] = r.violation_count;
  j["violations"] = r.violations;
  j["notes"] = r.notes;
  j["fabric"] = json::object();
  for (const auto& [name, value] : r.fabric) j["fabric"][name] = value;
  j["retransmissions"] = r.retransmissions;
  j["expectations"] = json::array();
  for (const ExpectationOutcome& x : r.expectations) {
    j["expectations"].push_back({{"name", x.name}, {"measured", x.measured}, {"limit", x.limit},
                                 {"passed", x.passed}});
  }
  j["devices_at_end"] = r.devices_at_end;
  j["bucket_ns"] = r.bucket_ns;
  json series = json::array();
  for (const Bucket& b : r.series) {
    series.push_back({b.ios, b.errors, b.ios > b.errors ? b.latency_sum_ns / (b.ios - b.errors) : 0,
                      b.latency_max_ns, b.latency_p99_ns});
  }
  j["series_columns"] = {"ios", "errors", "mean_latency_ns", "max_latency_ns", "p99_latency_ns"};
  j["series"] = series;
  j["pollers"] = json::array();
  for (const PollerSeries& p : r.pollers) {
    j["pollers"].push_back({{"name", p.name}, {"runs", p.runs}, {"busy_runs", p.busy_runs},
                            {"busy_ns", p.busy_ns}, {"busy_share", p.busy_share},
                            {"busy_time_share", p.busy_time_share}});
  }
  for (const FaultOutcome& f : r.faults) {
    j["faults"].push_back({{"label", f.spec.label}, {"line", f.spec.line},
                           {"kind", to_string(f.spec.kind)}, {"device", f.device},
                           {"fired", f.fired}, {"fired_ns", f.fired_ns},
                           {"recovered", f.recovered}, {"recovery_ns", f.recovery_ns},
                           {"window_from_ns", f.window_from_ns},
                           {"window_to_ns", f.window_to_ns == kOpenWindow
                                                ? json(nullptr)
                                                : json(f.window_to_ns)},
                           {"detail", f.detail}});
  }
  for (const WorkloadOutcome& w : r.workloads) {
    j["workloads"].push_back({{"name", w.name}, {"bdev", w.bdev}, {"what", w.what},
                              {"reads", w.reads},
                              {"writes", w.writes}, {"flushes", w.flushes}, {"errors", w.errors},
                              {"verified_reads", w.verified_reads}, {"reopens", w.reopens},
                              {"writes_across_power_loss", w.crossed_power_loss}});
  }
  for (const DeviceOutcome& d : r.devices) {
    j["devices"].push_back({{"name", d.name}, {"profile", d.profile}, {"bdev", d.bdev},
                            {"attached_at_end", d.attached_at_end},
                            {"host_resets", d.host_resets},
                            {"host_reset_failures", d.host_reset_failures},
                            {"retries", d.retries}, {"removed_failures", d.removed_failures},
                            {"device_counters", d.device_counters},
                            {"device_resets", d.device_resets}, {"fault_hits", d.fault_hits},
                            {"writes_lost_to_power", d.writes_lost_to_power},
                            {"gc_relocations", d.gc_relocations}, {"nand_erases", d.nand_erases},
                            {"swept_blocks", d.swept_blocks},
                            {"sweep_read_errors", d.sweep_read_errors},
                            {"violations", d.violations}});
  }
  return json_text(j, 2) + "\n";
}

std::string report_html(const RunResult& r) {
  std::vector<double> iops, errors, lat_mean, lat_p99, lat_max;
  const double per_s = 1e9 / double(std::max<uint64_t>(r.bucket_ns, 1));
  for (const Bucket& b : r.series) {
    iops.push_back(double(b.ios) * per_s);
    errors.push_back(double(b.errors));
    const uint64_t ok = b.ios - b.errors;
    lat_mean.push_back(ok ? double(b.latency_sum_ns) / double(ok) / 1e3 : 0);
    lat_p99.push_back(double(b.latency_p99_ns) / 1e3);
    lat_max.push_back(double(b.latency_max_ns) / 1e3);
  }
  std::string h =
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Pollux scenario " +
      html_escape(r.scenario) +
      "</title><style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
      "pre{background:#f4f4f4;padding:1em;overflow:auto;white-space:pre-wrap}.pass{color:#080}.fail{color:#c00}"
      ".axis{stroke:#444}.grid{stroke:#e4e4e4}.fault{stroke:#c00;stroke-dasharray:4 3}"
      ".flabel{fill:#c00;font-size:10px}.window{fill:#c00;fill-opacity:0.07}"
      ".back{stroke:#080;stroke-dasharray:2 2}.blabel{fill:#080;font-size:10px}"
      "td.ok{color:#080}td.no{color:#c00;font-weight:bold}"
      ".title{font-size:13px;font-weight:bold}.tick{font-size:10px;fill:#444}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}</style></head><body>";
  h += "<h1>" + html_escape(r.scenario) + " <span class='" + (r.passed ? "pass'>PASSED" : "fail'>FAILED") +
       "</span></h1>";
  h += "<p>seed " + std::to_string(r.seed) + " &middot; " + r.time + " time " + format_ns(r.simulated_ns) +
       (r.trace_records ? " &middot; trace " + fmt::format("{:016x}", r.trace_hash) : "") + "</p>";
  if (!r.failures.empty()) {
    h += "<ul>";
    for (const std::string& f : r.failures) h += "<li class='fail'>" + html_escape(f) + "</li>";
    h += "</ul>";
  }
  if (!r.replay.empty()) h += "<p>Replay: <code>" + html_escape(r.replay) + "</code></p>";
  // What ran: the devices and the workloads.
  h += "<h2>Set-up</h2><ul>";
  for (const DeviceOutcome& d : r.devices)
    h += "<li>device <b>" + html_escape(d.name) + "</b>: profile " + html_escape(d.profile) +
         ", bdev " + html_escape(d.bdev) + "</li>";
  for (const WorkloadOutcome& w : r.workloads)
    h += "<li>workload <b>" + html_escape(w.name) + "</b> on " + html_escape(w.bdev) + ": " +
         html_escape(w.what) + "</li>";
  h += "</ul>";
  // The verdict, expectation by expectation.
  if (!r.expectations.empty()) {
    h += "<h2>Expectations</h2><table><tr><th>expectation</th><th>measured</th><th>limit</th>"
         "<th>verdict</th></tr>";
    for (const ExpectationOutcome& x : r.expectations) {
      h += "<tr><td>" + html_escape(x.name) + "</td><td>" + html_escape(x.measured) + "</td><td>" +
           html_escape(x.limit) + "</td><td class='" + (x.passed ? "ok'>met" : "no'>NOT MET") +
           "</td></tr>";
    }
    h += "</table>";
  }
  h += svg_chart(r, "Completions per second", "IOPS", iops, "#06c");
  h += svg_chart(r, "Failed I/Os per bucket", "count", errors, "#c00");
  h += svg_chart(r, "Latency over time", "us",
                 {Line{&lat_mean, "#080", "mean"}, Line{&lat_p99, "#60c", "p99"}});
  h += svg_chart(r, "Max latency", "us", lat_max, "#a60");
  h += poller_chart(r);
  // The latency distribution of the whole run and outside the fault windows.
  h += "<h2>Latency</h2><table><tr><th></th><th>count</th><th>p50</th><th>p90</th><th>p99</th>"
       "<th>p99.9</th><th>p99.99</th><th>max</th></tr>";
  for (const auto& [name, hist] : {std::pair<const char*, const env::LatencyHistogram*>{
                                       "all I/O", &r.latency},
                                   {"outside fault windows", &r.latency_outside}}) {
    h += fmt::format("<tr><td>{}</td><td>{}</td>", name, hist->count());
    for (double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) h += "<td>" + us(hist->quantile(q)) + " us</td>";
    h += "<td>" + us(hist->max()) + " us</td></tr>";
  }
  h += "</table>";
  h += latency_distribution_chart(r);
  if (!r.notes.empty()) {
    h += "<h2>Notes</h2><ul>";
    for (const std::string& n : r.notes) h += "<li>" + html_escape(n) + "</li>";
    h += "</ul>";
  }
  h += "<h2>Faults</h2><table><tr><th>line</th><th>fault</th><th>at</th><th>recovery</th><th>detail</th></tr>";
  for (const FaultOutcome& f : r.faults) {
    h += "<tr><td>" + std::to_string(f.spec.line) + "</td><td>" + html_escape(f.spec.label) +
         "</td><td>" + (f.fired ? format_ns(f.fired_ns) : "never") + "</td><td>" +
         (f.recovered ? format_ns(f.recovery_ns) : "-") + "</td><td>" + html_escape(f.detail) +
         "</td></tr>";
  }
  h += "</table><h2>Result</h2><pre>" + html_escape(result_table(r)) + "</pre></body></html>\n";
  return h;
}

std::string write_reports(const RunResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return dir + ": " + ec.message();
  for (const auto& [name, text] : {std::pair{"report.json", report_json(r)},
                                   std::pair{"report.html", report_html(r)}}) {
    std::ofstream out(dir + "/" + name);
    out << text;
    if (!out) return dir + "/" + name + ": cannot write";
  }
  return "";
}

}  // namespace pollux::scenarios
