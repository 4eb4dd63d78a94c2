// Pinned, page-aligned memory that devices may DMA to, registered in a MemoryRegistry.
// Backed by 2 MiB hugepages (hugetlbfs memfd) when the system has them reserved, else by a
// locked memfd. A memfd either way, so a device in another process (vfio-user) can map it.
// Its IOVA is the registry's choice (memory_registry.h: the virtual address, or compact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "driver/env/memory_registry.h"
#include "driver/env/result.h"

namespace pollux::env {

enum class Backing {
  kHugetlb2M,      // 2 MiB hugepages: pinned by the kernel, physically contiguous per page
  kMemfdLocked,    // 4 KiB pages, mlock()ed
  kMemfdUnlocked,  // 4 KiB pages, mlock() refused (RLIMIT_MEMLOCK): may be swapped
};
const char* to_string(Backing b);

struct DmaOptions {
  bool allow_hugepages = true;
};

class DmaRegion {
 public:
  // Maps `size` bytes (rounded up to the page size of the backing) and registers them. The
  // pages are populated and locked at once, so more than the machine has available is
  // refused up front (-ENOMEM) — populating it would only end in the OOM killer.
  static Result<std::unique_ptr<DmaRegion>> create(MemoryRegistry& registry, std::size_t size,
                                                   DmaOptions options = {});
  ~DmaRegion();
  DmaRegion(const DmaRegion&) = delete;
  DmaRegion& operator=(const DmaRegion&) = delete;

  void* data() const { return base_; }
  std::size_t size() const { return size_; }
  uint64_t iova() const { return iova_; }
  int fd() const { return fd_; }
  Backing backing() const { return backing_; }

 private:
  DmaRegion(MemoryRegistry& registry, void* base, std::size_t size, uint64_t iova, int fd,
            Backing backing)
      : registry_(registry), base_(base), size_(size), iova_(iova), fd_(fd), backing_(backing) {}
  MemoryRegistry& registry_;
  void* base_;
  std::size_t size_;
  uint64_t iova_;
  int fd_;
  Backing backing_;
};

// Number of free 2 MiB hugepages the kernel has reserved (0 when none or unknown).
std::size_t free_hugepages_2m();
// Memory the kernel could give without swapping (MemAvailable), or SIZE_MAX when unknown.
std::size_t available_memory_bytes();

}  // namespace pollux::env
