#include "driver/env/memory_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace pollux::env {
namespace {

struct RecordingListener : RegionListener {
  std::vector<void*> added, removed;
  std::string on_region_added(const MemoryRegion& r) override {
    added.push_back(r.vaddr);
    return "";
  }
  void on_region_removed(const MemoryRegion& r) override { removed.push_back(r.vaddr); }
};

alignas(4096) char g_buf[4][8192];

MemoryRegion region_of(int i, uint64_t iova) {
  return {g_buf[i], sizeof g_buf[i], iova, -1, 0};
}

TEST(MemoryRegistry, TranslatesInsideRegionsOnly) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.add(region_of(0, 0x10000)), 0);
  ASSERT_EQ(reg.add(region_of(2, 0x40000)), 0);
  EXPECT_EQ(reg.translate(g_buf[0], 1), 0x10000u);
  EXPECT_EQ(reg.translate(g_buf[0] + 100, 4096), 0x10064u);
  EXPECT_EQ(reg.translate(g_buf[2] + 8191, 1), 0x40000u + 8191);
  // Crossing the end, before, between, or in an unregistered buffer: refused.
  EXPECT_EQ(reg.translate(g_buf[0] + 8000, 500), kInvalidIova);
  EXPECT_EQ(reg.translate(g_buf[1], 1), kInvalidIova);
  EXPECT_EQ(reg.translate(g_buf[3], 16), kInvalidIova);
  EXPECT_EQ(reg.find(g_buf[2] + 5).vaddr, static_cast<void*>(g_buf[2]));
  EXPECT_EQ(reg.find(g_buf[1]).length, 0u);
}

// The cached form answers as the plain one, and never from a region that is gone: any add or
// remove makes the memo stale.
TEST(MemoryRegistry, CachedTranslationFollowsRegionChanges) {
  MemoryRegistry reg(IovaMode::kCompact);
  TranslateCache cache;
  EXPECT_EQ(reg.translate(g_buf[0], 8, cache), kInvalidIova);
  uint64_t iova0 = 0, iova1 = 0;
  ASSERT_EQ(reg.add({g_buf[0], sizeof g_buf[0], kInvalidIova, -1, 0}, &iova0), 0);
  ASSERT_EQ(reg.add({g_buf[1], sizeof g_buf[1], kInvalidIova, -1, 0}, &iova1), 0);
  EXPECT_EQ(reg.translate(g_buf[0] + 100, 8, cache), iova0 + 100);
  EXPECT_EQ(reg.translate(g_buf[0] + 200, 8, cache), iova0 + 200);  // the memo's region
  EXPECT_EQ(reg.translate(g_buf[1] + 8, 8, cache), iova1 + 8);      // another region
  EXPECT_EQ(reg.translate(g_buf[1] + 8190, 8, cache), kInvalidIova) << "runs past its end";
  for (const char* p : {g_buf[0] + 64, g_buf[1] + 4096}) {
    EXPECT_EQ(reg.translate(p, 16, cache), reg.translate(p, 16));
  }
  // Removed, then registered again: it gets a new IOVA, and the memo must not hand out the old.
  EXPECT_EQ(reg.translate(g_buf[0], 8, cache), iova0);
  ASSERT_EQ(reg.remove(g_buf[0]), 0);
  EXPECT_EQ(reg.translate(g_buf[0], 8, cache), kInvalidIova);
  ASSERT_EQ(reg.add({g_buf[2], sizeof g_buf[2], kInvalidIova, -1, 0}), 0);
  uint64_t again = 0;
  ASSERT_EQ(reg.add({g_buf[0], sizeof g_buf[0], kInvalidIova, -1, 0}, &again), 0);
  ASSERT_NE(again, iova0) << "compact IOVAs: the freed space went to g_buf[2]";
  EXPECT_EQ(reg.translate(g_buf[0] + 4, 8, cache), again + 4);
}

TEST(MemoryRegistry, RejectsOverlapsAndBadRegions) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.add(region_of(1, 0)), 0);
  MemoryRegion overlap{g_buf[1] + 4096, 8192, 0, -1, 0};
  EXPECT_EQ(reg.add(overlap), -EEXIST);
  EXPECT_EQ(reg.add(MemoryRegion{}), -EINVAL);
  EXPECT_EQ(reg.remove(g_buf[3]), -ENOENT);
  EXPECT_EQ(reg.regions().size(), 1u);
}

TEST(MemoryRegistry, ListenersHearExistingAndLaterRegions) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.add(region_of(0, 0)), 0);
  RecordingListener l;
  reg.add_listener(&l);
  ASSERT_EQ(l.added.size(), 1u);  // replayed on attach
  EXPECT_EQ(l.added[0], static_cast<void*>(g_buf[0]));
  ASSERT_EQ(reg.add(region_of(3, 0)), 0);  // added after the "device" attached
  ASSERT_EQ(l.added.size(), 2u);
  EXPECT_EQ(l.added[1], static_cast<void*>(g_buf[3]));
  ASSERT_EQ(reg.remove(g_buf[0]), 0);
  ASSERT_EQ(l.removed.size(), 1u);
  EXPECT_EQ(l.removed[0], static_cast<void*>(g_buf[0]));
  reg.remove_listener(&l);
  ASSERT_EQ(reg.add(region_of(0, 0)), 0);
  EXPECT_EQ(l.added.size(), 2u);  // no longer told
}

// Readers never lock; a writer adding and removing regions must not disturb lookups of a
// region that stays registered.
TEST(MemoryRegistry, LookupsStayValidWhileRegionsChange) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.add(region_of(0, 0x1000)), 0);
  std::atomic<bool> stop{false}, reading{false};
  std::thread writer([&] {
    while (!reading) std::this_thread::yield();
    for (int i = 0; i < 2000; ++i) {
      ASSERT_EQ(reg.add(region_of(1 + i % 3, 0)), 0);
      ASSERT_EQ(reg.remove(g_buf[1 + i % 3]), 0);
    }
    stop = true;
  });
  uint64_t lookups = 0;
  do {
    ASSERT_EQ(reg.translate(g_buf[0] + 8, 8), 0x1008u);
    ++lookups;
    reading = true;
  } while (!stop);
  writer.join();
  EXPECT_GT(lookups, 0u);
}

// A long-running process adds and removes regions for ever (bdevs, pools, queues created and
// deleted): the registry's footprint follows the most regions it held at once, not how many
// changes it saw; and a reader's memo never survives a change.
TEST(MemoryRegistry, ChurnDoesNotGrowItsFootprint) {
  MemoryRegistry reg;
  TranslateCache cache;
  ASSERT_EQ(reg.add(region_of(0, 0x1000)), 0);
  const std::size_t at_start = reg.table_bytes();
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(reg.add(region_of(1 + i % 3, 0x100000 + 0x10000 * (i % 7))), 0);
    ASSERT_EQ(reg.translate(g_buf[1 + i % 3] + 16, 8, cache), 0x100010u + 0x10000 * (i % 7));
    ASSERT_EQ(reg.remove(g_buf[1 + i % 3]), 0);
    ASSERT_EQ(reg.translate(g_buf[1 + i % 3] + 16, 8, cache), kInvalidIova);
  }
  EXPECT_EQ(reg.table_bytes(), at_start);
  // Many at once: it grows (by doubling), and holds less than twice what the largest needs.
  std::vector<std::vector<char>> bufs(1000, std::vector<char>(64));
  for (auto& b : bufs) ASSERT_EQ(reg.add({b.data(), b.size(), 0x1000000, -1, 0}), 0);
  const std::size_t at_peak = reg.table_bytes();
  EXPECT_GT(at_peak, at_start);
  for (auto& b : bufs) ASSERT_EQ(reg.remove(b.data()), 0);
  for (int i = 0; i < 10000; ++i) {
    ASSERT_EQ(reg.add(region_of(1, 0)), 0);
    ASSERT_EQ(reg.remove(g_buf[1]), 0);
  }
  EXPECT_EQ(reg.table_bytes(), at_peak);
  EXPECT_LT(at_peak, 2 * 2 * 1024 * (5 * sizeof(uint64_t)) + 4096);
  EXPECT_EQ(reg.regions().size(), 1u);
}

// Caches stamped by one registry are not taken as current by another (tests and tools make
// several registries; one cache per queue pair).
TEST(MemoryRegistry, ACacheFromAnotherRegistryIsStale) {
  MemoryRegistry a, b;
  ASSERT_EQ(a.add(region_of(0, 0x1000)), 0);
  ASSERT_EQ(b.add(region_of(1, 0x2000)), 0);
  TranslateCache cache;
  EXPECT_EQ(a.translate(g_buf[0] + 4, 4, cache), 0x1004u);
  EXPECT_EQ(b.translate(g_buf[0] + 4, 4, cache), kInvalidIova);
  EXPECT_EQ(b.translate(g_buf[1] + 4, 4, cache), 0x2004u);
}

// A device that refuses regions at or beyond an IOVA (an IOMMU too narrow to map them).
struct NarrowDevice : RegionListener {
  uint64_t limit;
  std::vector<void*> mapped;
  explicit NarrowDevice(uint64_t l) : limit(l) {}
  std::string on_region_added(const MemoryRegion& r) override {
    if (r.iova + r.length > limit) return "beyond the IOMMU";
    mapped.push_back(r.vaddr);
    return "";
  }
  void on_region_removed(const MemoryRegion& r) override {
    mapped.erase(std::remove(mapped.begin(), mapped.end(), r.vaddr), mapped.end());
  }
};

TEST(MemoryRegistry, ARegionADeviceCannotMapIsNotAdded) {
  MemoryRegistry reg;
  RecordingListener first;  // maps anything: must hear the removal when the second refuses
  NarrowDevice narrow(0x20000);
  ASSERT_EQ(reg.add_listener(&first), "");
  ASSERT_EQ(reg.add_listener(&narrow), "");
  uint64_t iova = 0;
  std::string why;
  ASSERT_EQ(reg.add(region_of(0, 0x10000), &iova, &why), 0);
  EXPECT_EQ(iova, 0x10000u);
  EXPECT_EQ(reg.add(region_of(1, 0x40000), &iova, &why), -EIO);
  EXPECT_EQ(why, "beyond the IOMMU");
  EXPECT_EQ(reg.translate(g_buf[1], 1), kInvalidIova);  // never visible
  ASSERT_EQ(first.removed.size(), 1u);                  // the first device unmapped it
  EXPECT_EQ(first.removed[0], static_cast<void*>(g_buf[1]));
  EXPECT_EQ(narrow.mapped.size(), 1u);
  reg.remove_listener(&first);
  reg.remove_listener(&narrow);
}

TEST(MemoryRegistry, ADeviceThatCannotMapWhatIsRegisteredIsNotAttached) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.add(region_of(0, 0x10000)), 0);
  ASSERT_EQ(reg.add(region_of(1, 0x80000)), 0);
  NarrowDevice narrow(0x20000);
  EXPECT_EQ(reg.add_listener(&narrow), "beyond the IOMMU");
  EXPECT_TRUE(narrow.mapped.empty());  // what it had mapped is unmapped again
  ASSERT_EQ(reg.add(region_of(2, 0x14000)), 0);
  EXPECT_TRUE(narrow.mapped.empty());  // and it hears of nothing later
}

TEST(MemoryRegistry, CompactIovasStartAt4GiBAlignedAndReuseFreedSpace) {
  MemoryRegistry reg;
  ASSERT_EQ(reg.set_iova_mode(IovaMode::kCompact), 0);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  ASSERT_EQ(reg.add({g_buf[0], sizeof g_buf[0], kInvalidIova, -1, 0}, &a), 0);
  ASSERT_EQ(reg.add({g_buf[1], sizeof g_buf[1], kInvalidIova, -1, 0}, &b), 0);
  ASSERT_EQ(reg.add({g_buf[2], sizeof g_buf[2], kInvalidIova, -1, 0}, &c), 0);
  EXPECT_EQ(a, 4ull << 30);
  EXPECT_EQ(b, a + (2 << 20));
  EXPECT_EQ(c, b + (2 << 20));
  EXPECT_EQ(reg.translate(g_buf[1] + 100, 8), b + 100);
  ASSERT_EQ(reg.remove(g_buf[1]), 0);
  ASSERT_EQ(reg.add({g_buf[3], sizeof g_buf[3], kInvalidIova, -1, 0}, &d), 0);
  EXPECT_EQ(d, b);  // first fit: the hole g_buf[1] left
  // An IOVA given by the caller is kept.
  ASSERT_EQ(reg.remove(g_buf[3]), 0);
  ASSERT_EQ(reg.add(region_of(3, 0x123000), &d), 0);
  EXPECT_EQ(d, 0x123000u);
  // One that overlaps an IOVA the registry handed out is refused.
  EXPECT_EQ(reg.add(region_of(1, a + 4096)), -EEXIST);
}

TEST(MemoryRegistry, IovaModeChangesOnlyWhileNoRegionDependsOnIt) {
  MemoryRegistry reg;
  EXPECT_EQ(reg.iova_mode(), IovaMode::kAuto);
  uint64_t iova = 0;
  ASSERT_EQ(reg.add({g_buf[0], sizeof g_buf[0], kInvalidIova, -1, 0}, &iova), 0);
  EXPECT_EQ(iova, reinterpret_cast<uint64_t>(g_buf[0]));  // auto: the virtual address
  EXPECT_EQ(reg.set_iova_mode(IovaMode::kCompact), -EBUSY);
  EXPECT_EQ(reg.set_iova_mode(IovaMode::kVirtualAddress), 0);  // the same scheme
  ASSERT_EQ(reg.remove(g_buf[0]), 0);
  EXPECT_EQ(reg.set_iova_mode(IovaMode::kCompact), 0);
  EXPECT_EQ(reg.iova_mode(), IovaMode::kCompact);
}

TEST(MemoryRegistry, ParsesIovaModes) {
  IovaMode m = IovaMode::kCompact;
  EXPECT_TRUE(parse_iova_mode("", &m));
  EXPECT_EQ(m, IovaMode::kAuto);
  EXPECT_TRUE(parse_iova_mode("va", &m));
  EXPECT_EQ(m, IovaMode::kVirtualAddress);
  EXPECT_TRUE(parse_iova_mode("compact", &m));
  EXPECT_EQ(m, IovaMode::kCompact);
  EXPECT_FALSE(parse_iova_mode("pa", &m));
}

}  // namespace
}  // namespace pollux::env
