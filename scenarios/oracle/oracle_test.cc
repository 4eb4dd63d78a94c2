#include "scenarios/oracle/oracle.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "driver/env/pattern.h"

namespace pollux::scenarios::oracle {
namespace {

constexpr uint32_t kBs = 512;

// Data for `blocks` blocks at `lba` with a workload generation (pattern: LBA + generation).
std::vector<uint8_t> data(uint64_t lba, uint32_t blocks, uint64_t gen) {
  std::vector<uint8_t> buf(std::size_t{blocks} * kBs);
  env::fill_pattern(buf.data(), lba, blocks, kBs, gen);
  return buf;
}

uint64_t write(Oracle& o, uint64_t lba, uint32_t blocks, uint64_t gen, bool fua = false) {
  auto d = data(lba, blocks, gen);
  const uint64_t id = o.begin_write(lba, blocks, d.data(), fua);
  o.write_acked(id);
  return id;
}

Verdict read(Oracle& o, uint64_t lba, uint32_t blocks, uint64_t gen) {
  auto d = data(lba, blocks, gen);
  return o.check_read(lba, blocks, d.data());
}

TEST(Oracle, AcknowledgedWriteThenReadPasses) {
  Oracle o(kBs, 1024);
  write(o, 10, 4, 1);
  EXPECT_TRUE(read(o, 10, 4, 1).ok());
  EXPECT_TRUE(read(o, 11, 2, 1).ok());  // a sub-range of the write
  EXPECT_EQ(o.stats().violations, 0u);
}

TEST(Oracle, NeverWrittenBlockReadsZeroesButNotGarbage) {
  Oracle o(kBs, 1024);
  std::vector<uint8_t> zero(kBs, 0);
  EXPECT_TRUE(o.check_read(77, 1, zero.data()).ok());
  std::vector<uint8_t> garbage(kBs, 0xa5);
  Verdict v = o.check_read(77, 1, garbage.data());
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].kind, ViolationKind::kCorrupt);
  EXPECT_EQ(v.violations[0].lba, 77u);
  EXPECT_EQ(v.violations[0].expected_generations, std::vector<uint64_t>{0});
  EXPECT_NE(v.to_string().find("LBA 77: torn/corrupt: expected gen 0 (never written)"),
            std::string::npos)
      << v.to_string();
}

TEST(Oracle, DeclaredInitialContent) {
  std::vector<uint8_t> ff(kBs, 0xff);
  Oracle o(kBs, 16, hash_block(ff.data(), ff.size()));
  EXPECT_TRUE(o.check_read(3, 1, ff.data()).ok());
  std::vector<uint8_t> zero(kBs, 0);
  EXPECT_FALSE(o.check_read(3, 1, zero.data()).ok());
}

TEST(Oracle, StaleReadAfterAcknowledgedOverwrite) {
  Oracle o(kBs, 1024);
  const uint64_t g1 = write(o, 7, 1, 100);
  const uint64_t g2 = write(o, 7, 1, 200);
  EXPECT_TRUE(read(o, 7, 1, 200).ok());
  Verdict v = read(o, 7, 1, 100);
  ASSERT_EQ(v.violations.size(), 1u);
  const Violation& x = v.violations[0];
  EXPECT_EQ(x.kind, ViolationKind::kStale);
  EXPECT_EQ(x.lba, 7u);
  EXPECT_EQ(x.expected_generations, std::vector<uint64_t>{g2});
  EXPECT_TRUE(x.found_known);
  EXPECT_EQ(x.found_lba, 7u);
  EXPECT_EQ(x.found_generation, g1);
  const std::string s = x.to_string();
  EXPECT_NE(s.find("LBA 7: stale"), std::string::npos) << s;
  EXPECT_NE(s.find("expected gen " + std::to_string(g2) + " (acked)"), std::string::npos) << s;
  EXPECT_NE(s.find("found gen " + std::to_string(g1) + " of this LBA"), std::string::npos) << s;
  // Zeroes after a write: stale too (the never-written state).
  std::vector<uint8_t> zero(kBs, 0);
  Verdict z = o.check_read(7, 1, zero.data());
  ASSERT_EQ(z.violations.size(), 1u);
  EXPECT_EQ(z.violations[0].kind, ViolationKind::kStale);
  EXPECT_EQ(z.violations[0].found_generation, 0u);
}

TEST(Oracle, MisdirectedReadNamesSourceLba) {
  Oracle o(kBs, 1024);
  const uint64_t g5 = write(o, 5, 1, 1);
  const uint64_t g9 = write(o, 9, 1, 1);
  auto d5 = data(5, 1, 1);
  Verdict v = o.check_read(9, 1, d5.data());
  ASSERT_EQ(v.violations.size(), 1u);
  const Violation& x = v.violations[0];
  EXPECT_EQ(x.kind, ViolationKind::kMisdirected);
  EXPECT_EQ(x.lba, 9u);
  EXPECT_EQ(x.expected_generations, std::vector<uint64_t>{g9});
  EXPECT_EQ(x.found_lba, 5u);
  EXPECT_EQ(x.found_generation, g5);
  EXPECT_NE(x.to_string().find("of LBA 5"), std::string::npos) << x.to_string();
}

TEST(Oracle, TornBlockIsCorrupt) {
  Oracle o(kBs, 1024);
  write(o, 3, 1, 1);
  write(o, 3, 1, 2);
  auto old_data = data(3, 1, 1);
  auto new_data = data(3, 1, 2);
  std::vector<uint8_t> torn(new_data);
  std::copy(old_data.begin() + kBs / 2, old_data.end(), torn.begin() + kBs / 2);
  Verdict v = o.check_read(3, 1, torn.data());
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].kind, ViolationKind::kCorrupt);
  EXPECT_FALSE(v.violations[0].found_known);
  // One bad block among several: only that block is named.
  write(o, 20, 4, 5);
  auto d = data(20, 4, 5);
  d[2 * kBs + 100] ^= 0x10;
  Verdict w = o.check_read(20, 4, d.data());
  ASSERT_EQ(w.violations.size(), 1u);
  EXPECT_EQ(w.violations[0].lba, 22u);
}

TEST(Oracle, OverlappingWritesInFlightAcceptEitherVersion) {
  Oracle o(kBs, 1024);
  const uint64_t a = write(o, 0, 1, 1);
  auto b_data = data(0, 1, 2);
  auto c_data = data(0, 1, 3);
  const uint64_t b = o.begin_write(0, 1, b_data.data());
  const uint64_t c = o.begin_write(0, 1, c_data.data());
  EXPECT_EQ(o.acceptable_generations(0), (std::vector<uint64_t>{a, b, c}));
  o.write_acked(c);
  // A finished before C began: gone. B still in flight: may land after C.
  EXPECT_EQ(o.acceptable_generations(0), (std::vector<uint64_t>{b, c}));
  EXPECT_FALSE(read(o, 0, 1, 1).ok());
  o.write_acked(b);
  // B and C overlapped in time: the device may have applied them in either order.
  EXPECT_EQ(o.acceptable_generations(0), (std::vector<uint64_t>{b, c}));
  EXPECT_TRUE(o.check_read(0, 1, c_data.data()).ok());
  // That read resolved the block: C is on the media, B cannot come back.
  EXPECT_EQ(o.acceptable_generations(0), std::vector<uint64_t>{c});
  EXPECT_FALSE(o.check_read(0, 1, b_data.data()).ok());
  const uint64_t d = write(o, 0, 1, 4);
  EXPECT_EQ(o.acceptable_generations(0), std::vector<uint64_t>{d});
}

TEST(Oracle, PartiallyOverlappingMultiBlockWrites) {
  Oracle o(kBs, 1024);
  auto x = data(0, 4, 1);  // LBAs 0-3
  auto y = data(2, 4, 2);  // LBAs 2-5
  const uint64_t ix = o.begin_write(0, 4, x.data());
  const uint64_t iy = o.begin_write(2, 4, y.data());
  o.write_acked(ix);
  o.write_acked(iy);
  EXPECT_EQ(o.acceptable_generations(1), std::vector<uint64_t>{ix});
  EXPECT_EQ(o.acceptable_generations(3), (std::vector<uint64_t>{ix, iy}));
  EXPECT_EQ(o.acceptable_generations(5), std::vector<uint64_t>{iy});
  EXPECT_TRUE(o.check_read(2, 4, y.data()).ok());
  EXPECT_TRUE(o.check_read(0, 2, x.data()).ok());
}

TEST(Oracle, FailedWriteLeavesOldOrNewUntilNextAcknowledgedWrite) {
  Oracle o(kBs, 1024);
  const uint64_t a = write(o, 4, 1, 1);
  auto b_data = data(4, 1, 2);
  const uint64_t b = o.begin_write(4, 1, b_data.data());
  o.write_failed(b);
  EXPECT_EQ(o.acceptable_generations(4), (std::vector<uint64_t>{a, b}));
  const uint64_t c = write(o, 4, 1, 3);
  EXPECT_EQ(o.acceptable_generations(4), std::vector<uint64_t>{c});
  Verdict v = o.check_read(4, 1, b_data.data());
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].kind, ViolationKind::kStale);
  EXPECT_EQ(v.violations[0].found_generation, b);
  EXPECT_THROW(o.write_failed(b), std::logic_error);
  EXPECT_THROW(o.write_acked(12345), std::logic_error);
}

TEST(Oracle, FailedWriteNewDataAccepted) {
  Oracle o(kBs, 1024);
  write(o, 4, 1, 1);
  auto b_data = data(4, 1, 2);
  o.write_failed(o.begin_write(4, 1, b_data.data()));
  EXPECT_TRUE(o.check_read(4, 1, b_data.data()).ok());
}

TEST(Oracle, PowerLossWithoutPlpMayLoseUnflushedWrites) {
  // Acknowledged but not flushed: either version may come back.
  for (int pick = 0; pick < 2; ++pick) {
    Oracle o(kBs, 1024);
    const uint64_t a = write(o, 1, 1, 1);
    o.flush_acked();
    const uint64_t b = write(o, 1, 1, 2);
    o.power_loss(false);
    EXPECT_EQ(o.acceptable_generations(1), (std::vector<uint64_t>{a, b}));
    EXPECT_TRUE(read(o, 1, 1, pick == 0 ? 1 : 2).ok());
    // Once read back, the block must not flip.
    EXPECT_FALSE(read(o, 1, 1, pick == 0 ? 2 : 1).ok());
  }
}

TEST(Oracle, PowerLossWithoutPlpMustKeepFlushedAndFuaWrites) {
  Oracle o(kBs, 1024);
  write(o, 1, 1, 1);  // LBA 1: flushed
  write(o, 2, 1, 1);  // LBA 2: flushed, then overwritten with FUA, then unflushed
  o.flush_acked();
  const uint64_t fua = write(o, 2, 1, 2, /*fua=*/true);
  const uint64_t late = write(o, 2, 1, 3);
  o.power_loss(false);

  std::vector<uint8_t> zero(kBs, 0);
  Verdict v1 = o.check_read(1, 1, zero.data());
  ASSERT_EQ(v1.violations.size(), 1u);
  EXPECT_EQ(v1.violations[0].kind, ViolationKind::kLostDurableWrite);
  EXPECT_NE(v1.to_string().find("LBA 1: lost durable write"), std::string::npos)
      << v1.to_string();

  EXPECT_EQ(o.acceptable_generations(2), (std::vector<uint64_t>{fua, late}));
  Verdict v2 = read(o, 2, 1, 1);  // the flushed version, older than the FUA write
  ASSERT_EQ(v2.violations.size(), 1u);
  EXPECT_EQ(v2.violations[0].kind, ViolationKind::kLostDurableWrite);
  EXPECT_EQ(v2.violations[0].lba, 2u);
  EXPECT_TRUE(read(o, 2, 1, 2).ok());  // the FUA write survived: fine
}

TEST(Oracle, PreciseFlushCoversOnlyWritesCompletedBeforeSubmission) {
  Oracle o(kBs, 1024);
  const uint64_t a = write(o, 0, 1, 1);
  const uint64_t token = o.begin_flush();
  const uint64_t b = write(o, 0, 1, 2);  // acknowledged while the flush was running
  o.flush_acked(token);
  o.power_loss(false);
  EXPECT_EQ(o.acceptable_generations(0), (std::vector<uint64_t>{a, b}));
}

TEST(Oracle, PowerLossWithPlpKeepsEveryAcknowledgedWrite) {
  Oracle o(kBs, 1024);
  write(o, 6, 1, 1);
  const uint64_t b = write(o, 6, 1, 2);  // never flushed
  auto c_data = data(6, 1, 3);
  const uint64_t c = o.begin_write(6, 1, c_data.data());  // in flight at the power loss
  o.power_loss(true);
  EXPECT_EQ(o.acceptable_generations(6), (std::vector<uint64_t>{b, c}));
  Verdict v = read(o, 6, 1, 1);
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].kind, ViolationKind::kLostDurableWrite);
  // The in-flight write can no longer complete; aborting it is fine.
  EXPECT_THROW(o.write_acked(c), std::logic_error);
  EXPECT_NO_THROW(o.write_failed(c));
  EXPECT_TRUE(o.check_read(6, 1, c_data.data()).ok());
}

TEST(Oracle, NeverFlushedWritesMayAllVanish) {
  Oracle o(kBs, 1024);
  write(o, 8, 1, 1);
  write(o, 8, 1, 2);
  o.power_loss(false);
  std::vector<uint8_t> zero(kBs, 0);
  EXPECT_TRUE(o.check_read(8, 1, zero.data()).ok());
}

TEST(Oracle, VerifyAllSweepsWrittenBlocks) {
  Oracle o(kBs, 1024);
  std::map<uint64_t, std::vector<uint8_t>> media;
  for (uint64_t lba : {30u, 10u, 20u}) {
    write(o, lba, 1, 1);
    media[lba] = data(lba, 1, 1);
  }
  o.flush_acked();
  o.power_loss(false);
  media[20] = data(20, 1, 0);  // a different generation: corrupt for the oracle
  std::vector<uint64_t> order;
  Verdict v = o.verify_all([&](uint64_t lba, void* buf) {
    order.push_back(lba);
    std::copy(media[lba].begin(), media[lba].end(), static_cast<uint8_t*>(buf));
  });
  EXPECT_EQ(order, (std::vector<uint64_t>{10, 20, 30}));
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].lba, 20u);
}

TEST(Oracle, RejectsBadRanges) {
  Oracle o(kBs, 16);
  auto d = data(15, 2, 1);
  EXPECT_THROW(o.begin_write(15, 2, d.data()), std::out_of_range);
  EXPECT_THROW(o.check_read(16, 1, d.data()), std::out_of_range);
  EXPECT_THROW(o.begin_write(0, 0, d.data()), std::out_of_range);
}

TEST(Oracle, MemoryStaysBoundedWithFlushes) {
  Oracle o(kBs, 1 << 20);
  auto d = data(0, 1, 0);
  for (uint64_t i = 0; i < 20000; ++i) {
    const uint64_t lba = (i * 7919) % 256;
    d[8] = static_cast<uint8_t>(i);  // distinct content
    d[9] = static_cast<uint8_t>(i >> 8);
    o.write_acked(o.begin_write(lba, 1, d.data()));
    if (i % 64 == 0) o.flush_acked();
  }
  const OracleStats s = o.stats();
  EXPECT_EQ(s.tracked_blocks, 256u);
  EXPECT_LE(s.tracked_versions, 3u * 256u);
  EXPECT_EQ(s.writes_in_flight, 0u);
}

TEST(Oracle, HashSeparatesSmallDifferences) {
  std::vector<uint8_t> a(4096, 0), b(4096, 0);
  b[4095] = 1;
  EXPECT_NE(hash_block(a.data(), a.size()), hash_block(b.data(), b.size()));
  b[4095] = 0;
  b[0] = 1;
  EXPECT_NE(hash_block(a.data(), a.size()), hash_block(b.data(), b.size()));
  // Swapping two words changes the hash.
  std::vector<uint8_t> c(64, 0), e(64, 0);
  c[0] = 1;
  e[8] = 1;
  EXPECT_NE(hash_block(c.data(), c.size()), hash_block(e.data(), e.size()));
  EXPECT_NE(hash_block(a.data(), 4096), hash_block(a.data(), 4095));
}

// A model SSD with a volatile write cache: writes land in the cache (FUA: on the media),
// the cache drains to the media at random, Flush drains it, power loss drops it. Writes in
// flight together are applied in random order; failed writes are applied or not at random.
// A correct device must give no violations; one that ignores Flush must be caught.
struct ModelSsd {
  std::map<uint64_t, std::vector<uint8_t>> media, cache;
  bool honour_flush = true;
  void apply(uint64_t lba, const std::vector<uint8_t>& d, bool fua) {
    if (fua) {
      media[lba] = d;
      cache.erase(lba);
    } else {
      cache[lba] = d;
    }
  }
  void flush() {
    if (!honour_flush) return;
    for (auto& [lba, d] : cache) media[lba] = d;
    cache.clear();
  }
  std::vector<uint8_t> read(uint64_t lba) const {
    if (auto it = cache.find(lba); it != cache.end()) return it->second;
    if (auto it = media.find(lba); it != media.end()) return it->second;
    return std::vector<uint8_t>(kBs, 0);
  }
};

std::vector<Violation> run_model(bool honour_flush, bool plp, uint64_t seed) {
  constexpr uint64_t kLbas = 64;
  Oracle o(kBs, kLbas);
  ModelSsd ssd;
  ssd.honour_flush = honour_flush;
  std::mt19937_64 rng(seed);
  uint64_t gen = 0;
  std::vector<Violation> all;
  auto keep = [&](Verdict v) {
    for (auto& x : v.violations) all.push_back(std::move(x));
  };
  for (int op = 0; op < 20000; ++op) {
    const uint64_t lba = rng() % kLbas;
    switch (rng() % 16) {
      case 0:
      case 1:
      case 2:
      case 3: {  // one write
        const bool fua = rng() % 8 == 0;
        auto d = data(lba, 1, ++gen);
        const uint64_t id = o.begin_write(lba, 1, d.data(), fua);
        ssd.apply(lba, d, fua || plp);
        o.write_acked(id);
        break;
      }
      case 4: {  // two overlapping writes to one block, applied and acked in random order
        auto d1 = data(lba, 1, ++gen);
        auto d2 = data(lba, 1, ++gen);
        const uint64_t i1 = o.begin_write(lba, 1, d1.data());
        const uint64_t i2 = o.begin_write(lba, 1, d2.data());
        if (rng() & 1) {
          ssd.apply(lba, d1, plp);
          ssd.apply(lba, d2, plp);
        } else {
          ssd.apply(lba, d2, plp);
          ssd.apply(lba, d1, plp);
        }
        if (rng() & 1) {
          o.write_acked(i1);
          o.write_acked(i2);
        } else {
          o.write_acked(i2);
          o.write_acked(i1);
        }
        break;
      }
      case 5: {  // a failed write, maybe applied
        auto d = data(lba, 1, ++gen);
        const uint64_t id = o.begin_write(lba, 1, d.data());
        if (rng() & 1) ssd.apply(lba, d, plp);
        o.write_failed(id);
        break;
      }
      case 6: {  // a write in flight at a power loss (sometimes), else a plain flush
        if (rng() % 64 == 0) {
          auto d = data(lba, 1, ++gen);
          const uint64_t id = o.begin_write(lba, 1, d.data());
          if (rng() & 1) ssd.apply(lba, d, true);
          // the cache drains partially before power goes
          for (auto it = ssd.cache.begin(); it != ssd.cache.end();) {
            if (rng() % 3 == 0) {
              ssd.media[it->first] = it->second;
              it = ssd.cache.erase(it);
            } else {
              ++it;
            }
          }
          ssd.cache.clear();
          o.power_loss(plp);
          o.write_failed(id);  // aborted after recovery
          keep(o.verify_all([&](uint64_t l, void* buf) {
            auto r = ssd.read(l);
            std::copy(r.begin(), r.end(), static_cast<uint8_t*>(buf));
          }));
        } else {
          ssd.flush();
          o.flush_acked();
        }
        break;
      }
      case 7: {  // the cache drains one block
        if (auto it = ssd.cache.find(lba); it != ssd.cache.end()) {
          ssd.media[lba] = it->second;
          ssd.cache.erase(it);
        }
        break;
      }
      default: {  // read one block
        auto r = ssd.read(lba);
        keep(o.check_read(lba, 1, r.data()));
        break;
      }
    }
  }
  EXPECT_GT(o.stats().power_losses, 10u);
  return all;
}

TEST(Oracle, ModelSsdWithVolatileCachePasses) {
  for (uint64_t seed : {1, 2, 3}) {
    auto v = run_model(/*honour_flush=*/true, /*plp=*/false, seed);
    EXPECT_TRUE(v.empty()) << "seed " << seed << ": " << v.front().to_string();
  }
}

TEST(Oracle, ModelSsdWithPlpPasses) {
  auto v = run_model(/*honour_flush=*/true, /*plp=*/true, 4);
  EXPECT_TRUE(v.empty()) << v.front().to_string();
}

TEST(Oracle, ModelSsdIgnoringFlushIsCaught) {
  auto v = run_model(/*honour_flush=*/false, /*plp=*/false, 5);
  ASSERT_FALSE(v.empty());
  bool lost = false;
  for (const auto& x : v) lost |= x.kind == ViolationKind::kLostDurableWrite;
  EXPECT_TRUE(lost) << v.front().to_string();
}

// Content with a meaning of its own (a read buffer's poison: the read moved no data) is
// named in the violation, which stays a corruption.
TEST(Oracle, NamedContentIsNamedInTheViolation) {
  Oracle o(512, 64);
  std::vector<uint8_t> w(512, 7), poison(512, 0xdb);
  o.write_acked(o.begin_write(3, 1, w.data()));
  o.name_content(poison.data(), "the poison: no data transferred");
  const Verdict v = o.check_read(3, 1, poison.data());
  ASSERT_EQ(v.violations.size(), 1u);
  EXPECT_EQ(v.violations[0].kind, ViolationKind::kCorrupt);
  EXPECT_NE(v.violations[0].to_string().find("no data transferred"), std::string::npos)
      << v.violations[0].to_string();
  std::vector<uint8_t> other(512, 9);
  EXPECT_NE(o.check_read(3, 1, other.data()).to_string().find("unknown content"), std::string::npos);
}

}  // namespace
}  // namespace pollux::scenarios::oracle
