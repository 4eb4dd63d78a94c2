#include "driver/env/memory_registry.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace pollux::env {

namespace {
// Each registry's versions start 2^32 apart, so a cache stamped by one never matches another.
std::atomic<uint64_t> next_version_base{0};
constexpr std::size_t kFirstCapacity = 16;
}  // namespace

MemoryRegistry::MemoryRegistry(IovaMode mode)
    : version_(next_version_base.fetch_add(uint64_t{1} << 32, std::memory_order_relaxed)),
      iova_mode_(mode) {
  tables_.push_back(std::make_unique<Table>(kFirstCapacity));
  table_.store(tables_.back().get(), std::memory_order_release);
}

MemoryRegistry::~MemoryRegistry() = default;

namespace {
constexpr uint64_t kCompactBase = 4ull << 30;  // above the x86 MSI window at 0xfee00000
constexpr uint64_t kCompactAlign = 2ull << 20;
}  // namespace

const char* to_string(IovaMode m) {
  switch (m) {
    case IovaMode::kAuto:
      return "auto";
    case IovaMode::kVirtualAddress:
      return "va";
    case IovaMode::kCompact:
      return "compact";
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
  if (!regions_.empty() && compact(mode) != compact(iova_mode_)) return -EBUSY;
  iova_mode_ = mode;
  return 0;
}

// First fit above kCompactBase among the IOVAs in use, aligned to 2 MiB (hugepage mappings).
uint64_t MemoryRegistry::assign_iova(const MemoryRegion& region) const {
  if (iova_mode_ != IovaMode::kCompact) return reinterpret_cast<uint64_t>(region.vaddr);
  std::vector<std::pair<uint64_t, uint64_t>> used;
  for (const MemoryRegion& r : regions_) used.emplace_back(r.iova, r.iova + r.length);
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

// A seqlock write: the version is odd while the table changes. A table too small is replaced
// by one twice its size; the old one stays (a reader may be searching it: it will see the
// version move and search again), and all of them together hold less than twice the current.
void MemoryRegistry::publish() {
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (regions_.size() > tables_.back()->capacity) {
    std::size_t cap = tables_.back()->capacity * 2;
    while (cap < regions_.size()) cap *= 2;
    tables_.push_back(std::make_unique<Table>(cap));
    table_.store(tables_.back().get(), std::memory_order_release);
  }
  Table& t = *tables_.back();
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    const MemoryRegion& r = regions_[i];
    Slot& slot = t.slots[i];
    slot.vaddr.store(reinterpret_cast<uintptr_t>(r.vaddr), std::memory_order_relaxed);
    slot.length.store(r.length, std::memory_order_relaxed);
    slot.iova.store(r.iova, std::memory_order_relaxed);
    slot.fd.store(r.fd, std::memory_order_relaxed);
    slot.fd_offset.store(r.fd_offset, std::memory_order_relaxed);
  }
  t.count.store(regions_.size(), std::memory_order_relaxed);
  version_.store(v + 2, std::memory_order_release);
}

int MemoryRegistry::add(const MemoryRegion& region_in, uint64_t* iova, std::string* why) {
  if (region_in.vaddr == nullptr || region_in.length == 0) return -EINVAL;
  std::lock_guard lock(writer_mu_);
  const auto start = reinterpret_cast<uintptr_t>(region_in.vaddr);
  for (const MemoryRegion& r : regions_) {
    const auto rs = reinterpret_cast<uintptr_t>(r.vaddr);
    if (start < rs + r.length && rs < start + region_in.length) return -EEXIST;
  }
  MemoryRegion region = region_in;
  if (region.iova == kInvalidIova) {
    region.iova = assign_iova(region);
  } else if (iova_mode_ == IovaMode::kCompact) {
    // IOVAs are not virtual addresses then: one given by the caller must not overlap ours.
    for (const MemoryRegion& r : regions_)
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
  regions_.insert(std::upper_bound(regions_.begin(), regions_.end(), region,
                                   [](const MemoryRegion& a, const MemoryRegion& b) {
                                     return a.vaddr < b.vaddr;
                                   }),
                  region);
  publish();
  if (iova != nullptr) *iova = region.iova;
  return 0;
}

int MemoryRegistry::remove(void* vaddr) {
  std::lock_guard lock(writer_mu_);
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [vaddr](const MemoryRegion& r) { return r.vaddr == vaddr; });
  if (it == regions_.end()) return -ENOENT;
  const MemoryRegion gone = *it;
  for (RegionListener* l : listeners_) l->on_region_removed(gone);
  regions_.erase(it);
  publish();
  return 0;
}

std::string MemoryRegistry::add_listener(RegionListener* listener) {
  std::lock_guard lock(writer_mu_);
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (std::string e = listener->on_region_added(regions_[i]); !e.empty()) {
      for (size_t j = 0; j < i; ++j) listener->on_region_removed(regions_[j]);
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

template <typename F>
auto MemoryRegistry::read_consistent(F f) const {
  for (unsigned tries = 1;; ++tries) {
    const uint64_t v = version_.load(std::memory_order_acquire);
    if (v & 1) {  // a writer is at work: a few dozen stores, unless it was preempted there
      if (tries >= 64) std::this_thread::yield();  // then let it run (it may share our core)
      continue;
    }
    const Table& t = *table_.load(std::memory_order_acquire);
    const std::size_t n = std::min(t.count.load(std::memory_order_relaxed), t.capacity);
    auto result = f(t, n, v);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (version_.load(std::memory_order_relaxed) == v) return result;
  }
}

long MemoryRegistry::lookup(const Table& t, std::size_t n, const void* p) {
  // The last region whose start is <= p.
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::size_t lo = 0, hi = n;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (t.slots[mid].vaddr.load(std::memory_order_relaxed) <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return -1;
  const Slot& s = t.slots[lo - 1];
  const uintptr_t base = s.vaddr.load(std::memory_order_relaxed);
  return a - base < s.length.load(std::memory_order_relaxed) ? static_cast<long>(lo - 1) : -1;
}

MemoryRegion MemoryRegistry::load(const Slot& s) {
  return {reinterpret_cast<void*>(s.vaddr.load(std::memory_order_relaxed)),
          s.length.load(std::memory_order_relaxed), s.iova.load(std::memory_order_relaxed),
          s.fd.load(std::memory_order_relaxed), s.fd_offset.load(std::memory_order_relaxed)};
}

void MemoryRegistry::refill(const void* p, TranslateCache& cache) const {
  cache = read_consistent([p](const Table& t, std::size_t n, uint64_t v) {
    TranslateCache c;
    c.version = v;
    c.length = 0;
    if (const long i = lookup(t, n, p); i >= 0) {
      const Slot& s = t.slots[i];
      c.vaddr = s.vaddr.load(std::memory_order_relaxed);
      c.length = s.length.load(std::memory_order_relaxed);
      c.iova = s.iova.load(std::memory_order_relaxed);
    }
    return c;
  });
}

uint64_t MemoryRegistry::translate(const void* p, std::size_t len) const {
  TranslateCache c;
  refill(p, c);
  if (!c.contains(p, len)) return kInvalidIova;
  return c.iova + (reinterpret_cast<uintptr_t>(p) - c.vaddr);
}

MemoryRegion MemoryRegistry::find(const void* p) const {
  return read_consistent([p](const Table& t, std::size_t n, uint64_t) {
    const long i = lookup(t, n, p);
    return i >= 0 ? load(t.slots[i]) : MemoryRegion{};
  });
}

std::vector<MemoryRegion> MemoryRegistry::regions() const {
  return read_consistent([](const Table& t, std::size_t n, uint64_t) {
    std::vector<MemoryRegion> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(load(t.slots[i]));
    return out;
  });
}

std::size_t MemoryRegistry::table_bytes() const {
  std::lock_guard lock(writer_mu_);
  std::size_t bytes = 0;
  for (const auto& t : tables_) bytes += sizeof(Table) + t->capacity * sizeof(Slot);
  return bytes;
}

}  // namespace pollux::env
