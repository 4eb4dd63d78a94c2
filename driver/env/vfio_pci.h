// A PciDevice on real hardware through the kernel's vfio-pci driver (Documentation/driver-api/
// vfio.rst): the device's IOMMU group in the registry's type-1 container (vfio_container.h:
// shared by every device, so each region is mapped once), the device fd.
//
// At open: the group must be viable (every device in it bound to vfio-pci); the container gets
// the type-1 (v2) IOMMU; BAR0 is mmapped (or the parts the kernel lets us map: the MSI-X table
// may be excluded, see the sparse-mmap capability), config space is the config region, bus
// mastering is switched on. DMA: every region of the MemoryRegistry (and each one added
// later) is mapped with VFIO_IOMMU_MAP_DMA at IOVA = region.iova, and unmapped before the
// registry lets it go. reset() is VFIO_DEVICE_RESET (a function-level reset or what the kernel
// has instead).
//
// Removal: the kernel asks for the device back (PCIe hot-unplug, unbind) by signalling the
// request eventfd (VFIO_PCI_REQ_IRQ_INDEX); probe_removed() reads it and sets
// removal_requested(): the device still works, so the driver disables it (no more DMA), then
// finish_removal() makes it removed(), the driver fails what is outstanding and lets go
// (closing the device fd is what lets the kernel finish the removal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver/env/memory_registry.h"
#include "driver/env/pci_device.h"
#include "driver/env/result.h"
#include "driver/env/vfio_container.h"

namespace pollux::env {

struct VfioPciOptions {
  std::string sysfs_root = "/sys/bus/pci/devices";  // tests point it elsewhere
  std::string vfio_root = "/dev/vfio";
};

// "0000:01:00.0" (domain:bus:device.function, hex). Also accepts "01:00.0" (domain 0).
Result<std::string> normalise_bdf(const std::string& text);

// The IOMMU group of a PCI function from sysfs (the iommu_group link), or an error saying
// why there is none (no such device; no IOMMU: boot with intel_iommu=on / amd_iommu=on).
Result<int> iommu_group_of(const std::string& bdf, const std::string& sysfs_root);

// True if the PCI function exists and vfio-pci is its driver (a hot-plug poller's "present").
bool vfio_pci_bound(const std::string& bdf, const std::string& sysfs_root = "/sys/bus/pci/devices");

class VfioPciDevice final : public PciDevice {
 public:
  // `address`: "0000:01:00.0", "pcie:0000:01:00.0" or "trtype:pcie traddr:0000:01:00.0".
  static Result<std::unique_ptr<VfioPciDevice>> open(const std::string& address,
                                                     MemoryRegistry& registry,
                                                     const VfioPciOptions& options = {});
  ~VfioPciDevice() override;

  int config_read(uint32_t offset, void* buf, std::size_t len) override;
  int config_write(uint32_t offset, const void* buf, std::size_t len) override;
  int bar_read(int bar, uint64_t offset, void* buf, std::size_t len) override;
  int bar_write(int bar, uint64_t offset, const void* buf, std::size_t len) override;
  volatile void* bar_map(int bar, uint64_t offset, std::size_t len) override;
  int reset() override;
  bool probe_removed() override;  // reads the request eventfd (non-blocking): removal_requested()
  std::string address() const override { return "pcie:" + bdf_; }

  uint64_t dma_mappings() const;  // regions its container maps in the IOMMU now

 private:
  struct Bar {
    uint64_t size = 0;
    uint64_t offset = 0;  // of the region in the device fd
    struct Mapped {
      uint64_t offset, size;  // within the BAR
      void* addr;
    };
    std::vector<Mapped> maps;
  };
  VfioPciDevice(std::string bdf, MemoryRegistry& registry) : bdf_(std::move(bdf)), registry_(registry) {}
  // 0, or a negative errno with *why set.
  int set_up(const VfioPciOptions& o, std::string* why);
  int map_bar(int index, std::string* why);
  void* mapped(int bar, uint64_t offset, std::size_t len) const;

  std::string bdf_;
  MemoryRegistry& registry_;
  std::shared_ptr<VfioGroup> group_;  // and through it the container shared by every device
  int device_fd_ = -1, req_fd_ = -1;
  uint64_t config_offset_ = 0;
  Bar bars_[6];
  bool can_reset_ = false;
};

}  // namespace pollux::env
