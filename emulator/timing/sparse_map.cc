#include "emulator/timing/sparse_map.h"

namespace pollux::emu::timing {

void SparseMap::grow() {
  const size_t cap = slots_ ? (mask_ + 1) * 2 : 1024;
  std::unique_ptr<Slot[]> old = std::move(slots_);
  const size_t old_cap = old ? mask_ + 1 : 0;
  slots_ = std::make_unique<Slot[]>(cap);  // value-initialised: all empty
  mask_ = cap - 1;
  for (size_t i = 0; i < old_cap; ++i) {
    if (old[i].key == 0) continue;
    size_t j = home(old[i].key - 1);
    while (slots_[j].key) j = (j + 1) & mask_;
    slots_[j] = old[i];
  }
}

void SparseMap::set(uint64_t key, uint32_t value) {
  if (size_) {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key + 1) {
        if (value) {
          s.value = value;
        } else {
          erase_at(i);
        }
        return;
      }
      if (s.key == 0) break;
    }
  }
  if (value == 0) return;
  if (!slots_ || (size_ + 1) * 4 > (mask_ + 1) * 3) grow();
  size_t i = home(key);
  while (slots_[i].key) i = (i + 1) & mask_;
  slots_[i] = Slot{key + 1, value};
  ++size_;
}

void SparseMap::erase_at(size_t hole) {
  // Backward-shift deletion (no tombstones): a later member of the probe run moves into the
  // hole unless its home lies in (hole, i], cyclically.
  for (size_t i = (hole + 1) & mask_; slots_[i].key; i = (i + 1) & mask_) {
    const size_t h = home(slots_[i].key - 1);
    const bool home_after_hole = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
    if (home_after_hole) continue;
    slots_[hole] = slots_[i];
    hole = i;
  }
  slots_[hole] = Slot{0, 0};
  --size_;
}

}  // namespace pollux::emu::timing
