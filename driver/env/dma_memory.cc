#include "driver/env/dma_memory.h"

#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

namespace pollux::env {
namespace {

constexpr std::size_t k4K = 4096;
constexpr std::size_t k2M = 2u << 20;

std::size_t round_up(std::size_t v, std::size_t align) { return (v + align - 1) / align * align; }

std::string gib(std::size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(bytes) / double(1u << 30));
  return b;
}

// Maps a memfd of `size` bytes; returns MAP_FAILED (and closes fd) on failure.
void* map_memfd(unsigned int flags, std::size_t size, int* fd_out) {
  const int fd = memfd_create("pollux-dma", MFD_CLOEXEC | flags);
  if (fd < 0) return MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return MAP_FAILED;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return MAP_FAILED;
  }
  *fd_out = fd;
  return p;
}

// Regions given back, kept mapped for the next create() of the same size and backing — as
// SPDK's env keeps freed DMA memory in its heap instead of returning it to the kernel. A
// program that makes and frees regions over and over (bdevs created and deleted, a target per
// test or per fuzz input) then pays a memset instead of memfd_create + mmap + populate + mlock
// + munmap + the kernel's page freeing. Bounded: regions up to kCachedRegionMax, kCacheBytes in
// all, the oldest reused first. While cached a region is PROT_NONE, so a stale pointer into it
// still faults as after a munmap.
class RegionCache {
 public:
  struct Entry {
    void* base = nullptr;
    std::size_t size = 0;
    int fd = -1;
    Backing backing = Backing::kMemfdLocked;
    uint64_t age = 0;  // 0: empty
  };
  static constexpr std::size_t kCachedRegionMax = 16u << 20;
  static constexpr std::size_t kCacheBytes = 64u << 20;

  static RegionCache& instance() {
    static RegionCache* c = new RegionCache;  // never destroyed: regions may die at exit
    return *c;
  }
  // A cached region of exactly `size` bytes whose backing `hugepages` allows, readable and
  // zeroed again; false if none.
  bool take(std::size_t size, bool hugepages, Entry* out) {
    std::lock_guard lock(mu_);
    Entry* best = nullptr;
    for (Entry& e : entries_) {
      if (e.age == 0 || e.size != size || (!hugepages && e.backing == Backing::kHugetlb2M))
        continue;
      if (best == nullptr || e.age < best->age) best = &e;
    }
    if (best == nullptr) return false;
    if (mprotect(best->base, best->size, PROT_READ | PROT_WRITE) != 0) return false;
    *out = *best;
    *best = Entry{};
    bytes_ -= out->size;
    std::memset(out->base, 0, out->size);
    return true;
  }
  // Keeps the region (true) or leaves it to the caller to unmap (false: too big, cache full).
  bool give(void* base, std::size_t size, int fd, Backing backing) {
    if (size > kCachedRegionMax) return false;
    std::lock_guard lock(mu_);
    if (bytes_ + size > kCacheBytes) return false;
    for (Entry& e : entries_) {
      if (e.age != 0) continue;
      if (mprotect(base, size, PROT_NONE) != 0) return false;
      e = Entry{base, size, fd, backing, ++clock_};
      bytes_ += size;
      return true;
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::array<Entry, 32> entries_{};  // no allocation: a fuzz input's heap stays balanced
  std::size_t bytes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace

const char* to_string(Backing b) {
  switch (b) {
    case Backing::kHugetlb2M: return "hugetlb-2MiB";
    case Backing::kMemfdLocked: return "memfd-locked";
    case Backing::kMemfdUnlocked: return "memfd-unlocked";
  }
  return "unknown";
}

std::size_t free_hugepages_2m() {
  std::ifstream in("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  std::size_t n = 0;
  return (in >> n) ? n : 0;
}

std::size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return SIZE_MAX;
}

Result<std::unique_ptr<DmaRegion>> DmaRegion::create(MemoryRegistry& registry, std::size_t size,
                                                     DmaOptions options) {
  if (size == 0) return make_error(EINVAL, "DMA region of size 0");
  if (size > SIZE_MAX / 2) return make_error(ENOMEM, "DMA region too large");  // rounding fits
  int fd = -1;
  void* base = MAP_FAILED;
  Backing backing = Backing::kMemfdLocked;
  std::size_t mapped = 0;

  // A region given back earlier, of a size this request maps to: 4 KiB pages' rounding, or
  // 2 MiB pages' when hugepages are allowed (either backing serves then).
  RegionCache::Entry cached;
  if (RegionCache::instance().take(round_up(size, k4K), options.allow_hugepages, &cached) ||
      (options.allow_hugepages &&
       RegionCache::instance().take(round_up(size, k2M), true, &cached))) {
    base = cached.base;
    mapped = cached.size;
    fd = cached.fd;
    backing = cached.backing;
  }
  // Hugepages are only tried when enough are free: a MAP_POPULATE that runs short would
  // otherwise raise SIGBUS on first touch instead of failing here.
  if (base == MAP_FAILED && options.allow_hugepages &&
      free_hugepages_2m() * k2M >= round_up(size, k2M)) {
    mapped = round_up(size, k2M);
    base = map_memfd(MFD_HUGETLB | MFD_HUGE_2MB, mapped, &fd);
    backing = Backing::kHugetlb2M;
  }
  if (base == MAP_FAILED) {
    mapped = round_up(size, k4K);
    if (const std::size_t avail = available_memory_bytes(); mapped > avail) {
      return make_error(ENOMEM, "cannot map " + gib(mapped) + " of DMA memory: " + gib(avail) +
                                    " available");
    }
    base = map_memfd(0, mapped, &fd);
    if (base == MAP_FAILED) {
      return make_error(errno, std::string("cannot map DMA memory: ") + std::strerror(errno));
    }
    backing = mlock(base, mapped) == 0 ? Backing::kMemfdLocked : Backing::kMemfdUnlocked;
  }

  MemoryRegion region{base, mapped, kInvalidIova, fd, 0};
  uint64_t iova = 0;
  std::string why;
  if (const int rc = registry.add(region, &iova, &why); rc != 0) {
    if (!RegionCache::instance().give(base, mapped, fd, backing)) {
      munmap(base, mapped);
      close(fd);
    }
    return make_error(-rc, "cannot register DMA region" + (why.empty() ? "" : ": " + why));
  }
  return std::unique_ptr<DmaRegion>(new DmaRegion(registry, base, mapped, iova, fd, backing));
}

DmaRegion::~DmaRegion() {
  registry_.remove(base_);
  if (RegionCache::instance().give(base_, size_, fd_, backing_)) return;
  munmap(base_, size_);
  close(fd_);
}

}  // namespace pollux::env
