#include "emulator/rnic/rnic_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pollux::emu::rnic {

namespace vu = spec::vfio_user;

std::unique_ptr<RnicDevice> RnicDevice::create(uint64_t port_address, RnicConfig config) {
  const int fd = ::memfd_create("pollux-rnic-bar0", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  if (::ftruncate(fd, sr::kBar0Size) != 0) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, sr::kBar0Size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<RnicDevice> d(new RnicDevice(fd, static_cast<uint8_t*>(p)));
  d->nic_ =
      std::make_unique<Rnic>(d->dma_, d->bar0_ + sr::reg::kDoorbellBase, port_address, config,
                             d->bar0_ + sr::reg::kPushBase);
  return d;
}

RnicDevice::RnicDevice(int memfd, uint8_t* bar0)
    : config_(sr::kPciVendorId, sr::kPciDeviceId, sr::kPciClassCode, sr::kBar0Size),
      memfd_(memfd),
      bar0_(bar0) {
  server_ = std::make_unique<vfio_user::Server>(*this);
  dma_.server = server_.get();
  dma_.config = &config_;
}

RnicDevice::~RnicDevice() {
  nic_.reset();
  server_.reset();
  ::munmap(bar0_, sr::kBar0Size);
  ::close(memfd_);
}

uint8_t* RnicDevice::ServerDma::translate(uint64_t iova, std::size_t len) {
  if (!config->bus_master()) {
    ++refused_no_bus_master;
    return nullptr;
  }
  return server->translate(iova, len);
}

vfio_user::RegionDesc RnicDevice::region(uint32_t index) const {
  vfio_user::RegionDesc d;
  if (index == vu::region::kBar0) {
    d.size = sr::kBar0Size;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite | vu::kRegionFlagMmap;
    d.fd = memfd_;
    d.fd_offset = 0;
    d.sparse.push_back({sr::reg::kDoorbellBase, sr::reg::kDoorbellSize});
    d.sparse.push_back({sr::reg::kPushBase, sr::reg::kPushSize});
  } else if (index == vu::region::kConfig) {
    d.size = device::PciConfigSpace::kSize;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite;
  }
  return d;
}

int RnicDevice::region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) {
  if (index == vu::region::kConfig) return config_.read(offset, buf, len);
  if (index != vu::region::kBar0) return -EINVAL;
  if (offset >= sr::reg::kDoorbellBase) {  // the mappable page, read by message
    std::memcpy(buf, bar0_ + offset, len);
    return 0;
  }
  if (len == 4 && offset % 4 == 0) {
    const uint32_t v = nic_->read32(static_cast<uint32_t>(offset));
    std::memcpy(buf, &v, 4);
    return 0;
  }
  if (len == 8 && offset % 8 == 0) {
    const uint64_t v = nic_->read64(static_cast<uint32_t>(offset));
    std::memcpy(buf, &v, 8);
    return 0;
  }
  return -EINVAL;  // registers are aligned dwords or qwords
}

int RnicDevice::region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) {
  if (index == vu::region::kConfig) {
    const int rc = config_.write(offset, buf, len);
    if (config_.take_flr_request()) on_reset();
    return rc;
  }
  if (index != vu::region::kBar0) return -EINVAL;
  if (offset >= sr::reg::kDoorbellBase) {
    std::memcpy(bar0_ + offset, buf, len);
    return 0;
  }
  if (len == 4 && offset % 4 == 0) {
    uint32_t v;
    std::memcpy(&v, buf, 4);
    nic_->write32(static_cast<uint32_t>(offset), v);
    return 0;
  }
  if (len == 8 && offset % 8 == 0) {
    uint64_t v;
    std::memcpy(&v, buf, 8);
    nic_->write64(static_cast<uint32_t>(offset), v);
    return 0;
  }
  return -EINVAL;
}

void RnicDevice::on_reset() {
  nic_->reset();
}

uint32_t RnicDevice::irq_count(uint32_t index) const {
  return index == vu::irq::kIntx ? 1 : 0;  // polled by design; an INTx line exists anyway
}

}  // namespace pollux::emu::rnic
