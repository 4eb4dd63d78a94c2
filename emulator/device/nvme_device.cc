#include "emulator/device/nvme_device.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "spec/nvme.h"

namespace pollux::emu::device {
namespace sn = spec::nvme;
namespace vu = spec::vfio_user;

uint8_t* NvmeDevice::ServerDma::translate(uint64_t iova, size_t len) {
  if (present && !*present) return nullptr;  // removed: no DMA at all
  if (!config->bus_master()) {  // a function without bus mastering cannot reach host memory
    ++refused_no_bus_master;
    return nullptr;
  }
  return server->translate(iova, len);
}

NvmeDevice::NvmeDevice(std::size_t bar0_size, int doorbell_fd, uint8_t* bar0_mem)
    : config_(sn::pci::kVendorPollux, sn::pci::kDevicePolluxNvme, sn::pci::kClassCodeNvme,
              bar0_size),
      bar0_size_(bar0_size),
      doorbell_fd_(doorbell_fd),
      bar0_mem_(bar0_mem) {}

nvme::Result<std::unique_ptr<NvmeDevice>> NvmeDevice::create(const nvme::ControllerConfig& config,
                                                             vfio_user::ServerOptions options) {
  if (auto st = nvme::validate(config); !st.ok()) return nvme::Error{st.error()};
  // BAR0 = registers page + doorbells, a power of two (PCI BARs are).
  std::size_t bar0 = 16 * 1024;
  while (bar0 < 0x1000 + config.doorbell_bytes()) bar0 *= 2;
  const int fd = memfd_create("pollux-nvme-bar0", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bar0)) != 0) {
    if (fd >= 0) close(fd);
    return nvme::Error{std::string("BAR0 memfd: ") + std::strerror(errno)};
  }
  void* mem = mmap(nullptr, bar0, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    close(fd);
    return nvme::Error{std::string("BAR0 mmap: ") + std::strerror(errno)};
  }
  auto dev = std::unique_ptr<NvmeDevice>(new NvmeDevice(bar0, fd, static_cast<uint8_t*>(mem)));
  dev->server_ = std::make_unique<vfio_user::Server>(*dev, options);
  dev->dma_.server = dev->server_.get();
  dev->dma_.config = &dev->config_;
  dev->dma_.present = &dev->present_;
  auto ctrl = nvme::Controller::create(config, dev->dma_);
  if (!ctrl) return nvme::Error{ctrl.error()};
  dev->controller_ = std::move(ctrl).value();
  if (!dev->controller_->attach_doorbells(
          reinterpret_cast<volatile uint32_t*>(dev->bar0_mem_ + sn::reg::kDoorbellBase),
          bar0 - sn::reg::kDoorbellBase)) {
    return nvme::Error{"doorbell area too small for the configuration"};
  }
  return dev;
}

NvmeDevice::~NvmeDevice() {
  controller_.reset();  // before the doorbell memory goes
  server_.reset();
  munmap(bar0_mem_, bar0_size_);
  close(doorbell_fd_);
}

vfio_user::RegionDesc NvmeDevice::region(uint32_t index) const {
  vfio_user::RegionDesc d;
  if (index == vu::region::kBar0) {
    d.size = bar0_size_;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite | vu::kRegionFlagMmap;
    d.fd = doorbell_fd_;
    d.fd_offset = 0;
    // Only the doorbells are shared memory: registers need side effects on every access.
    d.sparse.push_back({sn::reg::kDoorbellBase, bar0_size_ - sn::reg::kDoorbellBase});
  } else if (index == vu::region::kConfig) {
    d.size = PciConfigSpace::kSize;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite;
  }
  return d;
}

void NvmeDevice::surprise_remove() {
  if (!present_) return;
  present_ = false;
  controller_->set_removed(true);
  server_->disconnect();  // the client's connection (socket or in-process) is gone with it
}

void NvmeDevice::insert() {
  if (present_) return;
  server_->disconnect();  // the old client's session (DMA maps, IRQs) is gone
  const uint16_t command = 0;  // power-on: memory space and bus mastering off
  config_.write(0x04, &command, sizeof command);
  controller_->power_cycle();
  present_ = true;
}

int NvmeDevice::region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) {
  if (!present_) {
    std::memset(buf, 0xff, len);
    return -ENODEV;
  }
  if (index == vu::region::kConfig) return config_.read(offset, buf, len);
  if (index != vu::region::kBar0) return -EINVAL;
  if (len == 4 && offset % 4 == 0) {
    const uint32_t v = controller_->read32(static_cast<uint32_t>(offset));
    std::memcpy(buf, &v, 4);
    return 0;
  }
  if (len == 8 && offset % 8 == 0) {
    const uint64_t v = controller_->read64(static_cast<uint32_t>(offset));
    std::memcpy(buf, &v, 8);
    return 0;
  }
  return -EINVAL;  // NVMe registers are accessed as aligned dwords or qwords
}

int NvmeDevice::region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) {
  if (!present_) return -ENODEV;
  if (index == vu::region::kConfig) {
    const int rc = config_.write(offset, buf, len);
    if (config_.take_flr_request()) on_reset();
    return rc;
  }
  if (index != vu::region::kBar0) return -EINVAL;
  if (len == 4 && offset % 4 == 0) {
    uint32_t v;
    std::memcpy(&v, buf, 4);
    controller_->write32(static_cast<uint32_t>(offset), v);
    return 0;
  }
  if (len == 8 && offset % 8 == 0) {
    uint64_t v;
    std::memcpy(&v, buf, 8);
    controller_->write64(static_cast<uint32_t>(offset), v);
    return 0;
  }
  return -EINVAL;
}

// Function-level reset: the controller returns to its power-on state (CC.EN = 0 resets it).
void NvmeDevice::on_reset() { controller_->write32(sn::reg::kCc, 0); }

uint32_t NvmeDevice::irq_count(uint32_t index) const {
  // Polled by design, but an INTx line exists as on any PCI function.
  return index == vu::irq::kIntx ? 1 : 0;
}

nvme::Result<std::unique_ptr<InProcessNvmeDevice>> InProcessNvmeDevice::create(
    const nvme::ControllerConfig& config) {
  auto dev = NvmeDevice::create(config);
  if (!dev) return nvme::Error{dev.error()};
  return std::unique_ptr<InProcessNvmeDevice>(new InProcessNvmeDevice(std::move(dev).value()));
}

InProcessNvmeDevice::InProcessNvmeDevice(std::unique_ptr<NvmeDevice> d)
    : device_(std::move(d)), thread_([this] { run(); }) {}

InProcessNvmeDevice::~InProcessNvmeDevice() {
  stop_ = true;
  thread_.join();
}

void InProcessNvmeDevice::run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    std::size_t n;
    {
      std::lock_guard lock(mu_);
      n = device_->poll();
    }
    if (n == 0) sched_yield();  // two cores here: leave room for the host side when idle
  }
}

void InProcessNvmeDevice::handle(const uint8_t* request, std::size_t len, const int* fds,
                                 std::size_t nfds, std::vector<uint8_t>& reply,
                                 std::vector<int>& reply_fds) {
  std::lock_guard lock(mu_);
  device_->server().handle(request, len, fds, nfds, reply, reply_fds);
}

namespace {

// A server connection used under the device lock (the device thread polls meanwhile).
class LockedConnection final : public vu::MessageEndpoint {
 public:
  LockedConnection(std::mutex& mu, std::unique_ptr<vu::MessageEndpoint> inner)
      : mu_(mu), inner_(std::move(inner)) {}
  ~LockedConnection() override {
    std::lock_guard lock(mu_);
    inner_.reset();
  }
  void handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
              std::vector<uint8_t>& reply, std::vector<int>& reply_fds) override {
    std::lock_guard lock(mu_);
    inner_->handle(request, len, fds, nfds, reply, reply_fds);
  }
  bool hung_up() const override {
    std::lock_guard lock(mu_);
    return inner_->hung_up();
  }

 private:
  std::mutex& mu_;
  std::unique_ptr<vu::MessageEndpoint> inner_;
};

}  // namespace

std::unique_ptr<vu::MessageEndpoint> InProcessNvmeDevice::connect() {
  std::unique_ptr<vu::MessageEndpoint> c;
  {
    std::lock_guard lock(mu_);
    c = device_->server().connect_in_process();
  }
  if (!c) return nullptr;
  return std::make_unique<LockedConnection>(mu_, std::move(c));
}

}  // namespace pollux::emu::device
