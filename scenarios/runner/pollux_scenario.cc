// pollux-scenario: runs fault-injection scenarios against the timed emulator in virtual time,
// or against QEMU's NVMe controller through vfio-pci in a HIL guest (scenarios/qemu).
//
//   pollux-scenario run FILE [--seed N] [--time virtual] [--report DIR]
//   pollux-scenario chaos --seed N [--duration 20ms] [--faults 6] [--fabric | --rdma]
//                         [--report DIR]
//   pollux-scenario check FILE...        (parse and validate only)
//
// Exit status: 0 every expectation met, 1 an expectation failed (the replay command is
// printed), 2 bad input or a set-up failure.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/cli.h"
#include "driver/metrics/exporter.h"
#include "scenarios/runner/chaos.h"
#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace ps = pollux::scenarios;

namespace {

int finish(const ps::RunResult& r, const std::string& report_dir) {
  std::fputs(ps::result_table(r).c_str(), stdout);
  if (!r.error.empty()) return 2;
  if (!report_dir.empty()) {
    if (std::string e = ps::write_reports(r, report_dir); !e.empty()) {
      std::fprintf(stderr, "report: %s\n", e.c_str());
      return 2;
    }
    std::printf("report: %s/report.html, %s/report.json\n", report_dir.c_str(), report_dir.c_str());
  }
  return r.passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pollux scenario runner: faults in virtual time, nothing acknowledged lost"};
  app.require_subcommand(1);
  // The replay command must paste on another machine: under `bazel run` argv[0] is a path in
  // this machine's Bazel cache, so the command says `bazel run` again, and a scenario file
  // inside the workspace is named from its root ($PWD: the shell's, at the root).
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string self = workspace != nullptr && *workspace
                               ? "bazel run //scenarios/runner:pollux-scenario --"
                               : std::string(argv[0]);
  auto replay_path = [workspace](const std::string& f) {
    if (workspace == nullptr || !*workspace) return f;
    std::error_code ec;
    const auto abs = std::filesystem::weakly_canonical(f, ec);
    const auto root = std::filesystem::weakly_canonical(workspace, ec);
    const auto rel = abs.lexically_relative(root);
    if (ec || rel.empty() || rel.native().rfind("..", 0) == 0) return abs.string();
    return "$PWD/" + rel.string();
  };

  std::string file, time, report = "pollux-report";
  uint64_t seed = 0;
  bool quiet = false;
  CLI::App* run = app.add_subcommand("run", "run a scenario file");
  run->add_option("file", file, "scenario YAML")->required();
  run->add_option("--seed", seed, "seed (default: the scenario's)");
  run->add_option("--time", time,
                  "virtual (deterministic) or realtime (paced to the wall clock); default: the "
                  "scenario's")
      ->check(CLI::IsMember({"virtual", "realtime"}));
  run->add_option("--report", report, "directory for report.json and report.html ('' for none)");
  run->add_flag("--quiet", quiet, "no progress line");
  std::string metrics_addr, linger = "0s";
  auto metrics_opts = [&](CLI::App* c) {
    CLI::Option* m = c->add_option(
        "--metrics", metrics_addr,
        "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9464; port 0: any)");
    c->add_option("--linger", linger,
                  "with --metrics: keep serving this long after the run (e.g. 30s; SIGINT ends it)")
        ->needs(m);
  };
  metrics_opts(run);

  uint64_t chaos_seed = 1;
  std::string duration = "20ms";
  uint32_t max_faults = 6;
  CLI::App* chaos = app.add_subcommand("chaos", "a random fault schedule drawn from a seed");
  chaos->add_option("--seed", chaos_seed, "seed")->required();
  chaos->add_option("--duration", duration, "virtual time of the workloads (e.g. 20ms)");
  chaos->add_option("--faults", max_faults, "at most this many faults")->check(CLI::Range(1, 64));
  chaos->add_option("--report", report, "directory for report.json and report.html ('' for none)");
  chaos->add_flag("--quiet", quiet, "no progress line");
  bool fabric = false;
  chaos->add_flag("--fabric", fabric,
                  "the drives behind an NVMe-oF/TCP target over a simulated network, and fabric "
                  "faults drawn too");
  bool rdma = false;
  chaos->add_flag("--rdma", rdma,
                  "the drives behind an NVMe-oF/RDMA target over emulated RoCEv2 NICs, and RDMA "
                  "faults drawn too (link flaps, loss, QP errors, a NIC reset, bad rkeys)");
  uint32_t target_cores = 0;
  chaos->add_option("--target-cores", target_cores,
                    "with --fabric/--rdma: the target's cores (default: drawn from the seed, 1 "
                    "or 2)")
      ->check(CLI::Range(1, 8));
  metrics_opts(chaos);

  std::vector<std::string> files;
  CLI::App* check = app.add_subcommand("check", "parse and validate scenario files");
  check->add_option("files", files, "scenario YAML files")->required();

  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  ps::RunOptions o;
  o.progress = !quiet && isatty(STDERR_FILENO);
  // Metrics: the run publishes snapshots; the endpoint outlives it by --linger.
  pollux::metrics::Snapshot snapshot;
  std::unique_ptr<pollux::metrics::Exporter> exporter;
  uint64_t linger_ns = 0;
  if (!metrics_addr.empty()) {
    auto l = ps::parse_duration_ns(linger);
    if (!l) {
      std::fprintf(stderr, "--linger: '%s' (expected a duration, e.g. 30s)\n", linger.c_str());
      return 2;
    }
    linger_ns = l.value();
    auto e = pollux::metrics::Exporter::start(metrics_addr);
    if (!e) {
      std::fprintf(stderr, "%s\n", e.error().message.c_str());
      return 2;
    }
    exporter = std::move(e).value();
    exporter->add_source(snapshot.source());
    o.metrics = &snapshot;
    std::printf("metrics: %s\n", exporter->url().c_str());
    std::fflush(stdout);
  }
  auto finish_and_linger = [&](const ps::RunResult& r) {
    const int rc = finish(r, report);
    std::fflush(stdout);
    if (exporter && linger_ns) pollux::metrics::linger(linger_ns);
    return rc;
  };
  if (check->parsed()) {
    int rc = 0;
    for (const std::string& f : files) {
      // The same parse and validation as run (errors already name the file).
      auto s = ps::load_scenario(f);
      std::printf("%s\n", s ? (f + ": ok").c_str() : s.error().c_str());
      if (!s) rc = 2;
    }
    return rc;
  }
  if (run->parsed()) {
    auto s = ps::load_scenario(file);
    if (!s) {
      std::fprintf(stderr, "%s\n", s.error().c_str());
      return 2;
    }
    o.seed = seed;
    o.time = time;
    const uint64_t used = seed ? seed : s.value().seed;
    o.replay = self + " run " + replay_path(file) + " --seed " + std::to_string(used) +
               (time.empty() ? "" : " --time " + time);
    std::printf("scenario %s (%s), seed %lu\n", s.value().name.c_str(), file.c_str(),
                static_cast<unsigned long>(used));
    return finish_and_linger(ps::run_scenario(s.value(), o));
  }
  auto d = ps::parse_duration_ns(duration);
  if (!d || d.value() < 1'000'000) {
    std::fprintf(stderr, "--duration: '%s' (expected at least 1ms, e.g. 20ms)\n", duration.c_str());
    return 2;
  }
  if (target_cores != 0 && !fabric && !rdma) {
    std::fprintf(stderr, "--target-cores: only with --fabric or --rdma (a target's cores)\n");
    return 2;
  }
  const ps::ChaosOptions co{.seed = chaos_seed,
                            .duration_ns = d.value(),
                            .max_faults = max_faults,
                            .fabric = fabric || rdma,
                            .rdma = rdma,
                            .target_cores = target_cores};
  const ps::Scenario s = ps::make_chaos_scenario(co);
  o.seed = chaos_seed;
  o.replay = self + " chaos --seed " + std::to_string(chaos_seed) + " --duration " + duration +
             " --faults " + std::to_string(max_faults) +
             (rdma ? " --rdma" : fabric ? " --fabric" : "") +
             (target_cores != 0 ? " --target-cores " + std::to_string(target_cores) : "");
  std::string cores;
  if (s.fabric) {
    cores = ", target on " + std::to_string(s.fabric->target_cores) +
            (s.fabric->target_cores > 1 ? " cores" : " core");
  }
  std::printf("chaos seed %lu: %zu devices, %zu faults, I/O timeout %lu us (%s)%s\n",
              static_cast<unsigned long>(chaos_seed), s.devices.size(), s.faults.size(),
              static_cast<unsigned long>(s.host.io_timeout_us), s.host.timeout_action.c_str(),
              cores.c_str());
  return finish_and_linger(ps::run_scenario(s, o));
}
