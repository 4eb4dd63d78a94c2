#include "driver/env/vfio_pci.h"

#include <fcntl.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>

namespace pollux::env {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// The region-info capability chain (sparse mmap areas), read with a second, larger ioctl.
std::vector<std::pair<uint64_t, uint64_t>> sparse_areas(int device_fd, uint32_t index) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  vfio_region_info probe{};
  probe.argsz = sizeof probe;
  probe.index = index;
  if (ioctl(device_fd, VFIO_DEVICE_GET_REGION_INFO, &probe) != 0) return out;
  if (!(probe.flags & VFIO_REGION_INFO_FLAG_CAPS) || probe.argsz <= sizeof probe) return out;
  std::vector<uint8_t> buf(probe.argsz);
  auto* info = reinterpret_cast<vfio_region_info*>(buf.data());
  info->argsz = probe.argsz;
  info->index = index;
  if (ioctl(device_fd, VFIO_DEVICE_GET_REGION_INFO, info) != 0 || info->cap_offset == 0) return out;
  for (uint32_t off = info->cap_offset; off != 0 && off + sizeof(vfio_info_cap_header) <= buf.size();) {
    const auto* hdr = reinterpret_cast<const vfio_info_cap_header*>(buf.data() + off);
    if (hdr->id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
      const auto* sp = reinterpret_cast<const vfio_region_info_cap_sparse_mmap*>(hdr);
      for (uint32_t i = 0; i < sp->nr_areas; ++i) out.emplace_back(sp->areas[i].offset, sp->areas[i].size);
    }
    if (hdr->next <= off) break;  // the chain only moves forward
    off = hdr->next;
  }
  return out;
}

// The address width of the device's IOMMU when it is Intel VT-d (MGAW, from the capability
// register in sysfs), or 0 if unknown. The kernel's IOVA ranges do not always reflect it (Linux
// 6.1 reports the domain's 48-bit aperture on a 39-bit unit and the device then faults).
int intel_iommu_address_bits(const std::string& device_dir) {
  FILE* f = std::fopen((device_dir + "/iommu/intel-iommu/cap").c_str(), "r");
  if (f == nullptr) return 0;
  unsigned long long cap = 0;
  const int n = std::fscanf(f, "%llx", &cap);
  std::fclose(f);
  return n == 1 ? static_cast<int>((cap >> 16) & 0x3f) + 1 : 0;
}

}  // namespace

Result<std::string> normalise_bdf(const std::string& text) {
  // [domain:]bus:device.function, hex; at most 4/2/2 digits, device <= 0x1f, function <= 7.
  auto hex = [](const std::string& f, std::size_t max_digits, unsigned* v) {
    if (f.empty() || f.size() > max_digits ||
        !std::all_of(f.begin(), f.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
      return false;
    *v = static_cast<unsigned>(std::stoul(f, nullptr, 16));
    return true;
  };
  const auto dot = text.rfind('.');
  const auto c2 = text.rfind(':', dot);
  const auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : text.rfind(':', c2 - 1);
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  const bool ok = dot != std::string::npos && c2 != std::string::npos && c2 < dot &&
                  (c1 == std::string::npos || hex(text.substr(0, c1), 4, &domain)) &&
                  hex(text.substr(c1 == std::string::npos ? 0 : c1 + 1,
                                  c2 - (c1 == std::string::npos ? 0 : c1 + 1)), 2, &bus) &&
                  hex(text.substr(c2 + 1, dot - c2 - 1), 2, &dev) &&
                  hex(text.substr(dot + 1), 1, &fn) && dev <= 0x1f && fn <= 7;
  if (!ok) {
    return make_error(EINVAL, "'" + text + "' is not a PCI address (expected e.g. 0000:01:00.0)");
  }
  char out[16];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  return std::string(out);
}

Result<int> iommu_group_of(const std::string& bdf, const std::string& sysfs_root) {
  const std::string dev = sysfs_root + "/" + bdf;
  if (access(dev.c_str(), F_OK) != 0) return make_error(ENODEV, "no PCI device " + bdf);
  char target[PATH_MAX];
  const ssize_t n = readlink((dev + "/iommu_group").c_str(), target, sizeof target - 1);
  if (n <= 0) {
    return make_error(ENODEV, bdf + " has no IOMMU group: the IOMMU is off (boot with "
                                    "intel_iommu=on or amd_iommu=on) or absent");
  }
  target[n] = 0;
  const char* slash = std::strrchr(target, '/');
  const char* num = slash ? slash + 1 : target;
  if (*num == 0 || !std::all_of(num, num + std::strlen(num), [](char c) { return std::isdigit(c); }))
    return make_error(EINVAL, bdf + ": unexpected iommu_group link " + target);
  return std::atoi(num);
}

bool vfio_pci_bound(const std::string& bdf, const std::string& sysfs_root) {
  char target[PATH_MAX];
  const ssize_t n = readlink((sysfs_root + "/" + bdf + "/driver").c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  const char* slash = std::strrchr(target, '/');
  return std::strcmp(slash ? slash + 1 : target, "vfio-pci") == 0;
}

Result<std::unique_ptr<VfioPciDevice>> VfioPciDevice::open(const std::string& address,
                                                           MemoryRegistry& registry,
                                                           const VfioPciOptions& options) {
  std::string text = address;
  if (auto p = text.find("traddr:"); p != std::string::npos) {
    text = text.substr(p + 7);
    text = text.substr(0, text.find(' '));
  } else if (text.rfind("pcie:", 0) == 0) {
    text = text.substr(5);
  }
  auto bdf = normalise_bdf(text);
  if (!bdf) return bdf.error();
  std::unique_ptr<VfioPciDevice> d(new VfioPciDevice(*bdf, registry));
  std::string why;
  if (const int rc = d->set_up(options, &why); rc != 0) return make_error(rc, *bdf + ": " + why);
  return d;
}

int VfioPciDevice::set_up(const VfioPciOptions& o, std::string* why) {
  auto group = iommu_group_of(bdf_, o.sysfs_root);
  if (!group) {
    *why = group.error().message;
    return group.error().code;
  }
  auto container = VfioContainer::of(registry_, o.vfio_root);
  if (!container) {
    *why = container.error().message;
    return container.error().code;
  }
  auto g = VfioGroup::open(*group, o.vfio_root, *container, bdf_);
  if (!g) {
    *why = g.error().message;
    return g.error().code;
  }
  group_ = *g;
  // A user-space address has up to 47 bits: IOVA = virtual address needs a 48-bit IOMMU.
  // A narrower one gets compact IOVAs (memory_registry.h), if the registry can still switch.
  uint64_t iova_limit = 0;
  if (const int bits = intel_iommu_address_bits(o.sysfs_root + "/" + bdf_); bits != 0 && bits < 48) {
    iova_limit = 1ull << bits;
    const IovaMode mode = registry_.iova_mode();
    const std::string width = "the IOMMU maps " + std::to_string(bits) + "-bit addresses";
    if (mode == IovaMode::kVirtualAddress) {
      *why = width + " and IOVA = virtual address (POLLUX_IOVA_MODE=va) needs 48: use "
             "POLLUX_IOVA_MODE=compact";
      return -ENOTSUP;
    }
    if (mode == IovaMode::kAuto && registry_.set_iova_mode(IovaMode::kCompact) != 0) {
      *why = width + ", and DMA memory was registered with IOVA = virtual address before this "
             "device was opened (which needs 48-bit IOVAs): set POLLUX_IOVA_MODE=compact, or "
             "open the device before allocating DMA memory";
      return -ENOTSUP;
    }
  }
  // The container maps every region now (the first device) or already does (the kernel
  // replays its mappings into this group's domain); later regions as they come.
  if (std::string e = group_->container().joined(iova_limit); !e.empty()) {
    *why = e;
    return -EIO;
  }
  device_fd_ = ioctl(group_->fd(), VFIO_GROUP_GET_DEVICE_FD, bdf_.c_str());
  if (device_fd_ < 0) {
    const int e = errno;
    *why = "VFIO_GROUP_GET_DEVICE_FD: " + errno_text(e);
    return -e;
  }
  vfio_device_info info{};
  info.argsz = sizeof info;
  if (ioctl(device_fd_, VFIO_DEVICE_GET_INFO, &info) != 0 || !(info.flags & VFIO_DEVICE_FLAGS_PCI)) {
    *why = "not a vfio-pci device";
    return -ENODEV;
  }
  can_reset_ = info.flags & VFIO_DEVICE_FLAGS_RESET;
  vfio_region_info cfg{};
  cfg.argsz = sizeof cfg;
  cfg.index = VFIO_PCI_CONFIG_REGION_INDEX;
  if (ioctl(device_fd_, VFIO_DEVICE_GET_REGION_INFO, &cfg) != 0) {
    *why = "config region: " + errno_text(errno);
    return -EIO;
  }
  config_offset_ = cfg.offset;
  for (int bar = 0; bar < 6; ++bar) {
    vfio_region_info r{};
    r.argsz = sizeof r;
    r.index = VFIO_PCI_BAR0_REGION_INDEX + static_cast<uint32_t>(bar);
    if (ioctl(device_fd_, VFIO_DEVICE_GET_REGION_INFO, &r) != 0) continue;
    bars_[bar].size = r.size;
    bars_[bar].offset = r.offset;
    if (bar == 0 && (r.flags & VFIO_REGION_INFO_FLAG_MMAP)) {
      if (const int rc = map_bar(0, why); rc != 0) return rc;
    }
  }
  if (bars_[0].size == 0) {
    *why = "BAR0 is empty";
    return -ENODEV;
  }
  // Bus master on (DMA), memory space on; INTx off: the driver polls.
  uint16_t cmd = 0;
  if (config_read(PCI_COMMAND, &cmd, 2) != 0) {
    *why = "reading the command register failed";
    return -EIO;
  }
  cmd |= PCI_COMMAND_MASTER | PCI_COMMAND_MEMORY | PCI_COMMAND_INTX_DISABLE;
  if (config_write(PCI_COMMAND, &cmd, 2) != 0) {
    *why = "enabling bus mastering failed";
    return -EIO;
  }
  // The kernel's request to give the device back (hot-unplug): an eventfd we poll.
  vfio_irq_info irq{};
  irq.argsz = sizeof irq;
  irq.index = VFIO_PCI_REQ_IRQ_INDEX;
  if (ioctl(device_fd_, VFIO_DEVICE_GET_IRQ_INFO, &irq) == 0 && irq.count > 0) {
    req_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    alignas(vfio_irq_set) uint8_t buf[sizeof(vfio_irq_set) + sizeof(int32_t)];
    auto* set = reinterpret_cast<vfio_irq_set*>(buf);
    set->argsz = sizeof buf;
    set->flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    set->index = VFIO_PCI_REQ_IRQ_INDEX;
    set->start = 0;
    set->count = 1;
    std::memcpy(set->data, &req_fd_, sizeof(int32_t));
    if (req_fd_ < 0 || ioctl(device_fd_, VFIO_DEVICE_SET_IRQS, set) != 0) {
      if (req_fd_ >= 0) ::close(req_fd_);
      req_fd_ = -1;  // removal is then seen only as all-ones reads
    }
  }
  return 0;
}

int VfioPciDevice::map_bar(int index, std::string* why) {
  Bar& b = bars_[index];
  auto map = [&](uint64_t off, uint64_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, device_fd_,
                   static_cast<off_t>(b.offset + off));
    if (p == MAP_FAILED) return false;
    b.maps.push_back({off, size, p});
    return true;
  };
  if (map(0, b.size)) return 0;
  // The kernel keeps parts (the MSI-X table) out of reach: map the areas it allows.
  for (const auto& [off, size] : sparse_areas(device_fd_, VFIO_PCI_BAR0_REGION_INDEX + index)) {
    if (size != 0 && !map(off, size)) {
      *why = "mmap of BAR" + std::to_string(index) + ": " + errno_text(errno);
      return -EIO;
    }
  }
  return 0;  // nothing mappable: every access goes through pread/pwrite
}

VfioPciDevice::~VfioPciDevice() {
  for (Bar& b : bars_)
    for (const auto& m : b.maps) munmap(m.addr, m.size);
  if (req_fd_ >= 0) ::close(req_fd_);
  if (device_fd_ >= 0) ::close(device_fd_);  // lets a pending hot-unplug finish
  // group_ goes with the last device of the group, the container with the last group.
}

void* VfioPciDevice::mapped(int bar, uint64_t offset, std::size_t len) const {
  if (bar < 0 || bar > 5) return nullptr;
  for (const auto& m : bars_[bar].maps) {
    if (offset >= m.offset && len <= m.size && offset - m.offset <= m.size - len)
      return static_cast<uint8_t*>(m.addr) + (offset - m.offset);
  }
  return nullptr;
}

int VfioPciDevice::config_read(uint32_t offset, void* buf, std::size_t len) {
  const ssize_t n = pread(device_fd_, buf, len, static_cast<off_t>(config_offset_ + offset));
  return n == static_cast<ssize_t>(len) ? 0 : -EIO;
}

int VfioPciDevice::config_write(uint32_t offset, const void* buf, std::size_t len) {
  const ssize_t n = pwrite(device_fd_, buf, len, static_cast<off_t>(config_offset_ + offset));
  return n == static_cast<ssize_t>(len) ? 0 : -EIO;
}

int VfioPciDevice::bar_read(int bar, uint64_t offset, void* buf, std::size_t len) {
  if (removed()) return -ENODEV;
  if (bar < 0 || bar > 5 || len > bars_[bar].size || offset > bars_[bar].size - len) return -EINVAL;
  if (void* p = mapped(bar, offset, len); p != nullptr && (len == 4 || len == 8)) {
    // 8-byte registers (CAP, ASQ, ACQ) as two 4-byte accesses, low half first: some
    // controllers mishandle 64-bit MMIO (Linux's lo_hi_readq does the same).
    auto* r = static_cast<volatile uint32_t*>(p);
    auto* out = static_cast<uint32_t*>(buf);
    out[0] = r[0];
    if (len == 8) out[1] = r[1];
    return 0;
  }
  const ssize_t n = pread(device_fd_, buf, len, static_cast<off_t>(bars_[bar].offset + offset));
  return n == static_cast<ssize_t>(len) ? 0 : -EIO;
}

int VfioPciDevice::bar_write(int bar, uint64_t offset, const void* buf, std::size_t len) {
  if (removed()) return -ENODEV;
  if (bar < 0 || bar > 5 || len > bars_[bar].size || offset > bars_[bar].size - len) return -EINVAL;
  if (void* p = mapped(bar, offset, len); p != nullptr && (len == 4 || len == 8)) {
    auto* r = static_cast<volatile uint32_t*>(p);
    const auto* in = static_cast<const uint32_t*>(buf);
    r[0] = in[0];
    if (len == 8) r[1] = in[1];
    return 0;
  }
  const ssize_t n = pwrite(device_fd_, buf, len, static_cast<off_t>(bars_[bar].offset + offset));
  return n == static_cast<ssize_t>(len) ? 0 : -EIO;
}

volatile void* VfioPciDevice::bar_map(int bar, uint64_t offset, std::size_t len) {
  return mapped(bar, offset, len);
}

int VfioPciDevice::reset() {
  if (!can_reset_) return -ENOTSUP;
  if (ioctl(device_fd_, VFIO_DEVICE_RESET) != 0) return -errno;
  // A function-level reset clears the command register: DMA would be off.
  uint16_t cmd = 0;
  if (config_read(PCI_COMMAND, &cmd, 2) != 0) return -EIO;
  cmd |= PCI_COMMAND_MASTER | PCI_COMMAND_MEMORY | PCI_COMMAND_INTX_DISABLE;
  return config_write(PCI_COMMAND, &cmd, 2);
}

bool VfioPciDevice::probe_removed() {
  if (removed()) return true;
  uint64_t v = 0;
  // The kernel wants the device back; it still works (and may DMA) until the driver stops it.
  if (req_fd_ >= 0 && read(req_fd_, &v, sizeof v) == sizeof v) request_removal();
  return removed();
}

uint64_t VfioPciDevice::dma_mappings() const {
  return group_ ? group_->container().mappings() : 0;
}

}  // namespace pollux::env
