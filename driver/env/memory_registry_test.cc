#include "driver/env/memory_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace pollux::env {
namespace {

struct RecordingListener : RegionListener {
  std::vector<void*> added, removed;
  void on_region_added(const MemoryRegion& r) override { added.push_back(r.vaddr); }
  void on_region_removed(const MemoryRegion& r) override { removed.push_back(r.vaddr); }
};

alignas(4096) char g_buf[4][8192];

MemoryRegion region_of(int i, uint64_t iova) { return {g_buf[i], sizeof g_buf[i], iova, -1, 0}; }

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

}  // namespace
}  // namespace pollux::env
