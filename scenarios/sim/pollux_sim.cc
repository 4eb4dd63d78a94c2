// pollux-sim: a perf run against timed devices in deterministic virtual time, in one process.
//
//   pollux-sim --profile p4800x --qd 16 --rw randread --time-ms 20 --seed 7
//   pollux-sim --profile p3700 --devices 8 --qd 128 --time-ms 20 --json
//   pollux-sim --profile p4800x --transport rdma --qd 1   (behind an NVMe-oF/RDMA target)
//
// Prints IOPS and latency per device, the simulation's speed, and the trace hash: the same
// seed and options give the same hash.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>

#include "common/cli.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/fabric_run.h"
#include "scenarios/sim/run.h"

using namespace pollux;

int main(int argc, char** argv) {
  CLI::App app{"pollux-sim: perf against timed SSD models in virtual time"};
  std::string profile_name = "p4800x", rw = "randread", fidelity;
  uint32_t devices = 1, qd = 1, bs = 4096, mix = 50;  // fio's rwmixread default
  app.option_defaults()->always_capture_default();    // --help shows every default
  double time_ms = 10, warmup_ms = 1;
  uint64_t seed = 1, ios = 0;
  bool json = false;
  uint32_t scale_blocks = 0, scale_pages = 0;
  std::string precondition;
  app.add_option(
      "-p,--profile", profile_name,
      "built-in profile (" + emu::timing::builtin_profile_names() + ") or path to a YAML profile");
  app.add_option("--fidelity", fidelity, "override the profile's: timed | rtl");
  app.add_option("-n,--devices", devices, "devices, one queue pair each, all on one host core")
      ->check(CLI::Range(1, 64));
  app.add_option("-q,--qd", qd, "queue depth per device")->check(CLI::Range(1, 4095));
  app.add_option("-o,--bs", bs, "I/O size in bytes");
  app.add_option("-w,--rw", rw, "randread | randwrite | read | write | randrw");
  CLI::Option* mix_opt =
      app.add_option("-M,--mix", mix, "read percentage for randrw")->check(CLI::Range(0, 100));
  // Simulated times become ns counts: at least 1 ns, at most an hour.
  constexpr double kMaxMs = 3.6e6;
  app.add_option("-t,--time-ms", time_ms, "measured simulated time (ms)")
      ->check(CLI::Range(1e-6, kMaxMs));
  app.add_option("--warmup-ms", warmup_ms, "simulated warm-up before measuring (ms)")
      ->check(CLI::Range(0.0, kMaxMs));
  app.add_option("--ios", ios, "stop after this many I/Os per device instead of a time");
  app.add_option("-s,--seed", seed, "seed of every random choice");
  app.add_flag("--json", json, "one JSON object on stdout");
  bool write_pattern = false;
  app.add_flag("--write-pattern", write_pattern,
               "writes carry the verification data pattern (LBA, generation) instead of zeroes: "
               "the emulator keeps such blocks as their seed");
  std::optional<uint32_t> in_capsule;
  app.add_option("--in-capsule-data-size", in_capsule,
                 "with --transport rdma: the target's in-capsule data size (default 4096; 0: "
                 "writes' data fetched by RDMA READ, as the SPDK paper's 2017 host did)")
      ->check(CLI::Range(0u, 65536u));
  bool no_push = false;
  app.add_flag("--no-rnic-push", no_push,
               "with --transport rdma: the NIC reads every WQE from the ring by DMA (by default "
               "a lone WQE comes with its doorbell, as mlx5's provider sends it by BlueFlame)");
  uint64_t host_stack_ns = 0;
  app.add_option("--host-stack-ns", host_stack_ns,
                 "the host's I/O stack per I/O beyond the polled driver, in latency (not CPU): "
                 "0 a polled host (pollux-perf, SPDK); docs/FIDELITY.md's kernel host (fio on "
                 "Linux) 1900")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1'000'000'000}));
  bool no_fast_forward = false;
  app.add_flag("--no-fast-forward", no_fast_forward,
               "every queue-engine clock edge a SystemC event of its own and every lockstep step "
               "a run of the kernel: the same results and trace hash as by default, more slowly "
               "(a check of the fast-forward)");
  std::string trace_file;
  app.add_option("--trace-file", trace_file,
                 "write every trace record (time in ps, device, kind, three fields) to this file");
  double interval_ms = 0;
  app.add_option("-S,--interval-ms", interval_ms,
                 "results per window of this much simulated time (IOPS, mean and max latency, "
                 "errors; warm-up included): a write cliff or a GC stall shows in time")
      ->check(pollux::cli::kPositive);
  app.add_option("--scale-blocks", scale_blocks,
                 "NAND: shrink the drive to this many blocks per plane (same spare ratio)")
      ->check(CLI::Range(2u, 1u << 20));
  app.add_option("--scale-pages", scale_pages, "NAND: with --scale-blocks, pages per block")
      ->needs("--scale-blocks");
  app.add_option("--precondition", precondition, "NAND: none | sequential | steady");
  std::string transport = "local";
  uint64_t wire_latency_ns = 2000;
  app.add_option("--transport", transport,
                 "local (the driver on the devices) or rdma (the devices behind a Pollux "
                 "NVMe-oF/RDMA target, the host over emulated RoCEv2 NICs)")
      ->check(CLI::IsMember({"local", "rdma"}));
  app.add_option("--wire-latency-ns", wire_latency_ns,
                 "with --transport rdma and functional NICs: the wire's one-way latency")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1'000'000'000}));
  std::string nic_name;
  app.add_option("--nic", nic_name,
                 "with --transport rdma: timed NICs of this profile (cx5-100g, cx4lx-25g or a "
                 "YAML file: PCIe, NIC pipelines, link rate, cables, switch) instead of "
                 "functional NICs on a fixed-latency wire");
  uint64_t target_command_ns = sim::TargetCostModel{}.command_ns;
  app.add_option("--target-command-ns", target_command_ns,
                 "with --transport rdma: the target core's CPU time per I/O command (0: the "
                 "target takes no time; default: the SPDK paper's Figure 8 calibration)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1'000'000}));
  uint32_t target_cores = 1;
  app.add_option("--target-cores", target_cores,
                 "with --transport rdma: the target's cores (a reactor and a poll group on "
                 "each, connections spread round-robin; each core's CPU time is its own)")
      ->check(CLI::Range(1u, 64u));
  std::string metrics_addr;
  double linger_s = 0;
  app.add_option("--metrics", metrics_addr,
                 "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9464; port 0: any)");
  app.add_option("--linger", linger_s, "with --metrics: seconds to keep serving after the run")
      ->check(CLI::Range(0.0, 86400.0))
      ->needs("--metrics");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;
  if (mix_opt->count() != 0 && rw != "randrw")
    return pollux::cli::bad_input(app, "--mix applies to --rw randrw only (--rw " + rw + ")");

  auto profile = emu::timing::load_profile(profile_name);
  if (!profile) {
    std::fprintf(stderr, "pollux-sim: %s\n", profile.error().c_str());
    return 2;
  }
  sim::RunSpec spec;
  spec.profile = profile.value();
  if (!fidelity.empty()) {
    auto f = emu::timing::parse_fidelity(fidelity);
    if (!f || f.value() == emu::timing::Fidelity::kFunctional) {
      std::fprintf(stderr, "pollux-sim: --fidelity must be timed or rtl\n");
      return 2;
    }
    spec.profile.fidelity = f.value();
  }
  if (scale_blocks) {
    if (auto st = emu::timing::scale_capacity(spec.profile, scale_blocks, scale_pages); !st) {
      std::fprintf(stderr, "pollux-sim: --scale-blocks: %s\n", st.error().c_str());
      return 2;
    }
  }
  if (!precondition.empty()) {
    using emu::timing::Precondition;
    if (precondition == "none")
      spec.profile.ftl.precondition = Precondition::kNone;
    else if (precondition == "sequential")
      spec.profile.ftl.precondition = Precondition::kSequential;
    else if (precondition == "steady")
      spec.profile.ftl.precondition = Precondition::kSteady;
    else {
      std::fprintf(stderr, "pollux-sim: --precondition: none, sequential or steady\n");
      return 2;
    }
  }
  spec.devices = devices;
  spec.seed = seed;
  spec.transport = transport == "rdma" ? "rdma" : "";
  if (target_command_ns == 0)
    spec.target_costs.reset();
  else
    spec.target_costs->command_ns = target_command_ns;
  if (target_cores != 1 && transport != "rdma")
    return pollux::cli::bad_input(app, "--target-cores needs --transport rdma");
  spec.target_cores = target_cores;
  spec.wire_latency_ns = wire_latency_ns;
  if (in_capsule && transport != "rdma")
    return pollux::cli::bad_input(app, "--in-capsule-data-size needs --transport rdma");
  spec.in_capsule_data_size = in_capsule;
  if (no_push && transport != "rdma")
    return pollux::cli::bad_input(app, "--no-rnic-push needs --transport rdma");
  spec.rnic_push = !no_push;
  if (host_stack_ns && transport == "rdma")
    return pollux::cli::bad_input(app,
                                  "--host-stack-ns is for local runs (the fabric's host is polled)");
  if (!nic_name.empty()) {
    if (transport != "rdma") return pollux::cli::bad_input(app, "--nic needs --transport rdma");
    auto nic = emu::rnic::load_nic_profile(nic_name);
    if (!nic) {
      std::fprintf(stderr, "pollux-sim: --nic: %s\n", nic.error().c_str());
      return 2;
    }
    spec.nic_profile = nic.value();
  }
  spec.job.queue_depth = qd;
  spec.job.io_bytes = bs;
  if (rw == "randread" || rw == "read")
    spec.job.read_percent = 100;
  else if (rw == "randwrite" || rw == "write")
    spec.job.read_percent = 0;
  else if (rw == "randrw")
    spec.job.read_percent = mix;
  else {
    std::fprintf(stderr,
                 "pollux-sim: --rw %s: not one of randread, randwrite, read, write, randrw\n",
                 rw.c_str());
    return 2;
  }
  spec.job.pattern =
      rw == "read" || rw == "write" ? sim::Pattern::kSequential : sim::Pattern::kRandom;
  spec.job.warmup_ns = static_cast<uint64_t>(warmup_ms * 1e6);
  spec.job.duration_ns = ios ? 0 : static_cast<uint64_t>(time_ms * 1e6);
  spec.job.max_ios = ios;
  spec.job.series_window_ns = static_cast<uint64_t>(interval_ms * 1e6);
  spec.job.write_pattern = write_pattern;
  spec.job.stack_ns = host_stack_ns;
  spec.fast_forward = !no_fast_forward;
  std::unique_ptr<FILE, int (*)(FILE*)> trace_out(nullptr, &std::fclose);
  if (!trace_file.empty()) {
    trace_out.reset(std::fopen(trace_file.c_str(), "w"));
    if (!trace_out) {
      std::fprintf(stderr, "pollux-sim: cannot write %s\n", trace_file.c_str());
      return 2;
    }
    spec.trace_dump = trace_out.get();
  }
  if (!json) {
    std::printf("pollux-sim: profile %s (%s), fidelity %s, %u device(s), seed %" PRIu64 "%s\n",
                spec.profile.name.c_str(), spec.profile.description.c_str(),
                emu::timing::to_string(spec.profile.fidelity), devices, seed,
                spec.transport.empty() ? ""
                : spec.nic_profile ? (", over NVMe-oF/RDMA (timed NICs: " + nic_name + ")").c_str()
                                   : (", over NVMe-oF/RDMA (functional NICs, wire " +
                                      std::to_string(wire_latency_ns) + " ns one way)")
                                         .c_str());
  }
  // Metrics: the run publishes snapshots; the endpoint outlives it by --linger (the guard
  // lingers on every way out, after the report is printed).
  metrics::Snapshot snapshot;
  std::unique_ptr<metrics::Exporter> exporter;
  if (!metrics_addr.empty()) {
    auto e = metrics::Exporter::start(metrics_addr);
    if (!e) {
      std::fprintf(stderr, "pollux-sim: %s\n", e.error().message.c_str());
      return 2;
    }
    exporter = std::move(e).value();
    exporter->add_source(snapshot.source());
    spec.metrics = &snapshot;
    std::fprintf(json ? stderr : stdout, "metrics: %s\n", exporter->url().c_str());
    std::fflush(nullptr);
  }
  struct LingerGuard {
    bool on;
    double seconds;
    ~LingerGuard() {
      if (!on || seconds <= 0) return;
      std::fflush(nullptr);
      metrics::linger(static_cast<uint64_t>(seconds * 1e9));
    }
  } linger_guard{exporter != nullptr, linger_s};
  const sim::RunReport r =
      spec.transport == "rdma" ? sim::run_rdma_perf(spec) : sim::run_perf(spec);
  if (!r.error.empty()) {
    std::fprintf(stderr, "pollux-sim: %s\n", r.error.c_str());
    return 1;
  }
  const double sim_ios_per_s = r.wall_seconds > 0 ? double(r.total_ios) / r.wall_seconds : 0;
  const double slowdown = r.simulated_ns ? r.wall_seconds * 1e9 / double(r.simulated_ns) : 0;
  // -S: one device's window w as IOPS, mean and max latency.
  struct Window {
    double end_ms, iops, mean_us, max_us;
    uint64_t errors;
  };
  // Whole windows only (as perf and bdevperf print whole intervals): the last, cut short by
  // the end of the run, would show the drain as a rate.
  const size_t windows = spec.job.series_window_ns ? r.simulated_ns / spec.job.series_window_ns : 0;
  auto window = [&](const sim::JobResult& j, size_t w) {
    const double secs = double(spec.job.series_window_ns) * 1e-9;
    return Window{double(w + 1) * interval_ms, double(j.series[w]) / secs,
                  j.series[w] ? double(j.series_latency_sum_ns[w]) / double(j.series[w]) / 1e3 : 0,
                  double(j.series_latency_max_ns[w]) / 1e3, j.series_errors[w]};
  };
  if (json) {
    std::printf(
        "{\"profile\":\"%s\",\"fidelity\":\"%s\",\"devices\":%u,\"qd\":%u,\"bs\":%u,"
        "\"rw\":\"%s\",\"seed\":%" PRIu64 ",\"total_iops\":%.1f,\"per_device\":[",
        spec.profile.name.c_str(), emu::timing::to_string(spec.profile.fidelity), devices, qd, bs,
        rw.c_str(), seed, r.total_iops);
    for (size_t i = 0; i < r.devices.size(); ++i) {
      const auto& d = r.devices[i];
      std::printf(
          "%s{\"iops\":%.1f,\"mean_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,"
          "\"errors\":%" PRIu64 ",\"write_amplification\":%.3f,\"engine_mismatches\":%" PRIu64
          ",\"store_pattern_blocks\":%" PRIu64 ",\"store_byte_blocks\":%" PRIu64
          ",\"store_memory_bytes\":%" PRIu64 ",\"ftl_map_bytes\":%" PRIu64
          ",\"commands\":%" PRIu64 ",\"engine_cycles\":%" PRIu64 ",\"engine_run_ahead\":%" PRIu64,
          i ? "," : "", d.job.iops(), d.job.latency_ns.mean() / 1e3,
          d.job.latency_ns.quantile(0.5) / 1e3, d.job.latency_ns.quantile(0.99) / 1e3, d.job.errors,
          d.device.ftl.write_amplification(), d.device.engine_mismatches, d.store.pattern_blocks,
          d.store.byte_blocks, d.store.memory_bytes, d.device.ftl_map_bytes, d.device.commands,
          d.device.engine_cycles, d.device.engine_run_ahead);
      if (spec.job.series_window_ns) {
        std::printf(",\"interval_ms\":%g,\"intervals\":[", interval_ms);
        for (size_t w = 0; w < std::min(windows, d.job.series.size()); ++w) {
          const Window x = window(d.job, w);
          std::printf(
              "%s{\"end_ms\":%g,\"iops\":%.1f,\"mean_us\":%.3f,\"max_us\":%.3f,"
              "\"errors\":%" PRIu64 "}",
              w ? "," : "", x.end_ms, x.iops, x.mean_us, x.max_us, x.errors);
        }
        std::printf("]");
      }
      std::printf("}");
    }
    std::printf(
        "],\"simulated_ms\":%.3f,\"wall_s\":%.3f,\"simulated_ios_per_host_s\":%.0f,"
        "\"wall_per_simulated\":%.3f,\"host_busy_pct\":%.1f,\"target_busy_pct\":%.1f,"
        "\"target_cores\":%zu,"
        "\"lockstep_steps\":%" PRIu64 ",\"trace_hash\":\"%016" PRIx64 "\",\"trace_records\":%" PRIu64
        "}\n",
        r.simulated_ns / 1e6, r.wall_seconds, sim_ios_per_s, slowdown,
        r.simulated_ns ? 100.0 * double(r.host_busy_ns) / double(r.simulated_ns) : 0.0,
        r.simulated_ns ? 100.0 * double(r.target_busy_ns) / double(r.simulated_ns) /
                             double(std::max<size_t>(1, r.target_core_busy_ns.size()))
                       : 0.0,
        r.target_core_busy_ns.size(), r.steps, r.trace_hash, r.trace_records);
    return 0;
  }
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const auto& d = r.devices[i];
    std::printf(
        "  device %zu: %10.0f IOPS  mean %8.2f us  p50 %8.2f us  p99 %8.2f us  errors %" PRIu64
        "%s\n",
        i, d.job.iops(), d.job.latency_ns.mean() / 1e3, d.job.latency_ns.quantile(0.5) / 1e3,
        d.job.latency_ns.quantile(0.99) / 1e3, d.job.errors,
        d.device.engine_mismatches ? "  ENGINE MISMATCHES" : "");
    if (d.device.ftl.host_units_written) {
      std::printf("            WA %.2f (host %" PRIu64 " units, NAND %" PRIu64
                  ", GC relocations %" PRIu64 ", erases %" PRIu64 ")\n",
                  d.device.ftl.write_amplification(), d.device.ftl.host_units_written,
                  d.device.ftl.nand_units_written, d.device.ftl.gc_relocations,
                  d.device.ftl.erases);
      std::printf("            FTL maps %.1f MB (%" PRIu64 " forward entries)\n",
                  double(d.device.ftl_map_bytes) / 1e6, d.device.ftl_mapped_lpns);
    }
    if (d.store.memory) {
      const uint64_t kept = d.store.pattern_blocks + d.store.byte_blocks;
      std::printf("            store: %" PRIu64 " blocks as pattern seeds, %" PRIu64
                  " as bytes, %.1f MB (%.0f B per kept block)\n",
                  d.store.pattern_blocks, d.store.byte_blocks, double(d.store.memory_bytes) / 1e6,
                  kept ? double(d.store.memory_bytes) / double(kept) : 0.0);
    }
  }
  std::printf("  total:    %10.0f IOPS\n", r.total_iops);
  if (spec.job.series_window_ns) {
    std::printf("  every %g ms of simulated time (warm-up included):\n", interval_ms);
    for (size_t i = 0; i < r.devices.size(); ++i) {
      const auto& j = r.devices[i].job;
      for (size_t w = 0; w < std::min(windows, j.series.size()); ++w) {
        const Window x = window(j, w);
        std::printf("  [%9.3f ms] device %zu: %10.0f IOPS  mean %8.2f us  max %9.2f us%s\n",
                    x.end_ms, i, x.iops, x.mean_us, x.max_us,
                    x.errors ? ("  " + std::to_string(x.errors) + " errors").c_str() : "");
      }
    }
  }
  std::printf(
      "  simulated %.3f ms in %.3f s wall: %.0f simulated I/O per host second, "
      "wall/simulated %.2f, host core busy %.1f%%, %" PRIu64 " lockstep steps\n",
      r.simulated_ns / 1e6, r.wall_seconds, sim_ios_per_s, slowdown,
      r.simulated_ns ? 100.0 * double(r.host_busy_ns) / double(r.simulated_ns) : 0.0, r.steps);
  if (spec.transport == "rdma" && r.simulated_ns) {
    std::printf("  target core%s busy", r.target_core_busy_ns.size() > 1 ? "s" : "");
    for (uint64_t b : r.target_core_busy_ns)
      std::printf(" %.1f%%", 100.0 * double(b) / double(r.simulated_ns));
    std::printf(" (%" PRIu64 " commands, %.0f ns each with its drive's queue pair and "
                "iterations)\n",
                r.target_commands,
                r.target_commands ? double(r.target_busy_ns) / double(r.target_commands) : 0.0);
  }
  std::printf("  trace hash %016" PRIx64 " (%" PRIu64 " records)\n", r.trace_hash, r.trace_records);
  return 0;
}
