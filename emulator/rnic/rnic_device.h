// The Pollux RNIC as a PCI function behind a vfio-user server, as the NVMe SSD is
// (emulator/device): config space (region 7: ids and class 02-00-00, a 64-bit BAR0), BAR0
// (region 0) whose registers are REGION_READ/WRITE messages with immediate side effects
// (commands run inside the doorbell write) and whose doorbell page is a sparse-mmap memfd page
// the host maps and the NIC reads; DMA only through the client's DMA_MAPs, and only while bus
// mastering is on.
//
// No thread of its own: whoever drives time calls process() (Cluster below, or later the
// lockstep engine). Single-threaded like the server.
#pragma once

#include <cstdint>
#include <memory>

#include "emulator/device/pci_config.h"
#include "emulator/rnic/rnic.h"
#include "emulator/vfio_user/server.h"

namespace pollux::emu::rnic {

class RnicDevice final : public vfio_user::DeviceModel {
 public:
  // nullptr if the BAR's shared memory could not be created.
  static std::unique_ptr<RnicDevice> create(uint64_t port_address, RnicConfig config = {});
  ~RnicDevice() override;
  RnicDevice(const RnicDevice&) = delete;
  RnicDevice& operator=(const RnicDevice&) = delete;

  // An in-process connection for a vfio-user client (env::VfioUserDevice::attach).
  std::unique_ptr<spec::vfio_user::MessageEndpoint> connect() {
    return server_->connect_in_process();
  }
  vfio_user::Server& server() { return *server_; }
  Rnic& nic() { return *nic_; }
  const Rnic& nic() const { return *nic_; }
  const device::PciConfigSpace& config_space() const { return config_; }
  bool process(uint64_t now_ns, uint64_t stores_at_ns = 0) {
    return nic_->process(now_ns, stores_at_ns);
  }
  // DMA the device wanted while the host had bus mastering off (refused, as a root port does).
  uint64_t dma_refused_no_bus_master() const { return dma_.refused_no_bus_master; }

  // ---- vfio_user::DeviceModel ----
  vfio_user::RegionDesc region(uint32_t index) const override;
  int region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) override;
  int region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) override;
  void on_reset() override;
  uint32_t irq_count(uint32_t index) const override;

 private:
  struct ServerDma final : HostMemory {
    vfio_user::Server* server = nullptr;
    const device::PciConfigSpace* config = nullptr;
    uint64_t refused_no_bus_master = 0;
    uint8_t* translate(uint64_t iova, std::size_t len) override;
  };
  RnicDevice(int memfd, uint8_t* bar0);

  device::PciConfigSpace config_;
  int memfd_;
  uint8_t* bar0_;  // the memfd mapped: BAR0's layout, of which the doorbell page is shared
  ServerDma dma_;
  std::unique_ptr<vfio_user::Server> server_;
  std::unique_ptr<Rnic> nic_;
};

}  // namespace pollux::emu::rnic
