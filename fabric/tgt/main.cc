// pollux-tgt: Pollux's NVMe-oF target (like SPDK's nvmf_tgt).
//   pollux-tgt -m 0x3 --json target.json [--rpc /var/tmp/pollux-tgt.sock] [--metrics
//   127.0.0.1:9464]
// Reactors on the core mask (one poll group each), the bdev and nvmf subsystems configured from
// the JSON file, a JSON-RPC server (tools/pollux-rpc). Runs until SIGINT or SIGTERM; exit status
// 0 then, 2 on bad input (command line, configuration), 1 on a failure while running.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <memory>

#include "common/cli.h"
#include "driver/event/framework.h"
#include "driver/metrics/bdev_source.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/exporter.h"
#include "fabric/tgt/app.h"
#include "fabric/tgt/nvmf_metrics.h"

using namespace pollux;

namespace {

std::atomic<bool> g_signalled{false};
void on_signal(int) {
  g_signalled.store(true);
}

struct Run {
  event::Framework* fw;
  fabric::tgt::TargetApp* app;
  fabric::tgt::AppOptions opts;
  metrics::Exporter* exporter = nullptr;
  std::atomic<int> rc{0};
  bool stopping = false;
  event::Poller* signal_poller = nullptr;
};

void shutdown(Run& run, int rc) {
  if (run.stopping) return;
  run.stopping = true;
  run.rc = rc;
  if (run.signal_poller) event::Thread::current()->unregister_poller(run.signal_poller);
  run.app->stop([&run] { run.fw->stop(run.rc); });
}

event::PollStatus watch_signals(void* arg) {
  auto& run = *static_cast<Run*>(arg);
  if (!g_signalled.load()) return event::PollStatus::kIdle;
  fmt::print(stderr, "pollux-tgt: shutting down\n");
  shutdown(run, 0);
  return event::PollStatus::kBusy;
}

void start(void* arg) {
  auto& run = *static_cast<Run*>(arg);
  auto st = run.app->start(run.opts);
  if (!st) {
    fmt::print(stderr, "pollux-tgt: {}\n", st.error().message);
    shutdown(run, st.error().code == -EINVAL ? 2 : 1);
    return;
  }
  if (run.exporter) {
    if (run.app->bdev_collector()) run.exporter->add_source(run.app->bdev_collector()->source());
    run.exporter->add_source(fabric::tgt::nvmf_source(run.app->target()));
  }
  run.signal_poller =
      event::Thread::current()->register_poller(watch_signals, &run, 100'000, "tgt_signals");
  const std::size_t subsystems = run.app->target().subsystems().size() - 1;
  run.app->target().when_settled([&run, subsystems] {
    fmt::print("pollux-tgt: ready: {} reactor(s), {} subsystem(s){}\n", run.fw->reactor_count(),
               subsystems, run.opts.rpc.empty() ? "" : ", RPC on " + run.opts.rpc);
    std::fflush(stdout);  // scripts wait for this line
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string mask = "0x1", metrics_addr;
  fabric::tgt::AppOptions opts;
  CLI::App cli{"pollux-tgt: NVMe-oF target over TCP and RDMA (like SPDK's nvmf_tgt)"};
  cli.add_option("-m,--core-mask", mask, "reactor cores: hex mask or list ([0,2-3])");
  cli.add_option("--json", opts.json, "configuration (SPDK JSON shape: bdev and nvmf subsystems)");
  cli.add_option("--rpc", opts.rpc, "JSON-RPC UNIX socket ('' for none); created 0600");
  cli.add_option("--rpc-group", opts.rpc_group,
                 "let this group use the JSON-RPC socket too (0660)");
  cli.add_option("--metrics", metrics_addr, "serve Prometheus metrics on host:port");
  if (auto rc = cli::parse(cli, argc, argv)) return *rc;

  event::FrameworkOptions fo;
  fo.core_mask = mask;
  auto fw = event::Framework::create(fo);
  if (!fw) return cli::bad_input(cli, fw.error().message);
  std::unique_ptr<metrics::Exporter> exporter;
  if (!metrics_addr.empty()) {
    auto e = metrics::Exporter::start(metrics_addr);
    if (!e) return cli::bad_input(cli, e.error().message);
    exporter = std::move(e).value();
    exporter->add_source(metrics::event_source(**fw));
    opts.bdev_metrics = true;
    fmt::print("pollux-tgt: metrics on {}\n", exporter->url());
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto app = std::make_unique<fabric::tgt::TargetApp>(**fw);
  Run run;
  run.fw = fw->get();
  run.app = app.get();
  run.opts = opts;
  run.exporter = exporter.get();
  const int rc = (*fw)->run(start, &run);
  exporter.reset();  // its sources read the framework and the app
  app.reset();
  return rc;
}
