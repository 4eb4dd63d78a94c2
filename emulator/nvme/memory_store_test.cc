// MemoryStore's block-sparse table and pattern seeds: what it keeps for each kind of block,
// and that every block reads back exactly as written.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

#include "common/data_pattern.h"
#include "emulator/nvme/block_table.h"
#include "emulator/nvme/host_stores.h"
#include "emulator/nvme/namespace_store.h"

namespace pollux::emu::nvme {
namespace {

constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr size_t kBlock = MemoryStore::kChunkSize;

std::vector<uint8_t> pattern(uint64_t lba, uint32_t blocks, uint32_t bs, uint64_t gen) {
  std::vector<uint8_t> v(size_t{blocks} * bs);
  data_pattern::fill(v.data(), lba, blocks, bs, gen);
  return v;
}

std::vector<uint8_t> read(MemoryStore& s, uint64_t off, size_t len) {
  std::vector<uint8_t> v(len, 0xee);
  EXPECT_TRUE(s.read(off, v.data(), len));
  return v;
}

TEST(MemoryStore, PatternBlocksKeepOnlyTheirSeedAndReadBackExactly) {
  MemoryStore s(4 * kTiB);
  // 4 KiB pattern blocks (a 4 KiB-LBA namespace) and 512 B ones (a 512 B-LBA namespace: one
  // store block holds 8 LBAs), written in one command each.
  const auto big = pattern(1000, 3, 4096, 7);
  const auto small = pattern(80000, 16, 512, 9);
  ASSERT_TRUE(s.write(1000 * 4096, big.data(), big.size()));
  ASSERT_TRUE(s.write(80000 * 512, small.data(), small.size()));
  EXPECT_EQ(s.pattern_blocks(), 5u);
  EXPECT_EQ(s.byte_blocks(), 0u);
  EXPECT_EQ(read(s, 1000 * 4096, big.size()), big);
  EXPECT_EQ(read(s, 80000 * 512, small.size()), small);
  // A read of part of a pattern block, and one straddling two.
  EXPECT_EQ(read(s, 1000 * 4096 + 100, 5000),
            std::vector<uint8_t>(big.begin() + 100, big.begin() + 5100));
  bool eq = false;
  ASSERT_TRUE(s.compare(80000 * 512 + 7, small.data() + 7, 6000, &eq));
  EXPECT_TRUE(eq);
  // The header may name another LBA (a misdirected write): still a seed, read back as written.
  const auto elsewhere = pattern(5, 1, 4096, 3);
  ASSERT_TRUE(s.write(123456 * kBlock, elsewhere.data(), kBlock));
  EXPECT_EQ(s.pattern_blocks(), 6u);
  EXPECT_EQ(read(s, 123456 * kBlock, kBlock), elsewhere);
}

TEST(MemoryStore, OtherBlocksKeepTheirBytesAndZeroBlocksNothing) {
  MemoryStore s(kTiB);
  std::vector<uint8_t> data(3 * kBlock);
  std::mt19937_64 rng(1);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(s.write(kBlock, data.data(), data.size()));
  EXPECT_EQ(s.byte_blocks(), 3u);
  EXPECT_EQ(s.pattern_blocks(), 0u);
  EXPECT_EQ(read(s, kBlock, data.size()), data);
  // A block that is only a pattern's header (the rest not the stream) is bytes.
  auto header_only = std::vector<uint8_t>(kBlock, 0);
  data_pattern::fill(header_only.data(), 9, 1, 16, 4);  // 16 B "blocks": the header alone
  ASSERT_TRUE(s.write(50 * kBlock, header_only.data(), kBlock));
  EXPECT_EQ(s.byte_blocks(), 4u);
  EXPECT_EQ(read(s, 50 * kBlock, kBlock), header_only);
  // Writing zeroes over stored blocks releases them; zeroes elsewhere cost nothing.
  const std::vector<uint8_t> zero(4 * kBlock, 0);
  ASSERT_TRUE(s.write(kBlock, zero.data(), zero.size()));
  ASSERT_TRUE(s.write(700 * kBlock, zero.data(), zero.size()));
  EXPECT_EQ(s.byte_blocks(), 1u);
  EXPECT_EQ(s.chunks_allocated(), 1u);
  EXPECT_EQ(read(s, 0, 5 * kBlock), std::vector<uint8_t>(5 * kBlock, 0));
}

TEST(MemoryStore, APatternBlockWithOneFlippedByteIsKeptAsBytes) {
  for (const size_t at : {size_t{0}, size_t{9}, size_t{16}, size_t{600}, kBlock - 1}) {
    for (const uint32_t bs : {512u, 4096u}) {
      MemoryStore s(kTiB);
      auto data = pattern(bs == 512 ? 64 : 8, kBlock / bs, bs, 2);
      data[at] ^= 0x20;
      ASSERT_TRUE(s.write(8 * kBlock, data.data(), kBlock));
      EXPECT_EQ(s.byte_blocks(), 1u) << "byte " << at << ", bs " << bs;
      EXPECT_EQ(s.pattern_blocks(), 0u);
      EXPECT_EQ(read(s, 8 * kBlock, kBlock), data) << "byte " << at << ", bs " << bs;
    }
  }
}

TEST(MemoryStore, PartialWritesOverAPatternBlockKeepWhatTheBlockNowHolds) {
  MemoryStore s(kTiB);
  const auto original = pattern(40, 1, 4096, 11);
  ASSERT_TRUE(s.write(40 * kBlock, original.data(), kBlock));
  ASSERT_EQ(s.pattern_blocks(), 1u);
  // 100 bytes in the middle: the block becomes bytes, the rest of the pattern intact.
  auto expect = original;
  std::memset(expect.data() + 1000, 0x5a, 100);
  ASSERT_TRUE(s.write(40 * kBlock + 1000, expect.data() + 1000, 100));
  EXPECT_EQ(s.pattern_blocks(), 0u);
  EXPECT_EQ(s.byte_blocks(), 1u);
  EXPECT_EQ(read(s, 40 * kBlock, kBlock), expect);
  // Putting the pattern's bytes back makes it a seed again.
  ASSERT_TRUE(s.write(40 * kBlock + 1000, original.data() + 1000, 100));
  EXPECT_EQ(s.pattern_blocks(), 1u);
  EXPECT_EQ(s.byte_blocks(), 0u);
  EXPECT_EQ(read(s, 40 * kBlock, kBlock), original);
  // Deallocating or zeroing part of it keeps the rest; the whole block: nothing kept.
  ASSERT_TRUE(s.deallocate(40 * kBlock + 512, 512));
  ASSERT_TRUE(s.write_zeroes(40 * kBlock + 4000, 96));
  expect = original;
  std::memset(expect.data() + 512, 0, 512);
  std::memset(expect.data() + 4000, 0, 96);
  EXPECT_EQ(read(s, 40 * kBlock, kBlock), expect);
  EXPECT_EQ(s.byte_blocks(), 1u);
  ASSERT_TRUE(s.write_zeroes(40 * kBlock, kBlock));
  EXPECT_EQ(s.chunks_allocated(), 0u);
  // A write of a new generation straddling two pattern blocks of the old one.
  const auto gen1 = pattern(100, 2, 4096, 1);
  const auto gen2 = pattern(100, 2, 4096, 2);
  ASSERT_TRUE(s.write(100 * kBlock, gen1.data(), gen1.size()));
  ASSERT_TRUE(s.write(100 * kBlock + 2048, gen2.data() + 2048, kBlock));
  expect = gen1;
  std::memcpy(expect.data() + 2048, gen2.data() + 2048, kBlock);
  EXPECT_EQ(read(s, 100 * kBlock, 2 * kBlock), expect);
  EXPECT_EQ(s.byte_blocks(), 2u);
  ASSERT_TRUE(s.erase_all());
  EXPECT_EQ(s.chunks_allocated(), 0u);
  EXPECT_EQ(s.memory_bytes(), 0u);
}

TEST(MemoryStore, MemoryFollowsTheBlocksWrittenNotTheCapacity) {
  MemoryStore s(4 * kTiB);  // 1 G blocks
  EXPECT_EQ(s.memory_bytes(), 0u);
  std::mt19937_64 rng(5);
  constexpr int kWrites = 200000;
  std::vector<uint8_t> buf(kBlock);
  for (int i = 0; i < kWrites; ++i) {
    const uint64_t lba = rng() % (4 * kTiB / 512 - 8) / 8 * 8;  // 512 B LBAs, 4 KiB aligned
    data_pattern::fill(buf.data(), lba, 8, 512, static_cast<uint64_t>(i));
    ASSERT_TRUE(s.write(lba * 512, buf.data(), kBlock));
  }
  EXPECT_EQ(s.byte_blocks(), 0u);
  EXPECT_GT(s.pattern_blocks(), uint64_t{kWrites} * 99 / 100);  // a few repeats
  // At most 3/4 full, at least 3/8 after doubling: 24 B slots cost 32-64 B per block.
  EXPECT_LE(s.memory_bytes() / s.pattern_blocks(), 64u);
}

// read_to_host streams whole aligned blocks of zeroes or bytes past the caches and writes the
// rest in place: whichever way, the destination holds exactly what read() gives. Random
// ranges over zero, byte and pattern blocks, into destinations at every 16-byte alignment and
// off it, each written twice (the second time it was written recently: plain stores).
TEST(MemoryStore, ReadsToHostGiveWhatReadsGive) {
  const char* env = std::getenv("POLLUX_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20261130;
  std::printf("seed %llu (POLLUX_SEED replays another)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  MemoryStore s(kTiB);
  constexpr uint64_t kBlocks = 64;
  std::vector<uint8_t> bytes(kBlock);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    switch (rng() % 3) {
      case 0:  // never written: zeroes
        break;
      case 1:
        for (auto& x : bytes) x = static_cast<uint8_t>(rng());
        ASSERT_TRUE(s.write(b * kBlock, bytes.data(), kBlock));
        break;
      default: {
        const auto p = pattern(b, 1, 4096, rng() % 5);
        ASSERT_TRUE(s.write(b * kBlock, p.data(), kBlock));
      }
    }
  }
  ASSERT_GT(s.byte_blocks(), 0u);
  ASSERT_GT(s.pattern_blocks(), 0u);
  std::vector<uint8_t> dest(kBlocks * kBlock + 4 * kBlock);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t off = (rng() % 2) ? (rng() % kBlocks) * kBlock : rng() % (kBlocks * kBlock);
    const size_t len = 1 + rng() % std::min<uint64_t>(3 * kBlock, kBlocks * kBlock - off);
    const size_t at = (rng() % 2) ? (rng() % 4) * kBlock : rng() % (4 * kBlock);
    const std::vector<uint8_t> want = read(s, off, len);
    for (int twice = 0; twice < 2; ++twice) {
      std::memset(dest.data() + at, 0xee, len);
      ASSERT_TRUE(s.read_to_host(off, dest.data() + at, len));
      ASSERT_EQ(std::memcmp(dest.data() + at, want.data(), len), 0)
          << "off " << off << " len " << len << " at " << at << " seed " << seed;
    }
  }
}

// A page written again within the last kRecentPages page writes is "recent" (likely still in
// the cache); one whose reuse distance is longer, or never written, is not.
TEST(HostStores, RecentlyWrittenFollowsTheReuseDistance) {
  alignas(4096) static uint8_t pages[1024][4096];
  // QD 1: one buffer again and again.
  EXPECT_FALSE(host_stores::recently_written(pages[0]));
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(host_stores::recently_written(pages[0]));
  // A pool of 128 buffers in turn (one drive at QD 128): recent from the second round on.
  for (int round = 0; round < 3; ++round) {
    for (int p = 256; p < 256 + 128; ++p) {
      EXPECT_EQ(host_stores::recently_written(pages[p]), round > 0) << round << " " << p;
    }
  }
  // 1,024 buffers in turn (eight drives at QD 128): never recent.
  int recent = 0;
  for (int round = 0; round < 3; ++round) {
    for (auto& p : pages) recent += host_stores::recently_written(p);
  }
  EXPECT_EQ(recent, 0);
  // The bound itself: written again after 255 other writes (one page's, in another slot of
  // the record) is recent, after 256 it is not.
  for (int others : {255, 256}) {
    (void)host_stores::recently_written(pages[2]);
    for (int i = 0; i < others; ++i) (void)host_stores::recently_written(pages[3]);
    EXPECT_EQ(host_stores::recently_written(pages[2]), others < 256) << others;
  }
}

TEST(BlockTable, InsertFindEraseAgreeWithAReferenceMap) {
  BlockTable t;
  std::unordered_map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300000; ++i) {
    const uint64_t block = rng() % 5000;  // dense keys: long probe runs, many shifts
    BlockTable::Slot* s = t.find(block);
    ASSERT_EQ(s != nullptr, ref.count(block) == 1) << i;
    if (s) {
      ASSERT_EQ(s->a, ref[block]);
      ASSERT_EQ(s->block(), block);
      if (rng() % 2) {
        t.erase(s);
        ref.erase(block);
      }
    } else {
      ASSERT_NE(t.insert(block, BlockTable::kPattern4096, i, 0), nullptr);
      ref[block] = static_cast<uint64_t>(i);
    }
    ASSERT_EQ(t.size(), ref.size());
  }
  size_t seen = 0;
  t.for_each([&](const BlockTable::Slot& s) {
    ++seen;
    EXPECT_EQ(ref.at(s.block()), s.a);
    EXPECT_EQ(s.kind(), BlockTable::kPattern4096);
  });
  EXPECT_EQ(seen, ref.size());
}

}  // namespace
}  // namespace pollux::emu::nvme
