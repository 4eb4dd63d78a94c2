// The NIC's only window onto host memory: device addresses (IOVAs) in, pointers out, or
// nullptr when the range is not wholly inside one DMA mapping (an IOMMU fault on real
// hardware). The vfio-user device implements it over the client's DMA_MAPs and refuses DMA
// while bus mastering is off; tests may use an identity map.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::emu::rnic {

class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual uint8_t* translate(uint64_t iova, std::size_t len) = 0;
};

// Host addresses are IOVAs: for tests that drive the NIC without an IOMMU in between.
class IdentityHostMemory final : public HostMemory {
 public:
  uint8_t* translate(uint64_t iova, std::size_t) override {
    return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(iova));
  }
};

}  // namespace pollux::emu::rnic
