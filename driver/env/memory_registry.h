// The registry of DMA-able memory regions. Device backends (the emulated device over
// vfio-user, vfio-pci) listen to it and map every region into the device's address space,
// including regions added after they attached.
//
// Lookups (translate) are lock-free: readers see an immutable snapshot; writers, which are
// rare and off the hot path, copy, modify and publish under a mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pollux::env {

inline constexpr uint64_t kInvalidIova = ~0ull;

struct MemoryRegion {
  void* vaddr = nullptr;
  std::size_t length = 0;
  uint64_t iova = 0;     // the address a device uses for this memory
  int fd = -1;           // backing file (memfd), so another process can map it; -1 if none
  uint64_t fd_offset = 0;

  bool contains(const void* p, std::size_t len) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto base = reinterpret_cast<uintptr_t>(vaddr);
    return a >= base && len <= length && a - base <= length - len;
  }
};

class RegionListener {
 public:
  virtual ~RegionListener() = default;
  // Called with the registry's writer lock held: must not add or remove regions or listeners.
  virtual void on_region_added(const MemoryRegion& region) = 0;
  virtual void on_region_removed(const MemoryRegion& region) = 0;
};

class MemoryRegistry {
 public:
  MemoryRegistry();
  ~MemoryRegistry();
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // The process-wide registry used by default.
  static MemoryRegistry& global();

  // 0, or -EINVAL (empty/null) or -EEXIST (overlaps a registered region).
  int add(const MemoryRegion& region);
  // 0, or -ENOENT when no region starts at vaddr. Listeners hear of it before it is dropped.
  int remove(void* vaddr);

  // A new listener is told about every region already registered.
  void add_listener(RegionListener* listener);
  void remove_listener(RegionListener* listener);

  // IOVA of [p, p+len) if it lies inside one registered region, else kInvalidIova.
  uint64_t translate(const void* p, std::size_t len) const;
  // A copy of the region holding p, or an empty region (length 0).
  MemoryRegion find(const void* p) const;
  std::vector<MemoryRegion> regions() const;

 private:
  using Snapshot = std::vector<MemoryRegion>;  // sorted by vaddr, non-overlapping
  const MemoryRegion* lookup(const Snapshot& s, const void* p) const;
  void publish(std::unique_ptr<Snapshot> next);

  std::atomic<const Snapshot*> current_;
  mutable std::mutex writer_mu_;
  // Retired snapshots stay alive until the registry dies: readers never take a lock, so we
  // cannot know when the last one stopped looking. Region changes are rare (set-up time).
  std::vector<std::unique_ptr<Snapshot>> snapshots_;
  std::vector<RegionListener*> listeners_;
};

}  // namespace pollux::env
