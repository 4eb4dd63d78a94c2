#include "driver/env/memory_registry.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace pollux::env {

MemoryRegistry::MemoryRegistry(IovaMode mode) : iova_mode_(mode) {
  snapshots_.push_back(std::make_unique<Snapshot>());
  current_.store(snapshots_.back().get(), std::memory_order_release);
}

MemoryRegistry::~MemoryRegistry() = default;

namespace {
constexpr uint64_t kCompactBase = 4ull << 30;  // above the x86 MSI window at 0xfee00000
constexpr uint64_t kCompactAlign = 2ull << 20;
}  // namespace

const char* to_string(IovaMode m) {
  switch (m) {
    case IovaMode::kAuto: return "auto";
    case IovaMode::kVirtualAddress: return "va";
    case IovaMode::kCompact: return "compact";
  }
  return "?";
}

bool parse_iova_mode(const std::string& text, IovaMode* out) {
  for (IovaMode m : {IovaMode::kAuto, IovaMode::kVirtualAddress, IovaMode::kCompact}) {
    if (text == to_string(m)) {
      *out = m;
      return true;
    }
  }
  if (!text.empty()) return false;
  *out = IovaMode::kAuto;
  return true;
}

namespace {
IovaMode iova_mode_from_environment() {
  const char* env = std::getenv("POLLUX_IOVA_MODE");
  IovaMode m = IovaMode::kAuto;
  if (env != nullptr && !parse_iova_mode(env, &m)) {
    std::fprintf(stderr, "POLLUX_IOVA_MODE=%s: expected va, compact or auto; using auto\n", env);
  }
  return m;
}
}  // namespace

MemoryRegistry& MemoryRegistry::global() {
  static MemoryRegistry registry(iova_mode_from_environment());
  return registry;
}

IovaMode MemoryRegistry::iova_mode() const {
  std::lock_guard lock(writer_mu_);
  return iova_mode_;
}

int MemoryRegistry::set_iova_mode(IovaMode mode) {
  std::lock_guard lock(writer_mu_);
  const auto compact = [](IovaMode m) { return m == IovaMode::kCompact; };
  if (!current_.load(std::memory_order_acquire)->empty() && compact(mode) != compact(iova_mode_))
    return -EBUSY;
  iova_mode_ = mode;
  return 0;
}

// First fit above kCompactBase among the IOVAs in use, aligned to 2 MiB (hugepage mappings).
uint64_t MemoryRegistry::assign_iova(const Snapshot& s, const MemoryRegion& region) const {
  if (iova_mode_ != IovaMode::kCompact) return reinterpret_cast<uint64_t>(region.vaddr);
  std::vector<std::pair<uint64_t, uint64_t>> used;
  for (const MemoryRegion& r : s) used.emplace_back(r.iova, r.iova + r.length);
  std::sort(used.begin(), used.end());
  const auto align = [](uint64_t a) { return (a + kCompactAlign - 1) & ~(kCompactAlign - 1); };
  uint64_t at = kCompactBase;
  for (const auto& [start, end] : used) {
    if (end <= at) continue;
    if (start >= at + region.length) break;
    at = align(end);
  }
  return at;
}

void MemoryRegistry::publish(std::unique_ptr<Snapshot> next) {
  current_.store(next.get(), std::memory_order_release);
  snapshots_.push_back(std::move(next));
}

int MemoryRegistry::add(const MemoryRegion& region_in, uint64_t* iova, std::string* why) {
  if (region_in.vaddr == nullptr || region_in.length == 0) return -EINVAL;
  std::lock_guard lock(writer_mu_);
  const Snapshot& cur = *current_.load(std::memory_order_acquire);
  const auto start = reinterpret_cast<uintptr_t>(region_in.vaddr);
  for (const MemoryRegion& r : cur) {
    const auto rs = reinterpret_cast<uintptr_t>(r.vaddr);
    if (start < rs + r.length && rs < start + region_in.length) return -EEXIST;
  }
  MemoryRegion region = region_in;
  if (region.iova == kInvalidIova) {
    region.iova = assign_iova(cur, region);
  } else if (iova_mode_ == IovaMode::kCompact) {
    // IOVAs are not virtual addresses then: one given by the caller must not overlap ours.
    for (const MemoryRegion& r : cur)
      if (region.iova < r.iova + r.length && r.iova < region.iova + region.length) return -EEXIST;
  }
  // Devices map it before anyone can translate an address in it.
  for (size_t i = 0; i < listeners_.size(); ++i) {
    if (std::string e = listeners_[i]->on_region_added(region); !e.empty()) {
      for (size_t j = 0; j < i; ++j) listeners_[j]->on_region_removed(region);
      if (why != nullptr) *why = e;
      return -EIO;
    }
  }
  auto next = std::make_unique<Snapshot>(cur);
  next->push_back(region);
  std::sort(next->begin(), next->end(),
            [](const MemoryRegion& a, const MemoryRegion& b) { return a.vaddr < b.vaddr; });
  publish(std::move(next));
  if (iova != nullptr) *iova = region.iova;
  return 0;
}

int MemoryRegistry::remove(void* vaddr) {
  std::lock_guard lock(writer_mu_);
  const Snapshot& cur = *current_.load(std::memory_order_acquire);
  auto it = std::find_if(cur.begin(), cur.end(),
                         [vaddr](const MemoryRegion& r) { return r.vaddr == vaddr; });
  if (it == cur.end()) return -ENOENT;
  const MemoryRegion gone = *it;
  for (RegionListener* l : listeners_) l->on_region_removed(gone);
  auto next = std::make_unique<Snapshot>();
  for (const MemoryRegion& r : cur)
    if (r.vaddr != vaddr) next->push_back(r);
  publish(std::move(next));
  return 0;
}

std::string MemoryRegistry::add_listener(RegionListener* listener) {
  std::lock_guard lock(writer_mu_);
  const Snapshot& cur = *current_.load(std::memory_order_acquire);
  for (size_t i = 0; i < cur.size(); ++i) {
    if (std::string e = listener->on_region_added(cur[i]); !e.empty()) {
      for (size_t j = 0; j < i; ++j) listener->on_region_removed(cur[j]);
      return e;
    }
  }
  listeners_.push_back(listener);
  return "";
}

void MemoryRegistry::remove_listener(RegionListener* listener) {
  std::lock_guard lock(writer_mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener), listeners_.end());
}

const MemoryRegion* MemoryRegistry::lookup(const Snapshot& s, const void* p) const {
  // Last region whose start is <= p.
  auto it = std::upper_bound(s.begin(), s.end(), p, [](const void* addr, const MemoryRegion& r) {
    return addr < static_cast<const void*>(r.vaddr);
  });
  if (it == s.begin()) return nullptr;
  --it;
  return it->contains(p, 1) ? &*it : nullptr;
}

uint64_t MemoryRegistry::translate(const void* p, std::size_t len) const {
  const Snapshot& s = *current_.load(std::memory_order_acquire);
  const MemoryRegion* r = lookup(s, p);
  if (r == nullptr || !r->contains(p, len)) return kInvalidIova;
  return r->iova + (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->vaddr));
}

MemoryRegion MemoryRegistry::find(const void* p) const {
  const MemoryRegion* r = lookup(*current_.load(std::memory_order_acquire), p);
  return r != nullptr ? *r : MemoryRegion{};
}

std::vector<MemoryRegion> MemoryRegistry::regions() const {
  return *current_.load(std::memory_order_acquire);
}

}  // namespace pollux::env
