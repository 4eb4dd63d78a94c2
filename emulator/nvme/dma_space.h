// The controller's only window onto host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pollux::emu::nvme {

// Translates a device address (IOVA) range into a host pointer. The controller touches host
// memory only through this. A range that is not wholly inside one mapped region yields nullptr;
// the controller then fails the command (Data Transfer Error) and counts an IOMMU fault.
class DmaSpace {
 public:
  virtual ~DmaSpace();
  virtual uint8_t* translate(uint64_t iova, size_t len) = 0;
};

// A table of regions (iova, host pointer, length). Used by unit tests and benchmarks with an
// identity mapping (iova == host address), and usable by a transport that receives DMA
// map/unmap messages. Not thread-safe: change it only between Controller::poll() calls.
class RegionDmaSpace final : public DmaSpace {
 public:
  // Maps [iova, iova + len) to host memory at `host`. Overlapping an existing region fails.
  bool add_region(uint64_t iova, void* host, size_t len);
  // Identity mapping of a host buffer.
  bool add_host_buffer(void* host, size_t len) {
    return add_region(reinterpret_cast<uintptr_t>(host), host, len);
  }
  // Removes the region that starts at `iova`. Returns false if there is none.
  bool remove_region(uint64_t iova);
  void clear() { regions_.clear(); last_ = 0; }
  size_t region_count() const { return regions_.size(); }

  uint8_t* translate(uint64_t iova, size_t len) override;

 private:
  struct Region {
    uint64_t iova;
    uint64_t len;
    uint8_t* host;
  };
  std::vector<Region> regions_;  // sorted by iova, non-overlapping
  size_t last_ = 0;              // index of the last hit (hot-path shortcut)
};

}  // namespace pollux::emu::nvme
