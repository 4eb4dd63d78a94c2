// pollux-emu: the emulated NVMe SSD as a separate program, a vfio-user server on a UNIX
// socket. Any conforming vfio-user client can drive it (Pollux's driver, SPDK's vfio-user
// NVMe transport, QEMU's vfio-user-pci).
//   pollux-emu --socket /tmp/emu.sock --config emulator/nvme/examples/default.yaml
//   pollux-emu --socket /tmp/emu.sock --profile p3700     (timed, paced to the wall clock)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>

#include "common/cli.h"
#include "emulator/device/control_socket.h"
#include "emulator/device/metrics.h"
#include "emulator/device/nvme_device.h"
#include "emulator/nvme/fault_commands.h"
#include "emulator/timing/simulation.h"
#include "emulator/timing/timed_ssd.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace pollux::emu;
  CLI::App app{"pollux-emu: an emulated NVMe SSD served over vfio-user"};
  std::string socket_path, config_path, profile_name, fidelity, time_mode = "realtime";
  std::string control_path, socket_group;
  uint64_t seed = 1;
  bool quiet = false;
  app.add_option("-s,--socket", socket_path, "UNIX socket to listen on (created 0600)")->required();
  app.add_option("--socket-group", socket_group,
                 "let this group use the vfio-user and control sockets too (0660)");
  app.add_option("-c,--config", config_path, "device YAML (default: 2 namespaces, 1 GiB each)");
  app.add_flag("-q,--quiet", quiet, "no start-up banner");
  app.add_option("-p,--profile", profile_name,
                 "timed device: built-in profile (p4800x, p3700, gen4-tlc, null) or YAML path");
  app.add_option("--fidelity", fidelity, "with --profile: functional | timed | rtl");
  app.add_option("--time", time_mode,
                 "with --profile: realtime (the only mode for a device in its own process; "
                 "virtual time needs host and device in one process: see pollux-sim)");
  app.add_option("--seed", seed, "seed of the device's random choices");
  app.add_option("--control", control_path,
                 "UNIX socket for fault commands, one JSON object per line "
                 "(emulator/nvme/fault_commands.h)");
  double warn_lag_us = 1000;
  app.add_option("--warn-lag-us", warn_lag_us,
                 "timed: say so on stderr (once) when the model falls this far behind the wall "
                 "clock: completions then come late and what a host measures is this machine's "
                 "speed, not the profile's")
      ->check(pollux::cli::kPositive);
  std::string metrics_addr;
  app.add_option("--metrics", metrics_addr,
                 "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9465; port 0: any)");
  app.get_option("--config")->excludes(app.get_option("--profile"));
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  nvme::ControllerConfig config;
  timing::Profile profile;
  if (!profile_name.empty()) {
    auto p = timing::load_profile(profile_name);
    if (!p) {
      fmt::print(stderr, "pollux-emu: {}\n", p.error());
      return 2;
    }
    profile = std::move(p).value();
    if (!fidelity.empty()) {
      auto f = timing::parse_fidelity(fidelity);
      if (!f) {
        fmt::print(stderr, "pollux-emu: --fidelity: {}\n", f.error());
        return 2;
      }
      profile.fidelity = f.value();
    }
    if (time_mode != "realtime") {
      fmt::print(stderr,
                 "pollux-emu: --time {}: a device in its own process runs in realtime; "
                 "use pollux-sim for virtual time\n",
                 time_mode);
      return 2;
    }
    config = profile.controller;
  } else if (!config_path.empty()) {
    auto loaded = nvme::load_config_file(config_path);
    if (!loaded) {
      fmt::print(stderr, "pollux-emu: {}: {}\n", config_path, loaded.error());
      return 2;
    }
    config = std::move(loaded).value();
  } else {
    config.namespaces = {{1ull << 30, 512, "memory"}, {1ull << 30, 4096, "memory"}};
  }
  auto created = device::NvmeDevice::create(config);
  if (!created) {
    fmt::print(stderr, "pollux-emu: {}\n", created.error());
    return 1;
  }
  auto dev = std::move(created).value();
  // Timed: a SystemC simulation in front of the controller, paced to the wall clock.
  std::unique_ptr<timing::Simulation> sim;
  if (!profile_name.empty() && profile.fidelity != timing::Fidelity::kFunctional) {
    sim = std::make_unique<timing::Simulation>(seed);
    if (auto added = sim->add_device(profile, dev->controller()); !added) {
      fmt::print(stderr, "pollux-emu: {}\n", added.error());
      return 2;
    }
  }
  std::string why;
  if (const int rc = dev->server().listen(socket_path, socket_group, &why); rc != 0) {
    fmt::print(stderr, "pollux-emu: cannot listen on {}: {}\n", socket_path,
               rc == -EADDRINUSE  ? "a running server answers there (another pollux-emu?)"
               : !why.empty() ? why
                              : std::strerror(-rc));
    return rc == -EADDRINUSE ? 2 : 1;
  }
  device::ControlSocket control;
  if (!control_path.empty()) {
    if (const int rc = control.listen(control_path, socket_group, &why); rc != 0) {
      fmt::print(stderr, "pollux-emu: cannot listen on {}: {}\n", control_path,
                 rc == -EADDRINUSE  ? "a running server answers there (another pollux-emu?)"
                 : !why.empty() ? why
                                : std::strerror(-rc));
      return rc == -EADDRINUSE ? 2 : 1;
    }
    dev->controller().faults().reseed(seed);
  }
  std::unique_ptr<device::MetricsEndpoint> metrics;
  if (!metrics_addr.empty()) {
    std::string err;
    metrics = device::MetricsEndpoint::start(metrics_addr, &err);
    if (!metrics) {
      fmt::print(stderr, "pollux-emu: --metrics {}\n", err);
      return 2;
    }
    if (!quiet) {
      fmt::print("pollux-emu: metrics on http://{}:{}/metrics\n",
                 metrics_addr.substr(0, metrics_addr.rfind(':')), metrics->port());
    }
  }
  // Timed: how far the model is behind the wall clock (its last step, and the most), and
  // whether that was said.
  uint64_t lag_ns = 0, max_lag_ns = 0;
  bool warned = false;
  // The device's counters belong to this loop's thread: it publishes them now and then.
  auto publish_metrics = [&] {
    std::vector<prometheus::MetricFamily> f;
    device::DeviceMetricsInput in;
    in.name = "emu0";
    in.profile = profile_name.empty() ? "functional" : profile.name;
    in.controller = &dev->controller();
    in.timed = sim ? &sim->device(0) : nullptr;
    in.now = sim ? sim->now() : 0;
    in.present = true;
    device::append_device_metrics(in, f);
    if (sim) {
      auto gauge = [&f](const char* name, const char* help, double v) {
        f.push_back({name, help, prometheus::MetricType::Gauge, {}});
        f.back().metric.emplace_back().gauge.value = v;
      };
      gauge("pollux_emu_simulated_seconds", "Simulated time of the device (paced)",
            double(sim->now()) / double(timing::kSec));
      gauge("pollux_emu_realtime_lag_seconds",
            "How far the model was behind the wall clock at its last step (completions that "
            "late reach the host late)",
            double(lag_ns) * 1e-9);
      gauge("pollux_emu_realtime_max_lag_seconds",
            "The most the model fell behind the wall clock with a host attached",
            double(max_lag_ns) * 1e-9);
    }
    metrics->publish(std::move(f));
  };
  auto last_publish = std::chrono::steady_clock::now();
  if (metrics) publish_metrics();  // a scrape before the first period sees the device too
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  if (!quiet) {
    fmt::print("pollux-emu: {} ({} namespace(s)) listening on {}{}\n", config.model,
               config.namespaces.size(), socket_path,
               sim ? fmt::format(" [profile {}, {}, realtime]", profile.name,
                                 timing::to_string(profile.fidelity))
                   : std::string());
    std::fflush(stdout);
  }
  // One loop for messages and device work. With a client attached the device polls its
  // doorbells continuously (it is a polled device); without one it sleeps in poll().
  // Timed: simulated time follows the wall clock; completions are posted when the wall
  // clock reaches their simulated time. `lag` is how far the simulation fell behind.
  static const auto t0 = std::chrono::steady_clock::now();
  auto wall_ps = [](void*) -> timing::SimTime {
    return static_cast<timing::SimTime>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - t0)
                                            .count()) *
           timing::kNs;
  };
  uint64_t loops = 0;
  while (!g_stop) {
    ++loops;
    // Fault commands: checked every 256 turns (a syscall each time would slow the device).
    if (!control_path.empty() && (!dev->server().client_connected() || (loops & 255) == 0)) {
      control.poll([&](const std::string& line) {
        return nvme::apply_fault_command(dev->controller(), line);
      });
    }
    // The clock only every 1024 busy turns (an idle turn sleeps in poll() anyway).
    if (metrics && (!dev->server().client_connected() || (loops & 1023) == 0)) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_publish > std::chrono::milliseconds(100)) {
        publish_metrics();
        last_publish = now;
      }
    }
    auto& server = dev->server();
    const int rc = server.poll_once(server.client_connected() ? 0 : 100);
    if (rc < 0) {
      fmt::print(stderr, "pollux-emu: server: {}\n", std::strerror(-rc));
      return 1;
    }
    if (sim) {
      const uint64_t target = wall_ps(nullptr) / timing::kNs;
      const uint64_t before = sim->now() / timing::kNs;
      lag_ns = server.client_connected() && target > before ? target - before : 0;
      max_lag_ns = std::max(max_lag_ns, lag_ns);
      // Hosts read it too (log page C0h): pollux-perf says when its figures are not the model's.
      dev->controller().set_realtime_status(
          {true, lag_ns, max_lag_ns, static_cast<uint64_t>(warn_lag_us * 1e3)});
      if (!warned && double(lag_ns) > warn_lag_us * 1e3) {
        warned = true;
        fmt::print(stderr,
                   "pollux-emu: WARNING: the model fell {:.0f} us behind the wall clock: "
                   "completions come late, so the latency and IOPS a host measures now are this "
                   "machine's, not the {} profile's (pollux_emu_realtime_lag_seconds; virtual "
                   "time, pollux-sim, has no such limit)\n",
                   double(lag_ns) / 1e3, profile.name);
      }
      sim->run_until(target * timing::kNs);
      sim->scan(wall_ps, nullptr);
    } else if (server.client_connected()) {
      dev->poll();
    }
  }
  if (sim && !quiet) {
    const auto s = sim->device(0).stats();
    fmt::print(
        "pollux-emu: simulated {:.3f} s; {} commands; largest step behind the wall "
        "clock {} us{}; engine mismatches {}\n",
        double(sim->now()) / double(timing::kSec), s.commands, max_lag_ns / 1000,
        double(max_lag_ns) > warn_lag_us * 1e3 ? " (FELL BEHIND: timings not the profile's)"
                                                : "",
        s.engine_mismatches);
  }
  const auto& c = dev->controller().counters();
  if (!quiet) fmt::print("pollux-emu: stopping; {} IOMMU faults\n", c.iommu_faults);
  return 0;
}
