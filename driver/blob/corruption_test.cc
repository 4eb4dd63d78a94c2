// Damaged metadata on the device: each kind is named in the load report and costs at most the
// blob it belongs to (two owners of one cluster fail the whole load); then a seeded sweep of
// random page damage where every load must end in a clear error or a consistent store.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>

#include "driver/blob/blobstore.h"
#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::Outcome;

class Corruption : public testing::BlobFixture {
 protected:
  void SetUp() override {
    BlobFixture::SetUp();
    StoreOptions o;
    o.md_pages = 64;
    ASSERT_EQ(init(o), 0);
    thick = create(3, false, {{"name", {'t'}}});
    thin = create(8, true);
    Blob* b = open(thin);
    write_pattern(b, 0, 4, 1);
    write_pattern(b, 5 * kUnitsPerCluster, 4, 2);
    ASSERT_EQ(close(b), 0);
    snap = snapshot(thin);
    cloned = clone(snap);
    big = create(1);
    b = open(big);
    std::vector<uint8_t> v(1500, 3);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(b->set_xattr("x" + std::to_string(i), v.data(), v.size()), 0);
    ASSERT_EQ(close(b), 0);
    ASSERT_GE(bs->find(big)->md_pages().size(), 3u);
    sb = bs->super_block();
    ASSERT_EQ(unload(), 0);
    image = read_pages(0, sb.md_start + sb.md_pages);
  }
  void TearDown() override {
    close_raw();
    BlobFixture::TearDown();
  }
  // The store claims its bdev: raw access is opened around edits and closed before a load.
  event::IoChannel* raw_channel() {
    if (!raw) {
      on(t0, [&] {
        auto d = mgr->open("m0", true);
        ASSERT_TRUE(d.ok());
        raw = d.value();
      });
    }
    if (!raw_ch) on(t0, [&] { raw_ch = mgr->get_io_channel(raw); });
    return raw_ch;
  }
  void close_raw() {
    if (raw_ch) on(t0, [&] { mgr->put_io_channel(raw_ch); });
    raw_ch = nullptr;
    s.settle();
    if (raw) on(t0, [&] { mgr->close(raw); });
    raw = nullptr;
    s.settle();
  }
  int load() {
    close_raw();
    return BlobFixture::load();
  }
  static void io_done(bdev::BdevIo&, bool ok, void* a) { *static_cast<Outcome*>(a) = {true, ok ? 0 : -EIO}; }
  std::vector<uint8_t> read_pages(uint64_t page, uint64_t n) {
    std::vector<uint8_t> out;
    for (uint64_t i = 0; i < n; ++i) {
      Outcome r = run([&](Outcome* o) { mgr->read(raw, raw_channel(), mem(0), (page + i) * 8, 8, io_done, o); });
      EXPECT_EQ(r.rc, 0);
      out.insert(out.end(), mem(0), mem(kPageSize));
    }
    return out;
  }
  void write_page(uint64_t page, const uint8_t* data) {
    std::memcpy(mem(0), data, kPageSize);
    Outcome r = run([&](Outcome* o) { mgr->write(raw, raw_channel(), mem(0), page * 8, 8, io_done, o); });
    EXPECT_EQ(r.rc, 0);
  }
  // Puts the clean image back (pages that differ only).
  void restore() {
    auto now = read_pages(0, sb.md_start + sb.md_pages);
    for (uint64_t p = 0; p * kPageSize < image.size(); ++p)
      if (std::memcmp(now.data() + p * kPageSize, image.data() + p * kPageSize, kPageSize) != 0)
        write_page(p, image.data() + p * kPageSize);
  }
  std::vector<uint8_t> md_page(uint32_t i) {
    const uint8_t* p = image.data() + (sb.md_start + i) * kPageSize;
    return {p, p + kPageSize};
  }
  void put_md_page(uint32_t i, std::vector<uint8_t> p, bool seal = true) {
    if (seal) {
      const uint32_t c = crc32c(p.data(), kPageCrcOffset);
      std::memcpy(p.data() + kPageCrcOffset, &c, 4);
    }
    write_page(sb.md_start + i, p.data());
  }
  // The md-region pages of a blob in the clean image.
  std::vector<uint32_t> pages_of(BlobId id) {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < sb.md_pages; ++i) {
      auto p = md_page(i);
      BlobId owner;
      std::memcpy(&owner, p.data(), 8);
      if (owner == id) out.push_back(i);
    }
    return out;
  }
  bool report_mentions(const std::string& s) {
    for (const std::string& e : bs->report().errors)
      if (e.find(s) != std::string::npos) return true;
    return false;
  }
  // A loaded store must be self-consistent whatever it skipped.
  void check_consistent() {
    std::set<uint64_t> owned;
    for (BlobId id : bs->blob_ids()) {
      const Blob* b = bs->find(id);
      ASSERT_EQ(b->metadata().clusters.size(), b->num_clusters());
      for (uint64_t c : b->metadata().clusters) {
        if (c == 0) continue;
        ASSERT_GE(c, sb.first_data_cluster);
        ASSERT_LT(c, sb.total_clusters);
        ASSERT_TRUE(owned.insert(c).second) << "cluster " << c << " has two owners";
      }
      if (b->parent_id() != kInvalidBlobId) {
        ASSERT_NE(bs->find(b->parent_id()), nullptr);
      }
    }
    ASSERT_EQ(bs->free_clusters(), sb.total_clusters - sb.first_data_cluster - owned.size());
  }

  BlobId thick = 0, thin = 0, snap = 0, cloned = 0, big = 0;
  SuperBlock sb;
  bdev::Desc* raw = nullptr;
  event::IoChannel* raw_ch = nullptr;
  std::vector<uint8_t> image;
};

TEST_F(Corruption, IntactImageLoadsClean) {
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->report().was_clean);
  EXPECT_EQ(bs->blob_ids().size(), 5u);
  check_consistent();
}

TEST_F(Corruption, BadCrcSkipsOnlyThatBlob) {
  auto p = md_page(pages_of(thick)[0]);
  p[200] ^= 1;
  put_md_page(pages_of(thick)[0], p, /*seal=*/false);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(thick), nullptr);
  EXPECT_NE(bs->find(big), nullptr);
  EXPECT_NE(bs->find(cloned), nullptr);
  EXPECT_TRUE(report_mentions("CRC mismatch (claims blob"));
  check_consistent();
}

TEST_F(Corruption, BrokenChainSkipsTheBlob) {
  const auto pages = pages_of(big);
  std::vector<uint8_t> zero(kPageSize, 0);
  put_md_page(pages[1], zero, false);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(big), nullptr);
  EXPECT_EQ(bs->report().blobs_skipped, 1u);
  check_consistent();
}

TEST_F(Corruption, ClusterOutOfRangeSkipsTheBlob) {
  // Re-encode the thick blob with one cluster pointing past the device.
  auto p = md_page(pages_of(thick)[0]);
  // Its first extent run's device cluster sits after the flags descriptor and extent header.
  const std::size_t run = 32 + 36 + 4 + 16;
  const uint64_t far = sb.total_clusters + 5;
  std::memcpy(p.data() + run, &far, 8);
  put_md_page(pages_of(thick)[0], p);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(thick), nullptr);
  EXPECT_TRUE(report_mentions("cluster out of range"));
  check_consistent();
}

TEST_F(Corruption, ClusterInTheMetadataAreaSkipsTheBlob) {
  auto p = md_page(pages_of(thick)[0]);
  const uint64_t inside = 1;
  std::memcpy(p.data() + 32 + 36 + 4 + 16, &inside, 8);
  put_md_page(pages_of(thick)[0], p);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(thick), nullptr);
  EXPECT_TRUE(report_mentions("metadata area"));
}

TEST_F(Corruption, UnknownDescriptorSkipsTheBlob) {
  auto p = md_page(pages_of(thick)[0]);
  p[32 + 36] = 77;
  put_md_page(pages_of(thick)[0], p);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(thick), nullptr);
  EXPECT_TRUE(report_mentions("unknown descriptor type 77"));
}

TEST_F(Corruption, TwoOwnersOfAClusterFailTheLoad) {
  // Point the big blob's only cluster at one of the thick blob's.
  auto victim = md_page(pages_of(thick)[0]);
  uint64_t stolen;
  std::memcpy(&stolen, victim.data() + 32 + 36 + 4 + 16, 8);
  const uint32_t first = pages_of(big)[0];
  auto p = md_page(first);
  std::memcpy(p.data() + 32 + 36 + 4 + 16, &stolen, 8);
  put_md_page(first, p);
  EXPECT_EQ(load(), -EILSEQ);
  EXPECT_EQ(bs, nullptr);
}

TEST_F(Corruption, MissingParentSkipsTheClone) {
  for (uint32_t i : pages_of(snap)) put_md_page(i, std::vector<uint8_t>(kPageSize, 0), false);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(snap), nullptr);
  EXPECT_EQ(bs->find(thin), nullptr);
  EXPECT_EQ(bs->find(cloned), nullptr);
  EXPECT_TRUE(report_mentions("missing"));
  check_consistent();
}

TEST_F(Corruption, BadSuperBlockFailsTheLoad) {
  auto p = read_pages(0, 1);
  p[300] ^= 4;
  write_page(0, p.data());
  EXPECT_EQ(load(), -EILSEQ);
}

TEST_F(Corruption, SkippedBlobsKeepTheirPagesForInspection) {
  auto p = md_page(pages_of(thick)[0]);
  p[32 + 36] = 77;
  put_md_page(pages_of(thick)[0], p);
  ASSERT_EQ(load(), 0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(report_mentions("unknown descriptor type 77"));  // still there, still named
}

uint64_t seed_from_env(uint64_t fallback) {
  const char* s = std::getenv("POLLUX_SEED");
  return s ? std::strtoull(s, nullptr, 0) : fallback;
}

TEST_F(Corruption, RandomPageDamageSweep) {
  const uint64_t seed = seed_from_env(7);
  const char* n_env = std::getenv("POLLUX_LOADS");
  const uint64_t loads = n_env ? std::strtoull(n_env, nullptr, 0) : 5000;
  std::printf("corrupt-load sweep: seed %" PRIu64 " (POLLUX_SEED), %" PRIu64 " loads (POLLUX_LOADS)\n",
              seed, loads);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> used;
  for (BlobId id : {thick, thin, snap, cloned, big})
    for (uint32_t p : pages_of(id)) used.push_back(p);
  uint64_t ok = 0, failed = 0, skipped = 0;
  for (uint64_t it = 0; it < loads; ++it) {
    restore();
    const int pages_hit = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < pages_hit; ++k) {
      const uint32_t i = rng() % 4 ? used[rng() % used.size()] : static_cast<uint32_t>(rng() % sb.md_pages);
      auto p = md_page(i);
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % 3 ? rng() % 256 : rng() % kPageSize;
        p[at] = static_cast<uint8_t>(rng() % 2 ? rng() : p[at] ^ (1u << (rng() % 8)));
      }
      put_md_page(i, p, rng() % 6 != 0);
    }
    const int rc = load();
    if (rc != 0) {
      ++failed;
      ASSERT_EQ(bs, nullptr);
      ASSERT_TRUE(rc == -EILSEQ) << "seed " << seed << " load " << it << ": rc " << rc;
      continue;
    }
    ++ok;
    skipped += bs->report().blobs_skipped;
    check_consistent();
    if (HasFatalFailure()) {
      ADD_FAILURE() << "seed " << seed << " load " << it;
      return;
    }
    // Every surviving blob can be read end to end without harm.
    for (BlobId id : bs->blob_ids()) {
      Blob* b = open(id);
      const uint64_t n = std::min<uint64_t>(b->num_io_units(), 2 * kUnitsPerCluster);
      if (n) {
        EXPECT_EQ(read(b, 0, n), 0);
      }
      close(b);
    }
    crash();
  }
  std::printf("corrupt-load sweep: %" PRIu64 " loaded (%" PRIu64 " blobs skipped with an error), %" PRIu64
              " refused (-EILSEQ)\n", ok, skipped, failed);
}

}  // namespace
}  // namespace pollux::blob
