// An open-addressing hash table from a block index to what the memory store keeps for that
// block: 24 bytes per slot, no allocation per entry, so a namespace of any size costs memory
// in proportion to the blocks written, not to its capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pollux::emu::nvme {

class BlockTable {
 public:
  // What a block holds. kPattern*: the data pattern (common/data_pattern.h) of `a` = the LBA
  // of the block's first pattern block and `b` = the generation, in 512 B or 4 KiB pattern
  // blocks. kBytes: `a` is a pointer to the block's bytes, owned by the store.
  enum Kind : uint64_t { kBytes = 0, kPattern512 = 1, kPattern4096 = 2 };
  struct Slot {
    uint64_t key;  // 0: empty; else (block + 1) | kind << kKindShift
    uint64_t a, b;
    Kind kind() const { return static_cast<Kind>(key >> kKindShift); }
    uint64_t block() const { return (key & kBlockMask) - 1; }
    uint8_t* bytes() const { return reinterpret_cast<uint8_t*>(a); }
  };
  static constexpr unsigned kKindShift = 62;
  static constexpr uint64_t kBlockMask = (uint64_t{1} << kKindShift) - 1;

  BlockTable() = default;

  // The slot of `block`, or nullptr. Valid until the next insert or erase.
  Slot* find(uint64_t block) const {
    if (size_ == 0) return nullptr;
    const uint64_t want = block + 1;
    for (size_t i = home(block);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == 0) return nullptr;
      if ((s.key & kBlockMask) == want) return &s;
    }
  }
  // Adds `block` (not present) and returns its slot; nullptr if memory ran out.
  Slot* insert(uint64_t block, Kind kind, uint64_t a, uint64_t b);
  // Removes the slot (from find or insert); the caller frees what it pointed to.
  void erase(Slot* s);
  void clear();

  template <typename F>
  void for_each(F f) const {
    for (size_t i = 0; size_ && i <= mask_; ++i) {
      if (slots_[i].key) f(slots_[i]);
    }
  }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_ ? mask_ + 1 : 0; }
  size_t memory_bytes() const { return capacity() * sizeof(Slot); }

 private:
  size_t home(uint64_t block) const {
    uint64_t z = block + 0x9e3779b97f4a7c15ull;  // splitmix64's finaliser: spreads strides
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>(z ^ (z >> 31)) & mask_;
  }
  bool grow();

  std::unique_ptr<Slot[]> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pollux::emu::nvme
