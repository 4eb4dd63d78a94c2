#include "driver/env/dma_pool.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace pollux::env {
namespace {

TEST(DmaRegion, IsRegisteredPageAlignedAndWritable) {
  MemoryRegistry reg;
  auto r = DmaRegion::create(reg, 10000);
  ASSERT_TRUE(r.ok()) << r.error().message;
  DmaRegion& region = **r;
  std::printf("DMA backing: %s\n", to_string(region.backing()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(region.data()) % 4096, 0u);
  EXPECT_GE(region.size(), 10000u);
  EXPECT_GE(region.fd(), 0);
  std::memset(region.data(), 0xab, region.size());
  EXPECT_EQ(reg.translate(region.data(), region.size()), region.iova());
  ASSERT_EQ(reg.regions().size(), 1u);
  EXPECT_EQ(reg.regions()[0].fd, region.fd());
  r = make_error(EINVAL, "drop");  // destroys the region: it must leave the registry
  EXPECT_TRUE(reg.regions().empty());
}

// Whatever the machine has, hugepages can be declined and the memfd path must then serve.
TEST(DmaRegion, FallsBackToLockedMemfdWithoutHugepages) {
  MemoryRegistry reg;
  auto r = DmaRegion::create(reg, 3 * 4096 + 1, DmaOptions{.allow_hugepages = false});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NE((*r)->backing(), Backing::kHugetlb2M);
  EXPECT_EQ((*r)->size(), 4u * 4096);  // rounded to 4 KiB pages, not 2 MiB
}

// Populating more than the machine has grew without bound (16 TB for a malloc bdev of 4e9
// blocks) until the OOM killer came: refused before anything is mapped.
TEST(DmaRegion, MoreThanTheMachineHasIsRefusedUpFront) {
  MemoryRegistry reg;
  const std::size_t too_much = available_memory_bytes() + (std::size_t{1} << 30);
  ASSERT_LT(too_much, SIZE_MAX / 2);  // MemAvailable is known here
  auto r = DmaRegion::create(reg, too_much, DmaOptions{.allow_hugepages = false});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, -ENOMEM);
  EXPECT_NE(r.error().message.find("GiB available"), std::string::npos) << r.error().message;
  EXPECT_TRUE(reg.regions().empty());
  EXPECT_FALSE(DmaRegion::create(reg, SIZE_MAX).ok());  // no overflow in the rounding
}

// A region given back is kept for the next one of its size (as SPDK's env keeps freed DMA
// memory): the same pages come back, zeroed, registered again; in between they fault.
TEST(DmaRegion, AGivenBackRegionComesBackZeroedForTheSameSize) {
  MemoryRegistry reg;
  constexpr std::size_t kSize = 37 * 4096;  // a size no other test here uses
  auto a = DmaRegion::create(reg, kSize, DmaOptions{.allow_hugepages = false});
  ASSERT_TRUE(a.ok()) << a.error().message;
  void* first = (*a)->data();
  struct stat st {};
  ASSERT_EQ(fstat((*a)->fd(), &st), 0);
  const ino_t first_inode = st.st_ino;  // a new memfd would be another file
  std::memset(first, 0x5c, kSize);
  a = make_error(EINVAL, "drop");
  EXPECT_TRUE(reg.regions().empty());
  auto other = DmaRegion::create(reg, kSize + 4096, DmaOptions{.allow_hugepages = false});
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->data(), first);  // another size maps afresh
  MemoryRegistry reg2;  // any registry
  auto b = DmaRegion::create(reg2, kSize - 100, DmaOptions{.allow_hugepages = false});
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ((*b)->data(), first);
  ASSERT_EQ(fstat((*b)->fd(), &st), 0);
  EXPECT_EQ(st.st_ino, first_inode);
  EXPECT_EQ((*b)->size(), kSize);
  const auto* bytes = static_cast<const uint8_t*>((*b)->data());
  EXPECT_EQ(std::count(bytes, bytes + kSize, 0), static_cast<std::ptrdiff_t>(kSize));
  EXPECT_EQ(reg2.translate((*b)->data(), kSize), (*b)->iova());
}

TEST(DmaRegionDeathTest, AStalePointerIntoAGivenBackRegionFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MemoryRegistry reg;
        auto r = DmaRegion::create(reg, 41 * 4096, DmaOptions{.allow_hugepages = false});
        volatile uint8_t* p = static_cast<uint8_t*>((*r)->data());
        r = make_error(EINVAL, "drop");
        p[100] = 1;
      },
      "");
}

TEST(DmaRegion, ZeroSizeIsAClearError) {
  MemoryRegistry reg;
  auto r = DmaRegion::create(reg, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, -EINVAL);
}

TEST(DmaBufferPool, BuffersAreDistinctAlignedAndTranslatable) {
  MemoryRegistry reg;
  auto pool = DmaBufferPool::create(reg, 3000, 16);  // rounded to 4 KiB
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  EXPECT_EQ((*pool)->buffer_size(), 4096u);
  DmaBufferCache cache(**pool, 8);
  std::set<void*> seen;
  std::vector<void*> held;
  for (int i = 0; i < 16; ++i) {
    void* b = cache.get();
    ASSERT_NE(b, nullptr) << i;
    EXPECT_TRUE((*pool)->owns(b));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
    EXPECT_EQ((*pool)->iova(b), reg.translate(b, 4096));
    EXPECT_TRUE(seen.insert(b).second) << "buffer handed out twice";
    held.push_back(b);
  }
  for (void* b : held) cache.put(b);
}

TEST(DmaBufferPool, ExhaustionIsReportedNotFatal) {
  MemoryRegistry reg;
  auto pool = DmaBufferPool::create(reg, 4096, 4);
  ASSERT_TRUE(pool.ok());
  DmaBufferCache cache(**pool, 4);
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(cache.get());
  for (void* b : held) ASSERT_NE(b, nullptr);
  EXPECT_EQ(cache.get(), nullptr);
  EXPECT_EQ(cache.get(), nullptr);
  EXPECT_EQ(cache.exhausted(), 2u);
  cache.put(held.back());
  held.pop_back();
  EXPECT_NE(cache.get(), nullptr);  // recovers once a buffer comes back
}

// Per-thread caches over one pool: buffers move between threads and none is lost.
TEST(DmaBufferPool, CachesOnManyThreadsConserveBuffers) {
  MemoryRegistry reg;
  auto pool = DmaBufferPool::create(reg, 4096, 256);
  ASSERT_TRUE(pool.ok());
  auto worker = [&](int seed) {
    DmaBufferCache cache(**pool, 32);
    std::vector<void*> held;
    unsigned x = static_cast<unsigned>(seed);
    for (int i = 0; i < 100000; ++i) {
      x = x * 1103515245u + 12345u;
      if ((x >> 16) % 2 == 0 && held.size() < 60) {
        if (void* b = cache.get()) {
          *static_cast<int*>(b) = seed;  // each buffer is ours alone while held
          held.push_back(b);
        }
      } else if (!held.empty()) {
        ASSERT_EQ(*static_cast<int*>(held.back()), seed);
        cache.put(held.back());
        held.pop_back();
      }
    }
    for (void* b : held) cache.put(b);
  };
  std::thread a(worker, 1), b(worker, 2);
  worker(3);
  a.join();
  b.join();
  EXPECT_EQ((*pool)->available_approx(), 256u);
}

}  // namespace
}  // namespace pollux::env
