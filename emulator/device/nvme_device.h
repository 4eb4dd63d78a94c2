// The emulated NVMe SSD as a PCI function behind a vfio-user server: config space (region 7),
// BAR0 (region 0) whose registers are reached by REGION_READ/WRITE messages and whose doorbell
// area is a shared memory page the client mmaps (sparse mmap) and the controller polls, and
// DMA through the client's DMA_MAPs only. Bus mastering must be enabled for any DMA.
//
// Single-threaded: the owner alternates server work (messages) and poll() (device work), as
// pollux-emu's loop does. InProcessNvmeDevice below adds a lock for the in-process mode.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "emulator/device/pci_config.h"
#include "emulator/nvme/config.h"
#include "emulator/nvme/controller.h"
#include "emulator/nvme/dma_space.h"
#include "emulator/vfio_user/server.h"

namespace pollux::emu::device {

class NvmeDevice final : public vfio_user::DeviceModel {
 public:
  static nvme::Result<std::unique_ptr<NvmeDevice>> create(const nvme::ControllerConfig& config,
                                                          vfio_user::ServerOptions options = {});
  ~NvmeDevice() override;
  NvmeDevice(const NvmeDevice&) = delete;
  NvmeDevice& operator=(const NvmeDevice&) = delete;

  vfio_user::Server& server() { return *server_; }
  nvme::Controller& controller() { return *controller_; }
  const PciConfigSpace& config_space() const { return config_; }
  // Device work: fetch, execute and complete up to max_commands commands.
  std::size_t poll(std::size_t max_commands = 256) { return controller_->poll(max_commands); }
  uint64_t dma_refused_no_bus_master() const { return dma_.refused_no_bus_master; }

  // Surprise removal: config and BAR reads return all ones (and the error ENODEV, which is how
  // an in-process client learns of it), writes are dropped, DMA stops mid-transfer, the
  // controller stops; the client is disconnected (socket or in-process connection: it never
  // talks to this function again). insert(): power-on as a fresh function on the same
  // namespaces and data, ready for a new client.
  void surprise_remove();
  void insert();
  bool present() const { return present_; }

  // ---- vfio_user::DeviceModel ----
  vfio_user::RegionDesc region(uint32_t index) const override;
  int region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) override;
  int region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) override;
  void on_reset() override;
  uint32_t irq_count(uint32_t index) const override;

 private:
  // DMA goes through the server's map table, and only while bus mastering is on.
  struct ServerDma final : nvme::DmaSpace {
    vfio_user::Server* server = nullptr;
    const PciConfigSpace* config = nullptr;
    const bool* present = nullptr;
    uint64_t refused_no_bus_master = 0;
    uint8_t* translate(uint64_t iova, size_t len) override;
  };
  NvmeDevice(std::size_t bar0_size, int doorbell_fd, uint8_t* bar0_mem);

  PciConfigSpace config_;
  std::size_t bar0_size_;
  int doorbell_fd_;        // memfd holding BAR0's layout; the doorbell part is shared
  uint8_t* bar0_mem_;
  ServerDma dma_;
  std::unique_ptr<vfio_user::Server> server_;
  std::unique_ptr<nvme::Controller> controller_;
  bool present_ = true;
};

// In-process mode for fast tests: the same device and the same vfio-user messages, delivered
// by direct calls (MessageEndpoint) instead of a socket, and a thread doing device work.
// A mutex serialises the client's messages with the device thread.
class InProcessNvmeDevice final : public spec::vfio_user::MessageEndpoint {
 public:
  static nvme::Result<std::unique_ptr<InProcessNvmeDevice>> create(
      const nvme::ControllerConfig& config);
  ~InProcessNvmeDevice() override;  // stops the device thread

  void handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
              std::vector<uint8_t>& reply, std::vector<int>& reply_fds) override;
  // A connection of the client's own (Server::connect_in_process, under the device lock):
  // ended by a surprise removal as a socket would be. nullptr while another client has one.
  // It must not outlive this object.
  std::unique_ptr<spec::vfio_user::MessageEndpoint> connect();
  // Runs `fn(device)` with the device thread held off (for inspection and fault hooks).
  template <typename Fn>
  auto with_device(Fn&& fn) {
    std::lock_guard lock(mu_);
    return fn(*device_);
  }

 private:
  explicit InProcessNvmeDevice(std::unique_ptr<NvmeDevice> d);
  void run();
  std::unique_ptr<NvmeDevice> device_;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pollux::emu::device
