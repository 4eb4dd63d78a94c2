// pollux-emu: the emulated NVMe SSD as a separate program, a vfio-user server on a UNIX
// socket. Any conforming vfio-user client can drive it (Pollux's driver, SPDK's vfio-user
// NVMe transport, QEMU's vfio-user-pci).
//   pollux-emu --socket /tmp/emu.sock --config emulator/nvme/examples/default.yaml
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstring>

#include "emulator/device/nvme_device.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  using namespace pollux::emu;
  CLI::App app{"pollux-emu: an emulated NVMe SSD served over vfio-user"};
  std::string socket_path, config_path;
  bool quiet = false;
  app.add_option("-s,--socket", socket_path, "UNIX socket to listen on")->required();
  app.add_option("-c,--config", config_path, "device YAML (default: 2 namespaces, 1 GiB each)");
  app.add_flag("-q,--quiet", quiet, "no start-up banner");
  CLI11_PARSE(app, argc, argv);

  nvme::ControllerConfig config;
  if (!config_path.empty()) {
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
  if (const int rc = dev->server().listen(socket_path); rc != 0) {
    fmt::print(stderr, "pollux-emu: cannot listen on {}: {}\n", socket_path, std::strerror(-rc));
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  if (!quiet) {
    fmt::print("pollux-emu: {} ({} namespace(s)) listening on {}\n", config.model,
               config.namespaces.size(), socket_path);
    std::fflush(stdout);
  }
  // One loop for messages and device work. With a client attached the device polls its
  // doorbells continuously (it is a polled device); without one it sleeps in poll().
  while (!g_stop) {
    auto& server = dev->server();
    const int rc = server.poll_once(server.client_connected() ? 0 : 100);
    if (rc < 0) {
      fmt::print(stderr, "pollux-emu: server: {}\n", std::strerror(-rc));
      return 1;
    }
    if (server.client_connected()) dev->poll();
  }
  const auto& c = dev->controller().counters();
  if (!quiet) fmt::print("pollux-emu: stopping; {} IOMMU faults\n", c.iommu_faults);
  return 0;
}
