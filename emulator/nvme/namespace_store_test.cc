#include "emulator/nvme/namespace_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace pollux::emu::nvme {
namespace {

std::string tmp(const char* name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name + std::to_string(getpid());
}

class Store : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto r = open_store(GetParam() ? "file:" + tmp("store") : std::string("memory"), kSize);
    ASSERT_TRUE(r) << r.error();
    s = std::move(r).value();
  }
  static constexpr uint64_t kSize = 4 << 20;
  std::unique_ptr<NamespaceStore> s;
};

TEST_P(Store, UnwrittenReadsZero) {
  std::vector<uint8_t> b(100000, 0xff);
  ASSERT_TRUE(s->read(12345, b.data(), b.size()));
  for (uint8_t x : b) ASSERT_EQ(x, 0);
  EXPECT_EQ(s->size(), kSize);
}

TEST_P(Store, WriteReadAcrossChunks) {
  std::vector<uint8_t> w(300000), r(300000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(s->write(65536 - 100, w.data(), w.size()));
  ASSERT_TRUE(s->read(65536 - 100, r.data(), r.size()));
  EXPECT_EQ(w, r);
  bool eq = false;
  ASSERT_TRUE(s->compare(65536 - 100, w.data(), w.size(), &eq));
  EXPECT_TRUE(eq);
  w[299999] ^= 1;
  ASSERT_TRUE(s->compare(65536 - 100, w.data(), w.size(), &eq));
  EXPECT_FALSE(eq);
  // Last byte of the store.
  uint8_t x = 9;
  ASSERT_TRUE(s->write(kSize - 1, &x, 1));
  x = 0;
  ASSERT_TRUE(s->read(kSize - 1, &x, 1));
  EXPECT_EQ(x, 9);
  ASSERT_TRUE(s->flush());
}

TEST_P(Store, DeallocateAndWriteZeroes) {
  std::vector<uint8_t> w(4 * 65536, 0xab), r(4 * 65536);
  ASSERT_TRUE(s->write(0, w.data(), w.size()));
  ASSERT_TRUE(s->deallocate(100, 65536 * 2));  // partial, whole, partial chunks
  ASSERT_TRUE(s->write_zeroes(65536 * 3, 512));
  ASSERT_TRUE(s->read(0, r.data(), r.size()));
  for (size_t i = 0; i < r.size(); ++i) {
    const bool zero = (i >= 100 && i < 100 + 2 * 65536) || (i >= 3 * 65536 && i < 3 * 65536 + 512);
    ASSERT_EQ(r[i], zero ? 0 : 0xab) << i;
  }
  ASSERT_TRUE(s->erase_all());
  ASSERT_TRUE(s->read(0, r.data(), r.size()));
  for (uint8_t v : r) ASSERT_EQ(v, 0);
  bool eq = false;
  ASSERT_TRUE(s->compare(0, r.data(), r.size(), &eq));
  EXPECT_TRUE(eq);
}

INSTANTIATE_TEST_SUITE_P(Backings, Store, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "file" : "memory"; });

TEST(MemoryStore, ChunksAreAllocatedOnWriteAndFreed) {
  MemoryStore s(1ull << 40);  // 1 TiB, sparse
  EXPECT_EQ(s.chunks_allocated(), 0u);
  uint8_t b[16] = {1};
  ASSERT_TRUE(s.write((1ull << 40) - 16, b, 16));
  ASSERT_TRUE(s.write(0, b, 16));
  EXPECT_EQ(s.chunks_allocated(), 2u);
  EXPECT_EQ(s.allocated_bytes(), 2 * MemoryStore::kChunkSize);
  ASSERT_TRUE(s.deallocate(0, MemoryStore::kChunkSize));
  EXPECT_EQ(s.chunks_allocated(), 1u);
  ASSERT_TRUE(s.erase_all());
  EXPECT_EQ(s.chunks_allocated(), 0u);
}

TEST(FileStore, CreatesAndExtendsTheFile) {
  const std::string path = tmp("grow");
  {
    auto r = FileStore::open(path, 1 << 20);
    ASSERT_TRUE(r) << r.error();
  }
  auto r = FileStore::open(path, 2 << 20);  // extended on reopen
  ASSERT_TRUE(r);
  uint8_t b = 5;
  ASSERT_TRUE(r.value()->write((2 << 20) - 1, &b, 1));
  EXPECT_FALSE(FileStore::open("/nonexistent-dir/f", 4096));
  auto dir = FileStore::open("/", 4096);
  ASSERT_FALSE(dir);
}

}  // namespace
}  // namespace pollux::emu::nvme
