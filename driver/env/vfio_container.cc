#include "driver/env/vfio_container.h"

#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pollux::env {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// The IOVA ranges the container's IOMMU can map (the type-1 info's IOVA-range capability);
// empty if the kernel does not say.
std::vector<std::pair<uint64_t, uint64_t>> iova_ranges(int container_fd) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  vfio_iommu_type1_info probe{};
  probe.argsz = sizeof probe;
  if (ioctl(container_fd, VFIO_IOMMU_GET_INFO, &probe) != 0) return out;
  if (!(probe.flags & VFIO_IOMMU_INFO_CAPS) || probe.argsz <= sizeof probe) return out;
  std::vector<uint8_t> buf(probe.argsz);
  auto* info = reinterpret_cast<vfio_iommu_type1_info*>(buf.data());
  info->argsz = probe.argsz;
  if (ioctl(container_fd, VFIO_IOMMU_GET_INFO, info) != 0 || info->cap_offset == 0) return out;
  for (uint32_t off = info->cap_offset; off != 0 && off + sizeof(vfio_info_cap_header) <= buf.size();) {
    const auto* hdr = reinterpret_cast<const vfio_info_cap_header*>(buf.data() + off);
    if (hdr->id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE &&
        off + sizeof(vfio_iommu_type1_info_cap_iova_range) <= buf.size()) {
      const auto* cap = reinterpret_cast<const vfio_iommu_type1_info_cap_iova_range*>(hdr);
      for (uint32_t i = 0; i < cap->nr_iovas; ++i) {
        if (off + sizeof *cap + (i + 1) * sizeof(vfio_iova_range) > buf.size()) break;
        out.emplace_back(cap->iova_ranges[i].start, cap->iova_ranges[i].end);
      }
    }
    if (hdr->next <= off) break;
    off = hdr->next;
  }
  return out;
}

// What the process has open, by key. Entries expire with their last user.
std::mutex g_mu;
std::vector<std::pair<std::pair<MemoryRegistry*, std::string>, std::weak_ptr<VfioContainer>>>
    g_containers;
std::vector<std::pair<std::pair<std::string, int>, std::weak_ptr<VfioGroup>>> g_groups;

template <typename Map, typename Key>
auto live(Map& map, const Key& key) -> decltype(map.front().second.lock()) {
  map.erase(std::remove_if(map.begin(), map.end(), [](const auto& e) { return e.second.expired(); }),
            map.end());
  for (const auto& [k, weak] : map)
    if (k == key) return weak.lock();
  return nullptr;
}

}  // namespace

Result<std::shared_ptr<VfioContainer>> VfioContainer::of(MemoryRegistry& registry,
                                                         const std::string& vfio_root) {
  std::lock_guard lock(g_mu);
  const auto key = std::make_pair(&registry, vfio_root);
  if (auto c = live(g_containers, key)) return c;
  const int fd = ::open((vfio_root + "/vfio").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return make_error(e, vfio_root + "/vfio: " + errno_text(e) +
                             " (is the vfio module loaded? run as root)");
  }
  if (ioctl(fd, VFIO_GET_API_VERSION) != VFIO_API_VERSION) {
    ::close(fd);
    return make_error(EINVAL, "unknown VFIO API version");
  }
  const bool v2 = ioctl(fd, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) == 1;
  if (!v2 && ioctl(fd, VFIO_CHECK_EXTENSION, VFIO_TYPE1_IOMMU) != 1) {
    ::close(fd);
    return make_error(ENOTSUP, "the kernel offers no type-1 IOMMU for VFIO");
  }
  std::shared_ptr<VfioContainer> c(new VfioContainer(registry, fd, v2));
  g_containers.emplace_back(key, c);
  return c;
}

VfioContainer::~VfioContainer() {
  if (listening_) registry_.remove_listener(this);
  ::close(fd_);  // the kernel drops every mapping (and unpins) with the last reference
}

std::string VfioContainer::joined(uint64_t iova_limit) {
  std::lock_guard join(join_mu_);
  {
    std::lock_guard lock(mu_);
    if (!iommu_set_) {
      if (ioctl(fd_, VFIO_SET_IOMMU, v2_ ? VFIO_TYPE1v2_IOMMU : VFIO_TYPE1_IOMMU) != 0) {
        return "setting the container's type-1 IOMMU: " + errno_text(errno);
      }
      iommu_set_ = true;
    }
    iova_ranges_ = iova_ranges(fd_);  // the kernel narrows them as domains join
    if (iova_limit != 0) {
      for (const auto& [iova, size] : maps_) {
        if (iova + size > iova_limit) {
          char text[200];
          std::snprintf(text, sizeof text, "the container already maps IOVA %#llx+%#llx, beyond "
                        "this device's IOMMU (up to %#llx)", static_cast<unsigned long long>(iova),
                        static_cast<unsigned long long>(size),
                        static_cast<unsigned long long>(iova_limit - 1));
          return text;
        }
      }
      iova_limit_ = iova_limit_ == 0 ? iova_limit : std::min(iova_limit_, iova_limit);
    }
    if (listening_) return "";  // the kernel replays the mappings into the new group's domain
  }
  // Maps every region now; later ones as they come (a region it cannot map is refused).
  if (std::string e = registry_.add_listener(this); !e.empty()) return e;
  std::lock_guard lock(mu_);
  listening_ = true;
  return "";
}

uint64_t VfioContainer::mappings() const {
  std::lock_guard lock(mu_);
  return maps_.size();
}

bool VfioContainer::reachable(uint64_t iova, uint64_t size) const {
  const bool in_ranges =
      iova_ranges_.empty() || std::any_of(iova_ranges_.begin(), iova_ranges_.end(), [&](const auto& r) {
        return iova >= r.first && size > 0 && iova + size - 1 <= r.second;
      });
  return in_ranges && (iova_limit_ == 0 || iova + size <= iova_limit_);
}

std::string VfioContainer::on_region_added(const MemoryRegion& region) {
  vfio_iommu_type1_dma_map map{};
  map.argsz = sizeof map;
  map.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
  map.vaddr = reinterpret_cast<uint64_t>(region.vaddr);
  map.iova = region.iova;
  map.size = region.length;
  std::lock_guard lock(mu_);
  const bool reach = reachable(map.iova, map.size);
  if (reach && ioctl(fd_, VFIO_IOMMU_MAP_DMA, &map) == 0) {
    maps_.emplace_back(region.iova, region.length);
    return "";
  }
  // No device of the container can reach this region: the allocation (or the device's
  // set-up) fails, saying why.
  char text[240];
  const auto iova = static_cast<unsigned long long>(map.iova);
  const auto size = static_cast<unsigned long long>(map.size);
  if (reach) {
    std::snprintf(text, sizeof text, "VFIO_IOMMU_MAP_DMA of %#llx+%#llx: %s (locked-memory "
                  "limit? ulimit -l)", iova, size, std::strerror(errno));
  } else {
    std::snprintf(text, sizeof text, "IOVA %#llx+%#llx is beyond what the IOMMU maps (up to "
                  "%#llx)", iova, size,
                  static_cast<unsigned long long>(iova_limit_ ? iova_limit_ - 1
                                                  : iova_ranges_.back().second));
  }
  return text;
}

void VfioContainer::on_region_removed(const MemoryRegion& region) {
  std::lock_guard lock(mu_);
  auto it = std::find(maps_.begin(), maps_.end(), std::make_pair(region.iova, uint64_t{region.length}));
  if (it == maps_.end()) return;
  vfio_iommu_type1_dma_unmap unmap{};
  unmap.argsz = sizeof unmap;
  unmap.iova = region.iova;
  unmap.size = region.length;
  ioctl(fd_, VFIO_IOMMU_UNMAP_DMA, &unmap);
  maps_.erase(it);
}

Result<std::shared_ptr<VfioGroup>> VfioGroup::open(int number, const std::string& vfio_root,
                                                   std::shared_ptr<VfioContainer> container,
                                                   const std::string& for_device) {
  std::lock_guard lock(g_mu);
  const auto key = std::make_pair(vfio_root, number);
  if (auto g = live(g_groups, key)) {
    if (&g->container() != container.get()) {
      return make_error(EBUSY, "IOMMU group " + std::to_string(number) +
                                   " is in use with another memory registry's container");
    }
    return g;
  }
  const std::string path = vfio_root + "/" + std::to_string(number);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return make_error(e, path + ": " + errno_text(e) +
                             (e == ENOENT   ? " (bind the device to vfio-pci: pollux-setup bind " +
                                                  for_device + ")"
                              : e == EBUSY ? " (another process holds the group)"
                                           : ""));
  }
  vfio_group_status status{};
  status.argsz = sizeof status;
  if (ioctl(fd, VFIO_GROUP_GET_STATUS, &status) != 0 || !(status.flags & VFIO_GROUP_FLAGS_VIABLE)) {
    ::close(fd);
    return make_error(EPERM, "IOMMU group " + std::to_string(number) +
                                 " is not viable: every device in it must be bound to vfio-pci "
                                 "(see /sys/kernel/iommu_groups/" + std::to_string(number) +
                                 "/devices)");
  }
  const int cfd = container->fd();
  if (ioctl(fd, VFIO_GROUP_SET_CONTAINER, &cfd) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, "attaching IOMMU group " + std::to_string(number) +
                             " to the container: " + errno_text(e));
  }
  std::shared_ptr<VfioGroup> g(new VfioGroup(fd, std::move(container)));
  g_groups.emplace_back(key, g);
  return g;
}

VfioGroup::~VfioGroup() { ::close(fd_); }  // leaves the container (its domain's maps go)

}  // namespace pollux::env
