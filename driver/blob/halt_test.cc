// What a host crash and a base bdev's removal do to the store, and which writes survive them:
// crash() sends nothing more to the base, ends the I/O that was waiting, and the next load is
// dirty; a thin blob's allocation is durable before its write completes.
#include <gtest/gtest.h>

#include "driver/blob/blobstore.h"
#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::BlobFixture;
using testing::Outcome;

class Halt : public BlobFixture {
 protected:
  // The base's own count of writes: what the store sent after a crash shows here.
  uint64_t base_writes() {
    uint64_t n = 0;
    on(t0, [&] {
      mgr->get_stats(
          *mgr->find("m0"),
          [](const bdev::IoStats& s, void* a) {
            uint64_t n = 0;
            for (bdev::IoType t : {bdev::IoType::kWrite, bdev::IoType::kWriteZeroes,
                                   bdev::IoType::kUnmap, bdev::IoType::kFlush})
              n += s.by_type[static_cast<std::size_t>(t)].ops;
            *static_cast<uint64_t*>(a) = n;
          },
          &n);
    });
    s.settle();
    return n;
  }
  // crash() and step until the store is gone.
  void crash_store() {
    if (ch != nullptr) on(t1, [&] { bs->free_io_channel(ch); });
    ch = nullptr;
    Outcome r = run([&](Outcome* out) { bs->crash(Outcome::op, out); });
    EXPECT_EQ(r.rc, 0);
    bs = nullptr;
    s.settle();
  }
};

// A write that allocated a thin blob's cluster was acknowledged: it must not depend on a
// sync_md that never came (the host crashed right after, the device kept what it was sent).
TEST_F(Halt, AThinWriteAcknowledgedSurvivesACrashWithoutSync) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(8, /*thin=*/true);
  Blob* b = open(id);
  const auto data = write_pattern(b, 3 * kUnitsPerCluster + 5, 4, 11);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_FALSE(bs->report().was_clean);
  b = open(id);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  EXPECT_EQ(read_back(b, 3 * kUnitsPerCluster + 5, 4), data);
}

TEST_F(Halt, CrashSendsNothingMoreAndTheNextLoadIsDirty) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, true);
  Blob* b = open(id);
  write_pattern(b, 0, 8, 1);
  ASSERT_EQ(b->dirty(), false);             // the allocation was persisted with the write
  ASSERT_EQ(b->set_xattr("k", "v", 1), 0);  // dirty: a clean close would write it
  const uint64_t before = base_writes();
  crash_store();
  EXPECT_EQ(base_writes(), before);
  ASSERT_EQ(load(), 0);
  EXPECT_FALSE(bs->report().was_clean);
  b = open(id);
  const void* v;
  std::size_t n;
  EXPECT_EQ(b->get_xattr("k", &v, &n), -ENOENT);  // never synced: gone with the crash
}

// I/O after the crash fails (no base I/O); writes waiting for an allocation end too.
TEST_F(Halt, IoOnAHaltedStoreFailsWithoutReachingTheBase) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(4, true));
  write_pattern(b, 0, 1, 1);
  event::IoChannel* c = channel();
  Outcome w1, w2, r1;
  const uint64_t before = base_writes();
  on(t0, [&] { bs->crash(Outcome::op, &r1); });  // the store waits for the channel to go
  fill(0, 1, 2);
  on(t1, [&] {
    EXPECT_EQ(bs->write(b, c, mem(0), 0, 1, Outcome::op, &w1), 0);  // allocated cluster
    EXPECT_EQ(bs->write(b, c, mem(0), kUnitsPerCluster, 1, Outcome::op, &w2), 0);  // needs one
  });
  for (int i = 0; i < 100000 && !(w1.called && w2.called); ++i) s.fw->step();
  ASSERT_TRUE(w1.called && w2.called);
  EXPECT_EQ(w1.rc, -ENXIO);
  EXPECT_EQ(w2.rc, -ENXIO);
  EXPECT_FALSE(r1.called);  // a channel is still out
  on(t1, [&] { bs->free_io_channel(c); });
  ch = nullptr;
  for (int i = 0; i < 100000 && !r1.called; ++i) s.fw->step();
  EXPECT_TRUE(r1.called);
  bs = nullptr;
  EXPECT_EQ(base_writes(), before);
}

TEST_F(Halt, RemovalOfTheBaseIsReportedOnce) {
  int removed = 0;
  StoreOptions o;
  o.on_base_removed = [&] { ++removed; };
  ASSERT_EQ(init(o), 0);
  Blob* b = open(create(2, true));
  write_pattern(b, 0, 1, 1);
  bool gone = false;
  on(t0, [&] {
    EXPECT_EQ(mgr->unregister_bdev(
                  "m0", [](void* a) { *static_cast<bool*>(a) = true; }, &gone),
              0);
  });
  s.settle();
  EXPECT_EQ(removed, 1);
  EXPECT_FALSE(gone);  // the store still holds it open
  crash_store();
  s.settle();
  EXPECT_TRUE(gone);  // crash() closed it: the removal finished
}

// Metadata I/O that finds no bdev_io free (a busy base) waits for one instead of failing the
// operation (as SPDK's io_wait).
TEST_F(Halt, MetadataIoWaitsWhileTheBaseIsOutOfBdevIos) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2));
  ASSERT_EQ(b->set_xattr("k", "v", 1), 0);
  bdev::Desc* other = nullptr;
  event::IoChannel* och = nullptr;
  int held = 0;
  on(t0, [&] {  // a reader of the store's bdev on its metadata thread: one channel, one cache
    other = mgr->open("m0", false).value();
    och = mgr->get_io_channel(other);
    while (held < 100000 &&
           mgr->read(
               other, och, mem(0), 0, 1, [](bdev::BdevIo&, bool, void*) {}, nullptr) == 0)
      ++held;
  });
  ASSERT_LT(held, 100000);  // the pool ran dry
  Outcome synced;
  on(t0, [&] { bs->sync_md(b, Outcome::op, &synced); });
  for (int i = 0; i < 200000 && !synced.called; ++i) s.fw->step();
  ASSERT_TRUE(synced.called);
  EXPECT_EQ(synced.rc, 0);
  EXPECT_FALSE(b->dirty());
  s.settle();
  on(t0, [&] {
    mgr->put_io_channel(och);
    mgr->close(other);
  });
  s.settle();
}

}  // namespace
}  // namespace pollux::blob
