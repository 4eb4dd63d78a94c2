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
// Lookups (translate, find) are lock-free: a seqlock over a table of the regions, which
// writers (rare, off the hot path) rewrite under a mutex. Nothing a reader might be looking at
// is ever freed while the registry lives, and the table only grows by doubling, so a process
// that adds and removes regions for ever (bdevs, pools, queues created and deleted) keeps a
// bounded footprint.
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
  int fd = -1;                   // backing file (memfd), so another process can map it; -1 if none
  uint64_t fd_offset = 0;

  bool contains(const void* p, std::size_t len) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto base = reinterpret_cast<uintptr_t>(vaddr);
    return a >= base && len <= length && a - base <= length - len;
  }
};

// A reader's memo of the region it found last (e.g. a queue pair's: its buffers mostly come
// from one pool): a copy, stamped with the registry's version when it was read. It stays right
// while the registry changes nothing, making a hit one atomic load and two compares. Owned by
// one thread, never shared; used with one registry (versions are unique across registries).
struct TranslateCache {
  uint64_t version = 1;  // odd: matches no registry's (a registry's are even between changes)
  uintptr_t vaddr = 0;
  std::size_t length = 0;
  uint64_t iova = kInvalidIova;

  bool contains(const void* p, std::size_t len) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= vaddr && len <= length && a - vaddr <= length - len;
  }
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
    if (version_.load(std::memory_order_acquire) != cache.version || !cache.contains(p, len)) {
      refill(p, cache);
      if (!cache.contains(p, len)) return kInvalidIova;
    }
    return cache.iova + (reinterpret_cast<uintptr_t>(p) - cache.vaddr);
  }
  // A copy of the region holding p, or an empty region (length 0).
  MemoryRegion find(const void* p) const;
  std::vector<MemoryRegion> regions() const;

  IovaMode iova_mode() const;
  // 0, or -EBUSY: regions are registered under another scheme (their IOVAs cannot change).
  int set_iova_mode(IovaMode mode);

  // Bytes of the lookup tables it holds, retired ones included (they only grow by doubling).
  std::size_t table_bytes() const;

 private:
  // One region as readers see it: every field atomic, so a reader racing a writer reads
  // values it then throws away (the version changed), never a torn object or a data race.
  struct Slot {
    std::atomic<uintptr_t> vaddr{0};
    std::atomic<std::size_t> length{0};
    std::atomic<uint64_t> iova{kInvalidIova};
    std::atomic<int> fd{-1};
    std::atomic<uint64_t> fd_offset{0};
  };
  struct Table {
    explicit Table(std::size_t cap) : capacity(cap), slots(new Slot[cap]) {}
    const std::size_t capacity;
    std::unique_ptr<Slot[]> slots;
    std::atomic<std::size_t> count{0};
  };
  // Runs f(table, version) until no writer changed the table meanwhile; f only reads.
  template <typename F>
  auto read_consistent(F f) const;
  // The region holding p into `cache` (length 0 when there is none), stamped.
  void refill(const void* p, TranslateCache& cache) const;
  // Index of the region holding p in t, or -1. Relaxed loads: the caller validates.
  static long lookup(const Table& t, std::size_t n, const void* p);
  static MemoryRegion load(const Slot& s);
  // Writes regions_ into the table readers see (growing it first if it is full).
  void publish();
  uint64_t assign_iova(const MemoryRegion& region) const;  // writer lock held

  std::atomic<uint64_t> version_;  // even: stable; odd: a writer is at work
  std::atomic<const Table*> table_{nullptr};
  std::vector<std::unique_ptr<Table>> tables_;  // the current one last; readers may hold any
  mutable std::mutex writer_mu_;
  std::vector<MemoryRegion> regions_;  // sorted by vaddr, non-overlapping; writer lock
  std::vector<RegionListener*> listeners_;
  IovaMode iova_mode_;
};

}  // namespace pollux::env
