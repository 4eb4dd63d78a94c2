#include "emulator/nvme/dma_space.h"

#include <algorithm>

namespace pollux::emu::nvme {

DmaSpace::~DmaSpace() = default;

bool RegionDmaSpace::add_region(uint64_t iova, void* host, size_t len) {
  if (len == 0 || host == nullptr || iova + len < iova) return false;
  auto it = std::lower_bound(regions_.begin(), regions_.end(), iova,
                             [](const Region& r, uint64_t a) { return r.iova < a; });
  if (it != regions_.end() && it->iova < iova + len) return false;
  if (it != regions_.begin()) {
    auto prev = std::prev(it);
    if (prev->iova + prev->len > iova) return false;
  }
  regions_.insert(it, Region{iova, len, static_cast<uint8_t*>(host)});
  last_ = 0;
  return true;
}

bool RegionDmaSpace::remove_region(uint64_t iova) {
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [iova](const Region& r) { return r.iova == iova; });
  if (it == regions_.end()) return false;
  regions_.erase(it);
  last_ = 0;
  return true;
}

uint8_t* RegionDmaSpace::translate(uint64_t iova, size_t len) {
  if (iova + len < iova) return nullptr;
  if (last_ < regions_.size()) {
    const Region& r = regions_[last_];
    if (iova >= r.iova && iova + len <= r.iova + r.len) return r.host + (iova - r.iova);
  }
  // Last region whose start is <= iova.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), iova,
                             [](uint64_t a, const Region& r) { return a < r.iova; });
  if (it == regions_.begin()) return nullptr;
  --it;
  if (iova + len > it->iova + it->len) return nullptr;
  last_ = static_cast<size_t>(it - regions_.begin());
  return it->host + (iova - it->iova);
}

}  // namespace pollux::emu::nvme
