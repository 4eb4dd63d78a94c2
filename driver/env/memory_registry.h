// The registry of DMA-able memory regions. Device backends (the emulated device over
// vfio-user, vfio-pci) listen to it and map every region into the device's address space,
// including regions added after they attached; a region a device cannot map is not added.
//
// The registry also gives each region its IOVA (the address devices use for it), by mode:
//   va       IOVA = virtual address (SPDK's iova=va): the IOMMU must map 48-bit addresses;
//   compact  IOVAs handed out from 4 GiB up, 2 MiB aligned: fits IOMMUs of 39 bits and more;
//   auto     (the default) va, until a device whose IOMMU is narrower opens while no region
//            is registered yet: then compact.
// The process-wide registry takes its mode from POLLUX_IOVA_MODE (va, compact; unset: auto).
//
// Lookups (translate) are lock-free: readers see an immutable snapshot; writers, which are
// rare and off the hot path, copy, modify and publish under a mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pollux::env {

inline constexpr uint64_t kInvalidIova = ~0ull;

enum class IovaMode { kAuto, kVirtualAddress, kCompact };
const char* to_string(IovaMode m);
// "va", "compact" or "auto" (or "": auto); false for anything else.
bool parse_iova_mode(const std::string& text, IovaMode* out);

struct MemoryRegion {
  void* vaddr = nullptr;
  std::size_t length = 0;
  uint64_t iova = kInvalidIova;  // the address a device uses; kInvalidIova: the registry's choice
  int fd = -1;           // backing file (memfd), so another process can map it; -1 if none
  uint64_t fd_offset = 0;

  bool contains(const void* p, std::size_t len) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto base = reinterpret_cast<uintptr_t>(vaddr);
    return a >= base && len <= length && a - base <= length - len;
  }
};

// A reader's memo of the region it found last (e.g. a queue pair's: its buffers mostly come
// from one pool). It stays right while the registry publishes no new snapshot — snapshots are
// immutable and kept until the registry dies, so one cannot come back at the same address —
// making a hit one atomic load and two compares. Owned by one thread, never shared.
struct TranslateCache {
  const void* snapshot = nullptr;
  const MemoryRegion* region = nullptr;
};

class RegionListener {
 public:
  virtual ~RegionListener() = default;
  // Called with the registry's writer lock held: must not add or remove regions or listeners.
  // "" when the region is mapped, else why not (the region is then not added, or the
  // listener not attached).
  virtual std::string on_region_added(const MemoryRegion& region) = 0;
  virtual void on_region_removed(const MemoryRegion& region) = 0;
};

class MemoryRegistry {
 public:
  explicit MemoryRegistry(IovaMode mode = IovaMode::kAuto);
  ~MemoryRegistry();
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // The process-wide registry used by default.
  static MemoryRegistry& global();

  // 0, or -EINVAL (empty/null), -EEXIST (overlaps a registered region) or -EIO (a listener
  // could not map it: *why says why). *iova: the IOVA it was given.
  int add(const MemoryRegion& region, uint64_t* iova = nullptr, std::string* why = nullptr);
  // 0, or -ENOENT when no region starts at vaddr. Listeners hear of it before it is dropped.
  int remove(void* vaddr);

  // A new listener is told about every region already registered: "" or why one of them
  // could not be mapped (then the listener is not attached and keeps no mapping).
  std::string add_listener(RegionListener* listener);
  void remove_listener(RegionListener* listener);

  // IOVA of [p, p+len) if it lies inside one registered region, else kInvalidIova.
  uint64_t translate(const void* p, std::size_t len) const;
  // The same, trying the region `cache` found last first (the hot path's form).
  uint64_t translate(const void* p, std::size_t len, TranslateCache& cache) const {
    const Snapshot* s = current_.load(std::memory_order_acquire);
    if (s != cache.snapshot || cache.region == nullptr || !cache.region->contains(p, len)) {
      cache.snapshot = s;
      cache.region = lookup(*s, p);
      if (cache.region == nullptr || !cache.region->contains(p, len)) return kInvalidIova;
    }
    return cache.region->iova +
           (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(cache.region->vaddr));
  }
  // A copy of the region holding p, or an empty region (length 0).
  MemoryRegion find(const void* p) const;
  std::vector<MemoryRegion> regions() const;

  IovaMode iova_mode() const;
  // 0, or -EBUSY: regions are registered under another scheme (their IOVAs cannot change).
  int set_iova_mode(IovaMode mode);

 private:
  using Snapshot = std::vector<MemoryRegion>;  // sorted by vaddr, non-overlapping
  const MemoryRegion* lookup(const Snapshot& s, const void* p) const;
  void publish(std::unique_ptr<Snapshot> next);
  uint64_t assign_iova(const Snapshot& s, const MemoryRegion& region) const;  // writer lock held

  std::atomic<const Snapshot*> current_;
  mutable std::mutex writer_mu_;
  // Retired snapshots stay alive until the registry dies: readers never take a lock, so we
  // cannot know when the last one stopped looking. Region changes are rare (set-up time).
  std::vector<std::unique_ptr<Snapshot>> snapshots_;
  std::vector<RegionListener*> listeners_;
  IovaMode iova_mode_;
};

}  // namespace pollux::env
