// pollux-rnic: emulated Pollux RNICs as a separate program, one vfio-user server per NIC on a
// UNIX socket (DIR/rnic0.sock, DIR/rnic1.sock, ...), all on one wire and paced to the wall
// clock. Without --profile the NICs are functional (a fixed wire latency, everything else as
// fast as the loop turns); with one (cx5-100g, cx4lx-25g or a YAML path) every PCIe transfer,
// pipeline, frame and switch hop takes its modelled time, in realtime: nothing is seen before
// the wall clock reaches its time. A driver attaches with "vfio-user:DIR/rnicN.sock".
//   pollux-rnic --dir /tmp/rnic --nics 2 [--profile cx5-100g] [--seed 1] [--loss 0.01]
//               [--metrics 127.0.0.1:9466]   (Prometheus: per NIC, per QP and the wire's)
//               [--control DIR/control.sock] (fault commands as JSON lines: control.h)
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "common/cli.h"
#include "emulator/device/control_socket.h"
#include "emulator/device/metrics_endpoint.h"
#include "emulator/rnic/cluster.h"
#include "emulator/rnic/control.h"
#include "emulator/rnic/metrics.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace pollux::emu::rnic;
  CLI::App app{"pollux-rnic: emulated RoCEv2 NICs served over vfio-user"};
  std::string dir, socket_group;
  uint32_t nics = 2;
  uint64_t seed = 1;
  WireFaults faults;
  uint64_t latency_ns = 1000;
  std::string profile_name;
  bool quiet = false;
  app.add_option("-d,--dir", dir, "directory for the sockets rnic0.sock, rnic1.sock, ...")
      ->required();
  app.add_option("-n,--nics", nics, "number of NICs on the wire")->check(CLI::Range(1, 16));
  app.add_option("--seed", seed, "seed of the wire's faults");
  app.add_option("--loss", faults.loss, "probability a packet is lost")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--corrupt", faults.corrupt, "probability a packet is corrupted")
      ->check(CLI::Range(0.0, 1.0));
  auto* latency =
      app.add_option("--latency-ns", latency_ns, "one-way wire latency (functional NICs)");
  app.add_option("--profile", profile_name,
                 "NIC timing profile: " + builtin_nic_profile_names() + " or a .yaml path")
      ->excludes(latency);
  app.add_option("--flap-interval-ns", faults.flap_interval_ns,
                 "links flap from the seed: mean time up between flaps");
  app.add_option("--flap-down-ns", faults.flap_down_ns, "... and time down per flap");
  app.add_flag("-q,--quiet", quiet, "no start-up banner");
  app.add_option("--socket-group", socket_group, "let this group use the sockets too (0660)");
  std::string metrics_addr, control_path;
  app.add_option("--control", control_path,
                 "a control socket for fault commands (JSON lines: link_down, loss, qp_error, "
                 "nic_reset, stats...)");
  app.add_option("--metrics", metrics_addr,
                 "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9466; port 0: any)");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  std::optional<NicProfile> profile;
  if (!profile_name.empty()) {
    auto p = load_nic_profile(profile_name);
    if (!p) {
      std::fprintf(stderr, "pollux-rnic: %s\n", p.error().c_str());
      return 2;
    }
    profile = std::move(p).value();
  }
  Cluster cluster = profile ? Cluster(seed, *profile, faults) : Cluster(seed, faults, latency_ns);
  for (uint32_t i = 0; i < nics; ++i) {
    RnicDevice* d = cluster.add_nic();
    const std::string path = dir + "/rnic" + std::to_string(i) + ".sock";
    if (d == nullptr) {
      std::fprintf(stderr, "pollux-rnic: cannot create NIC %u\n", i);
      return 1;
    }
    std::string why;
    if (const int rc = d->server().listen(path, socket_group, &why); rc != 0) {
      std::fprintf(stderr, "pollux-rnic: listen %s: %s\n", path.c_str(),
                   why.empty() ? std::strerror(-rc) : why.c_str());
      return 1;
    }
  }
  RnicControl control(cluster, faults);
  pollux::emu::device::ControlSocket control_socket;
  if (!control_path.empty()) {
    std::string why;
    if (const int rc = control_socket.listen(control_path, socket_group, &why); rc != 0) {
      std::fprintf(stderr, "pollux-rnic: control socket %s: %s\n", control_path.c_str(),
                   why.empty() ? std::strerror(-rc) : why.c_str());
      return 1;
    }
  }
  std::unique_ptr<pollux::emu::device::MetricsEndpoint> metrics;
  if (!metrics_addr.empty()) {
    std::string err;
    metrics = pollux::emu::device::MetricsEndpoint::start(metrics_addr, &err);
    if (!metrics) {
      std::fprintf(stderr, "pollux-rnic: --metrics %s\n", err.c_str());
      return 2;
    }
  }
  // The counters belong to this thread: a snapshot is published for the endpoint now and then.
  auto publish = [&] {
    std::vector<prometheus::MetricFamily> families;
    for (std::size_t i = 0; i < cluster.count(); ++i) {
      const Rnic& nic = cluster.nic(i).nic();
      append_nic_metrics({&nic, "rnic" + std::to_string(i), nic.port_address(),
                          cluster.wire().link_up(nic.port_address())},
                         families);
    }
    append_wire_metrics(cluster.wire().stats(), families);
    metrics->publish(std::move(families));
  };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!quiet)
    std::printf("pollux-rnic: %u NICs in %s, seed %llu, %s\n", nics, dir.c_str(),
                (unsigned long long)seed,
                profile ? ("profile " + profile->name).c_str() : "functional (no timing)");
  if (metrics) {
    publish();
    std::printf("pollux-rnic: metrics on http://%s:%d/metrics\n",
                metrics_addr.substr(0, metrics_addr.rfind(':')).c_str(), metrics->port());
  }
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  auto published = start;
  for (uint64_t loops = 0; !g_stop; ++loops) {
    bool any_client = false;
    for (std::size_t i = 0; i < cluster.count(); ++i)
      any_client |= cluster.nic(i).server().client_connected();
    for (std::size_t i = 0; i < cluster.count(); ++i) {
      // Idle: wait a little on each socket; busy: never block.
      const int rc = cluster.nic(i).server().poll_once(any_client ? 0 : 10);
      if (rc < 0) {
        std::fprintf(stderr, "pollux-rnic: server %zu: %s\n", i, std::strerror(-rc));
        return 1;
      }
    }
    const auto now = std::chrono::steady_clock::now() - start;
    const auto now_ns =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    if (!control_path.empty()) {
      control.tick(now_ns);
      // Its accept and read are system calls: under load, one loop turn in 256 looks.
      if (!any_client || (loops & 255) == 0)
        control_socket.poll([&](const std::string& line) { return control.apply(line, now_ns); });
    }
    cluster.step_at(now_ns);
    if (metrics && std::chrono::steady_clock::now() - published > std::chrono::milliseconds(100)) {
      publish();
      published = std::chrono::steady_clock::now();
    }
  }
  if (!quiet) {
    const auto& w = cluster.wire().stats();
    std::printf("pollux-rnic: stopping; %llu packets sent, %llu delivered\n",
                (unsigned long long)w.sent, (unsigned long long)w.delivered);
  }
  return 0;
}
