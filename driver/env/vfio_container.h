// The VFIO container and groups that vfio-pci devices share (Documentation/driver-api/vfio.rst).
//
// One type-1 container per MemoryRegistry, as DPDK and SPDK keep one: every region of the
// registry is mapped with VFIO_IOMMU_MAP_DMA once (and pinned once, against the locked-memory
// limit) however many drives there are; when another group joins, the kernel replays the
// mappings into its IOMMU domain. A group is opened once per process (a second open is
// EBUSY) and shared by the devices in it. Both live while a device uses them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver/env/memory_registry.h"
#include "driver/env/result.h"

namespace pollux::env {

class VfioContainer final : private RegionListener {
 public:
  // The registry's container (opened from vfio_root/vfio on first use).
  static Result<std::shared_ptr<VfioContainer>> of(MemoryRegistry& registry,
                                                   const std::string& vfio_root);
  ~VfioContainer() override;
  VfioContainer(const VfioContainer&) = delete;
  VfioContainer& operator=(const VfioContainer&) = delete;

  int fd() const { return fd_; }
  // A group has just joined: the first one sets the type-1 IOMMU, then the container maps
  // every region (now and as they come). iova_limit: the group's IOMMU maps IOVAs below it (0:
  // no narrower than the kernel says). "" or why the group cannot use this container's
  // mappings.
  std::string joined(uint64_t iova_limit);
  uint64_t mappings() const;  // regions mapped now

 private:
  VfioContainer(MemoryRegistry& registry, int fd, bool v2) : registry_(registry), fd_(fd), v2_(v2) {}
  std::string on_region_added(const MemoryRegion& region) override;
  void on_region_removed(const MemoryRegion& region) override;
  bool reachable(uint64_t iova, uint64_t size) const;  // mu_ held

  MemoryRegistry& registry_;
  const int fd_;
  const bool v2_;
  bool iommu_set_ = false, listening_ = false;
  std::mutex join_mu_;  // one join at a time (taken before the registry's lock, then mu_)
  mutable std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> maps_;         // (iova, size)
  std::vector<std::pair<uint64_t, uint64_t>> iova_ranges_;  // what the IOMMU maps: [start, end]
  uint64_t iova_limit_ = 0;  // the narrowest joined unit's reach (0: none narrower)
};

class VfioGroup {
 public:
  // The process's handle of IOMMU group `number`, attached to `container`; "" or why not
  // (not bound to vfio-pci, not viable, in another container).
  // for_device: the PCI address the caller wants (named in the hints).
  static Result<std::shared_ptr<VfioGroup>> open(int number, const std::string& vfio_root,
                                                 std::shared_ptr<VfioContainer> container,
                                                 const std::string& for_device);
  ~VfioGroup();
  VfioGroup(const VfioGroup&) = delete;
  VfioGroup& operator=(const VfioGroup&) = delete;

  int fd() const { return fd_; }
  VfioContainer& container() { return *container_; }

 private:
  VfioGroup(int fd, std::shared_ptr<VfioContainer> c) : fd_(fd), container_(std::move(c)) {}
  const int fd_;
  std::shared_ptr<VfioContainer> container_;  // outlives the group: it detaches on close
};

}  // namespace pollux::env
