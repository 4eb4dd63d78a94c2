// A uint64 -> uint32 map that reads 0 for any key never set (or set to 0), with memory in
// proportion to the keys holding a non-zero value: 16 B slots, open addressing, at most 3/4
// full. The FTL's forward map: random writes over a large drive touch one LPN per 4 KiB of a
// dense table, but one slot here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pollux::emu::timing {

class SparseMap {
 public:
  uint32_t get(uint64_t key) const {
    if (size_ == 0) return 0;
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key + 1) return s.value;
      if (s.key == 0) return 0;
    }
  }
  void set(uint64_t key, uint32_t value);
  size_t size() const { return size_; }
  size_t memory_bytes() const { return slots_ ? (mask_ + 1) * sizeof(Slot) : 0; }

  // m[k] reads like a uint32_t and assigns through set().
  class Ref {
   public:
    Ref(SparseMap& m, uint64_t k) : m_(m), k_(k) {}
    operator uint32_t() const { return m_.get(k_); }  // NOLINT(google-explicit-constructor)
    Ref& operator=(uint32_t v) {
      m_.set(k_, v);
      return *this;
    }

   private:
    SparseMap& m_;
    uint64_t k_;
  };
  Ref operator[](uint64_t key) { return Ref(*this, key); }
  uint32_t operator[](uint64_t key) const { return get(key); }

 private:
  struct Slot {
    uint64_t key;  // key + 1; 0: empty
    uint32_t value;
  };
  size_t home(uint64_t key) const {
    uint64_t z = key + 0x9e3779b97f4a7c15ull;  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>(z ^ (z >> 31)) & mask_;
  }
  void grow();
  void erase_at(size_t hole);

  std::unique_ptr<Slot[]> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pollux::emu::timing
