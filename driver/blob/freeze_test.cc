// Metadata changes of a blob under I/O: snapshot, inflate, decouple and resize freeze the
// blob's I/O — requests in flight end before the change, new ones wait in their channel and
// go on after it, in order — so no write lands in clusters the change is moving.
#include <gtest/gtest.h>

#include "driver/blob/blobstore.h"
#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::BlobFixture;
using testing::Outcome;

class Freeze : public BlobFixture {
 protected:
  // Submits a write of n units at `off` from mem(at) on t1 without waiting.
  void start_write(Blob* b, uint64_t off, uint64_t n, std::size_t at, Outcome* out) {
    on(t1, [&] { ASSERT_EQ(bs->write(b, channel(), mem(at), off, n, Outcome::op, out), 0); });
  }
  void until(const std::function<bool()>& done) {
    for (int i = 0; i < 200000 && !done(); ++i) s.fw->step();
    ASSERT_TRUE(done());
  }
};

// A write in flight when the snapshot is asked for belongs to the snapshot; one submitted
// after waits, then goes to the blob (now a clone), never into the snapshot's clusters.
TEST_F(Freeze, SnapshotTakesTheWritesInFlightAndParksTheRest) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4);
  Blob* b = open(id);
  fill(0, 8, 1);         // A at mem(0)
  fill(64 << 10, 8, 2);  // B at mem(64 KiB)
  const std::vector<uint8_t> a(mem(0), mem(8 * 512)), bb(mem(64 << 10), mem((64 << 10) + 8 * 512));
  Outcome wa, wb, snap;
  start_write(b, 0, 8, 0, &wa);
  on(t0, [&] { bs->snapshot(id, {}, Outcome::with_id, &snap); });
  start_write(b, kUnitsPerCluster, 8, 64 << 10, &wb);
  until([&] { return wa.called && wb.called && snap.called; });
  EXPECT_EQ(wa.rc, 0);
  EXPECT_EQ(wb.rc, 0);
  ASSERT_EQ(snap.rc, 0);
  Blob* s = open(snap.id);
  EXPECT_EQ(read_back(s, 0, 8), a);
  EXPECT_EQ(read_back(s, kUnitsPerCluster, 8), std::vector<uint8_t>(8 * 512, 0));  // not B
  EXPECT_EQ(read_back(b, 0, 8), a);
  EXPECT_EQ(read_back(b, kUnitsPerCluster, 8), bb);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);  // B's cluster copied from the snapshot
}

// Requests parked by a freeze complete after the change and in the order they came.
TEST_F(Freeze, ParkedRequestsGoOnInOrderAfterTheChange) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, /*thin=*/true);
  Blob* b = open(id);
  write_pattern(b, 0, 1, 9);
  std::vector<int> order;
  struct Tag {
    std::vector<int>* order;
    int n;
    static void cb(void* a, int) {
      auto* t = static_cast<Tag*>(a);
      t->order->push_back(t->n);
    }
  };
  Tag tags[4] = {{&order, 0}, {&order, 1}, {&order, 2}, {&order, 3}};
  Outcome inflated;
  on(t0, [&] { bs->inflate(id, Outcome::op, &inflated); });  // freezes at once
  on(t1, [&] {
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(bs->write(b, channel(), mem(0), kUnitsPerCluster * i + 1, 1, Tag::cb, &tags[i]), 0);
  });
  until([&] { return inflated.called && order.size() == 4; });
  EXPECT_EQ(inflated.rc, 0);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(b->is_thin());
}

// Other blobs' I/O is not held by one blob's freeze.
TEST_F(Freeze, OnlyTheChangedBlobWaits) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  Blob* other = open(create(2));
  Outcome snap, w;
  on(t0, [&] { bs->snapshot(id, {}, Outcome::with_id, &snap); });
  fill(0, 1, 3);
  start_write(other, 0, 1, 0, &w);
  for (int i = 0; i < 50 && !w.called; ++i) s.fw->step();
  EXPECT_TRUE(w.called);  // done while the snapshot may still run
  until([&] { return snap.called; });
  EXPECT_EQ(snap.rc, 0);
  (void)b;
}

}  // namespace
}  // namespace pollux::blob
