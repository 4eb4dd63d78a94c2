#include "emulator/nvme/block_table.h"

#include <new>

namespace pollux::emu::nvme {

bool BlockTable::grow() {
  const size_t cap = slots_ ? (mask_ + 1) * 2 : 64;
  std::unique_ptr<Slot[]> fresh(new (std::nothrow) Slot[cap]());
  if (!fresh) return false;
  std::unique_ptr<Slot[]> old = std::move(slots_);
  const size_t old_cap = old ? mask_ + 1 : 0;
  slots_ = std::move(fresh);
  mask_ = cap - 1;
  for (size_t i = 0; i < old_cap; ++i) {
    if (old[i].key == 0) continue;
    size_t j = home(old[i].block());
    while (slots_[j].key) j = (j + 1) & mask_;
    slots_[j] = old[i];
  }
  return true;
}

BlockTable::Slot* BlockTable::insert(uint64_t block, Kind kind, uint64_t a, uint64_t b) {
  // At most 3/4 full: linear probing stays short.
  if (!slots_ || (size_ + 1) * 4 > (mask_ + 1) * 3) {
    if (!grow()) return nullptr;
  }
  size_t i = home(block);
  while (slots_[i].key) i = (i + 1) & mask_;
  slots_[i] = Slot{(block + 1) | static_cast<uint64_t>(kind) << kKindShift, a, b};
  ++size_;
  return &slots_[i];
}

void BlockTable::erase(Slot* s) {
  // Backward-shift deletion: move later members of the probe run into the hole, so lookups
  // never need tombstones.
  size_t hole = static_cast<size_t>(s - slots_.get());
  for (size_t i = (hole + 1) & mask_; slots_[i].key; i = (i + 1) & mask_) {
    const size_t h = home(slots_[i].block());
    // Slot i may move to the hole if its home is not in (hole, i] (cyclically).
    const bool home_after_hole = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
    if (home_after_hole) continue;
    slots_[hole] = slots_[i];
    hole = i;
  }
  slots_[hole] = Slot{0, 0, 0};
  --size_;
}

void BlockTable::clear() {
  slots_.reset();
  mask_ = 0;
  size_ = 0;
}

}  // namespace pollux::emu::nvme
