#include "driver/env/memory_registry.h"

#include <algorithm>
#include <cerrno>

namespace pollux::env {

MemoryRegistry::MemoryRegistry() {
  snapshots_.push_back(std::make_unique<Snapshot>());
  current_.store(snapshots_.back().get(), std::memory_order_release);
}

MemoryRegistry::~MemoryRegistry() = default;

MemoryRegistry& MemoryRegistry::global() {
  static MemoryRegistry registry;
  return registry;
}

void MemoryRegistry::publish(std::unique_ptr<Snapshot> next) {
  current_.store(next.get(), std::memory_order_release);
  snapshots_.push_back(std::move(next));
}

int MemoryRegistry::add(const MemoryRegion& region) {
  if (region.vaddr == nullptr || region.length == 0) return -EINVAL;
  std::lock_guard lock(writer_mu_);
  const Snapshot& cur = *current_.load(std::memory_order_acquire);
  const auto start = reinterpret_cast<uintptr_t>(region.vaddr);
  for (const MemoryRegion& r : cur) {
    const auto rs = reinterpret_cast<uintptr_t>(r.vaddr);
    if (start < rs + r.length && rs < start + region.length) return -EEXIST;
  }
  auto next = std::make_unique<Snapshot>(cur);
  next->push_back(region);
  std::sort(next->begin(), next->end(),
            [](const MemoryRegion& a, const MemoryRegion& b) { return a.vaddr < b.vaddr; });
  publish(std::move(next));
  for (RegionListener* l : listeners_) l->on_region_added(region);
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

void MemoryRegistry::add_listener(RegionListener* listener) {
  std::lock_guard lock(writer_mu_);
  listeners_.push_back(listener);
  for (const MemoryRegion& r : *current_.load(std::memory_order_acquire))
    listener->on_region_added(r);
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
