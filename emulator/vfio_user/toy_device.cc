#include "emulator/vfio_user/toy_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pollux::emu::vfio_user {

namespace vu = spec::vfio_user;

ToyDevice::ToyDevice() {
  memfd_ = ::memfd_create("toy-bar0", MFD_CLOEXEC);
  if (memfd_ >= 0 && ::ftruncate(memfd_, kBar0Size) == 0) {
    void* p = ::mmap(nullptr, kBar0Size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
    if (p != MAP_FAILED) {
      bar0_file_ = static_cast<uint8_t*>(p);
      doorbells_ = bar0_file_ + kDoorbellOffset;
    }
  }
  const uint32_t ids = kVendorId | (uint32_t{kDeviceId} << 16);
  std::memcpy(config_ + 0x00, &ids, 4);
  const uint32_t class_rev = kClassCode << 8;  // revision 0 at 0x08, class code at 0x09..0x0b
  std::memcpy(config_ + 0x08, &class_rev, 4);
}

ToyDevice::~ToyDevice() {
  if (bar0_file_ != nullptr) ::munmap(bar0_file_, kBar0Size);
  if (memfd_ >= 0) ::close(memfd_);
}

RegionDesc ToyDevice::region(uint32_t index) const {
  RegionDesc d;
  if (index == vu::region::kBar0) {
    d.size = kBar0Size;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite | vu::kRegionFlagMmap;
    d.fd = memfd_;
    d.fd_offset = 0;
    d.sparse.push_back({kDoorbellOffset, kDoorbellSize});
  } else if (index == vu::region::kConfig) {
    d.size = kConfigSize;
    d.flags = vu::kRegionFlagRead | vu::kRegionFlagWrite;
  }
  return d;
}

uint32_t ToyDevice::irq_count(uint32_t index) const {
  switch (index) {
    case vu::irq::kIntx: return 1;
    case vu::irq::kMsix: return 4;
    case vu::irq::kErr:
    case vu::irq::kReq: return 1;
    default: return 0;
  }
}

void ToyDevice::on_dma_unmap(uint64_t, uint64_t) { ++unmaps_; }

uint32_t ToyDevice::reg32(uint32_t off) const {
  uint32_t v;
  std::memcpy(&v, regs_ + off, 4);
  return v;
}

int ToyDevice::region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) {
  if (index == vu::region::kConfig) {
    std::memcpy(buf, config_ + offset, len);
    return 0;
  }
  if (index != vu::region::kBar0) return -EINVAL;
  if (offset >= kDoorbellOffset) {  // the mappable page, reached by a message
    std::memcpy(buf, bar0_file_ + offset, len);
    return 0;
  }
  if (offset + len > kDoorbellOffset) return -EINVAL;
  const uint32_t id = kIdValue;
  std::memcpy(regs_ + kRegId, &id, 4);
  const uint32_t resets = static_cast<uint32_t>(resets_);
  std::memcpy(regs_ + kRegResets, &resets, 4);
  const uint32_t maps = server_ ? static_cast<uint32_t>(server_->dma_map_count()) : 0;
  std::memcpy(regs_ + kRegDmaMaps, &maps, 4);
  const uint32_t sel = reg32(kRegDbSelect) & (kDoorbellSize - 4);
  uint32_t db;
  std::memcpy(&db, doorbells_ + sel, 4);  // the page the client writes through its mapping
  std::memcpy(regs_ + kRegDbValue, &db, 4);
  std::memcpy(buf, regs_ + offset, len);
  return 0;
}

int ToyDevice::region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) {
  if (index == vu::region::kConfig) {
    // Only the command register (0x04, 2 bytes) is writable.
    for (std::size_t i = 0; i < len; ++i) {
      if (offset + i == 0x04 || offset + i == 0x05)
        config_[offset + i] = static_cast<const uint8_t*>(buf)[i];
    }
    return 0;
  }
  if (index != vu::region::kBar0) return -EINVAL;
  if (offset >= kDoorbellOffset) {
    std::memcpy(bar0_file_ + offset, buf, len);
    return 0;
  }
  if (offset + len > kDoorbellOffset) return -EINVAL;
  const uint32_t status = reg32(kRegDmaStatus);
  std::memcpy(regs_ + offset, buf, len);
  std::memcpy(regs_ + kRegDmaStatus, &status, 4);  // read-only
  auto covers = [&](uint32_t reg) { return offset <= reg && reg < offset + len; };
  if (covers(kRegDbValue)) {
    const uint32_t sel = reg32(kRegDbSelect) & (kDoorbellSize - 4);
    std::memcpy(doorbells_ + sel, regs_ + kRegDbValue, 4);  // device -> host through the page
  }
  if (covers(kRegDmaCtrl) && (reg32(kRegDmaCtrl) & 1)) run_dma();
  return 0;
}

void ToyDevice::run_dma() {
  uint64_t src, dst;
  std::memcpy(&src, regs_ + kRegDmaSrc, 8);
  std::memcpy(&dst, regs_ + kRegDmaDst, 8);
  const uint32_t len = reg32(kRegDmaLen);
  uint8_t* s = server_ ? server_->translate(src, len) : nullptr;
  uint8_t* d = server_ ? server_->translate(dst, len) : nullptr;
  uint32_t status = kDmaFault;
  if (s != nullptr && d != nullptr) {
    std::memmove(d, s, len);
    status = kDmaDone;
  }
  std::memcpy(regs_ + kRegDmaStatus, &status, 4);
  const uint32_t zero = 0;
  std::memcpy(regs_ + kRegDmaCtrl, &zero, 4);
}

void ToyDevice::on_reset() {
  std::memset(regs_, 0, sizeof regs_);
  std::memset(doorbells_, 0, kDoorbellSize);
  ++resets_;
}

}  // namespace pollux::emu::vfio_user
