// The blobstore's snapshots, clones, inflate and decouple, sync and recovery, metadata pages
// running out, queued operations: on a malloc bdev in step mode (test_util.h).
#include "driver/blob/blobstore.h"

#include <gtest/gtest.h>

#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::BlobFixture;
using testing::Outcome;

class Store : public BlobFixture {};

// ------------------------------------------------------------- snapshots and clones ----

TEST_F(Store, SnapshotFreezesDataAndTheBlobGoesOn) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  auto before = write_pattern(b, 0, 2 * kUnitsPerCluster, 1);
  const BlobId sid = snapshot(id);
  Blob* s = open(sid);
  EXPECT_TRUE(s->is_snapshot());
  EXPECT_TRUE(s->is_read_only());
  EXPECT_TRUE(b->is_clone());
  EXPECT_TRUE(b->is_thin());
  EXPECT_EQ(b->parent_id(), sid);
  EXPECT_EQ(s->clones(), std::vector<BlobId>{id});
  EXPECT_EQ(b->num_allocated_clusters(), 0u);
  EXPECT_EQ(read_back(b, 0, 2 * kUnitsPerCluster), before);  // read through the snapshot
  auto after = write_pattern(b, 5, 1, 2);  // copy-on-write of cluster 0
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  EXPECT_EQ(read_back(s, 0, 2 * kUnitsPerCluster), before);
  auto mixed = before;
  std::copy(after.begin(), after.end(), mixed.begin() + 5 * 512);
  EXPECT_EQ(read_back(b, 0, 2 * kUnitsPerCluster), mixed);
  ASSERT_EQ(close(b), 0);
  ASSERT_EQ(close(s), 0);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  s = open(sid);
  EXPECT_EQ(read_back(s, 0, 2 * kUnitsPerCluster), before);
  EXPECT_EQ(read_back(b, 0, 2 * kUnitsPerCluster), mixed);
  EXPECT_EQ(bs->report().snapshots_completed + bs->report().snapshots_rolled_back, 0u);
  close(b);
  close(s);
}

TEST_F(Store, SnapshotErrors) {
  ASSERT_EQ(init(), 0);
  int rc = 0;
  snapshot(99, &rc);
  EXPECT_EQ(rc, -ENOENT);
  const BlobId sid = snapshot(create(1));
  snapshot(sid, &rc);
  EXPECT_EQ(rc, -EINVAL);  // no snapshot of a snapshot
}

TEST_F(Store, SnapshotOfAThinBlobStaysThin) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, true);
  Blob* b = open(id);
  write_pattern(b, 0, 1, 5);
  const BlobId sid = snapshot(id);
  EXPECT_TRUE(bs->find(sid)->is_thin());
  EXPECT_EQ(bs->find(sid)->num_allocated_clusters(), 1u);
  close(b);
}

TEST_F(Store, CloneReadsTheSnapshotAndDivergesFromIt) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  auto base = write_pattern(b, 0, 8, 7);
  const BlobId sid = snapshot(id);
  const BlobId cid = clone(sid);
  Blob* c = open(cid);
  EXPECT_TRUE(c->is_clone());
  EXPECT_EQ(c->parent_id(), sid);
  EXPECT_EQ(read_back(c, 0, 8), base);
  auto mine = write_pattern(c, 0, 8, 8);
  EXPECT_EQ(read_back(c, 0, 8), mine);
  EXPECT_EQ(read_back(b, 0, 8), base);
  EXPECT_EQ(bs->find(sid)->clones().size(), 2u);
  close(b);
  close(c);
}

TEST_F(Store, CloneOfAWritableBlobIsInvalid) {
  ASSERT_EQ(init(), 0);
  int rc = 0;
  clone(create(1), &rc);
  EXPECT_EQ(rc, -EINVAL);
  clone(1234, &rc);
  EXPECT_EQ(rc, -ENOENT);
}

TEST_F(Store, CloneOfAReadOnlyBlobWorks) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  b->set_read_only();
  ASSERT_EQ(sync(b), 0);
  int rc = 1;
  clone(id, &rc);
  EXPECT_EQ(rc, 0);
  close(b);
}

TEST_F(Store, ASnapshotIsDeletedAfterItsCloneIs) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  const BlobId sid = snapshot(id);
  EXPECT_EQ(remove(id), 0);
  EXPECT_EQ(remove(sid), 0);  // no clone left: a plain delete (merge_test: with one)
}

TEST_F(Store, InflateCopiesEverythingAndDropsTheParent) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  auto data = write_pattern(b, 0, 2 * kUnitsPerCluster, 3);
  const BlobId sid = snapshot(id);
  ASSERT_EQ(inflate(id), 0);
  EXPECT_FALSE(b->is_clone());
  EXPECT_FALSE(b->is_thin());
  EXPECT_EQ(b->parent_id(), kInvalidBlobId);
  EXPECT_EQ(b->num_allocated_clusters(), 2u);
  EXPECT_TRUE(bs->find(sid)->clones().empty());
  EXPECT_EQ(read_back(b, 0, 2 * kUnitsPerCluster), data);
  close(b);
  EXPECT_EQ(remove(sid), 0);  // nothing depends on it now
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(read_back(b, 0, 2 * kUnitsPerCluster), data);
  close(b);
}

TEST_F(Store, InflateOfAThinBlobWithoutParentAllocatesZeroes) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(3, true);
  ASSERT_EQ(inflate(id), 0);
  Blob* b = open(id);
  EXPECT_EQ(b->num_allocated_clusters(), 3u);
  EXPECT_EQ(read_back(b, 0, 16), std::vector<uint8_t>(16 * 512, 0));
  close(b);
}

TEST_F(Store, InflateErrors) {
  ASSERT_EQ(init(), 0);
  EXPECT_EQ(inflate(5), -ENOENT);
  const BlobId sid = snapshot(create(1));
  EXPECT_EQ(inflate(sid), -EPERM);
}

TEST_F(Store, DecoupleCopiesOnlyTheParentsClusters) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(3, true);
  Blob* b = open(id);
  auto first = write_pattern(b, 0, 4, 1);  // cluster 0 in the first snapshot
  const BlobId s1 = snapshot(id);
  auto second = write_pattern(b, kUnitsPerCluster, 4, 2);  // cluster 1 in the second
  const BlobId s2 = snapshot(id);
  EXPECT_EQ(b->parent_id(), s2);
  EXPECT_EQ(decouple(id), 0);
  EXPECT_EQ(b->parent_id(), s1);  // the parent's parent
  EXPECT_EQ(b->num_allocated_clusters(), 1u);  // only what s2 itself held
  EXPECT_EQ(read_back(b, 0, 4), first);
  EXPECT_EQ(read_back(b, kUnitsPerCluster, 4), second);
  EXPECT_EQ(decouple(id), 0);
  EXPECT_EQ(b->parent_id(), kInvalidBlobId);
  EXPECT_FALSE(b->is_clone());
  EXPECT_EQ(read_back(b, 0, 4), first);
  EXPECT_EQ(decouple(id), -EINVAL);
  close(b);
}

TEST_F(Store, SnapshotChainsReadThroughEveryLevel) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, true);
  Blob* b = open(id);
  std::vector<std::vector<uint8_t>> data;
  for (uint64_t c = 0; c < 4; ++c) {
    data.push_back(write_pattern(b, c * kUnitsPerCluster, 2, 10 + c));
    snapshot(id);
  }
  for (uint64_t c = 0; c < 4; ++c) EXPECT_EQ(read_back(b, c * kUnitsPerCluster, 2), data[c]);
  close(b);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  for (uint64_t c = 0; c < 4; ++c) EXPECT_EQ(read_back(b, c * kUnitsPerCluster, 2), data[c]);
  close(b);
}

// ------------------------------------------------------------------ sync and recovery ----

TEST_F(Store, UnsyncedXattrIsLostSyncedSurvives) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  ASSERT_EQ(b->set_xattr("a", "1", 1), 0);
  ASSERT_EQ(sync(b), 0);
  ASSERT_EQ(b->set_xattr("b", "2", 1), 0);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(b->xattr_names(), std::vector<std::string>{"a"});
  close(b);
}

TEST_F(Store, CloseSyncsADirtyBlob) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  ASSERT_EQ(b->set_xattr("a", "1", 1), 0);
  EXPECT_TRUE(b->dirty());
  ASSERT_EQ(close(b), 0);
  EXPECT_FALSE(bs->find(id)->dirty());
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(id)->xattr_names().size(), 1u);
}

TEST_F(Store, ManyBlobsManySyncsReloadExactly) {
  ASSERT_EQ(init(), 0);
  std::vector<BlobId> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(create(1 + i % 3, i % 2 == 0));
  for (int round = 0; round < 3; ++round)
    for (BlobId id : ids) {
      Blob* b = open(id);
      ASSERT_EQ(b->set_xattr("round", &round, sizeof round), 0);
      ASSERT_EQ(close(b), 0);
    }
  const uint64_t free_before = bs->free_clusters(), pages = bs->used_md_pages();
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->blob_ids(), ids);
  EXPECT_EQ(bs->free_clusters(), free_before);
  EXPECT_EQ(bs->used_md_pages(), pages);
  EXPECT_EQ(bs->report().blobs, 30u);
  EXPECT_TRUE(bs->report().errors.empty());
}

TEST_F(Store, CleanLoadReportsNothingToRepair) {
  ASSERT_EQ(init(), 0);
  for (int i = 0; i < 5; ++i) create(2);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->report().repairs.empty());
  EXPECT_EQ(bs->report().clusters_reclaimed, 0u);
}

// ------------------------------------------------------------------------ more breadth ----

TEST_F(Store, MetadataPagesRunOutAndComeBack) {
  StoreOptions o;
  o.md_pages = 4;
  ASSERT_EQ(init(o), 0);
  std::vector<BlobId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(create(1));
  int rc = 0;
  create(1, false, {}, &rc);
  EXPECT_EQ(rc, -ENOSPC);
  EXPECT_EQ(bs->blob_ids(), ids);  // the failed create left nothing behind
  ASSERT_EQ(remove(ids[0]), 0);
  create(1, false, {}, &rc);
  EXPECT_EQ(rc, 0);
}

TEST_F(Store, SyncWithNoPageForTheNewVersionFailsAndKeepsTheOld) {
  StoreOptions o;
  o.md_pages = 2;
  ASSERT_EQ(init(o), 0);
  const BlobId id = create(1);
  create(1);
  Blob* b = open(id);
  ASSERT_EQ(b->set_xattr("k", "v", 1), 0);
  EXPECT_EQ(sync(b), -ENOSPC);  // copy-on-write needs a free page
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->find(id)->xattr_names().empty());
}

TEST_F(Store, SyncOfACleanBlobWritesNoMetadata) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  const auto pages = b->md_pages();
  ASSERT_EQ(sync(b), 0);
  EXPECT_EQ(b->md_pages(), pages);
  ASSERT_EQ(b->set_xattr("k", "v", 1), 0);
  ASSERT_EQ(sync(b), 0);
  EXPECT_NE(b->md_pages(), pages);  // a new version in other pages
  EXPECT_EQ(bs->used_md_pages(), 1u);  // the old one was freed
  close(b);
}

TEST_F(Store, QueuedOperationsCompleteInOrder) {
  ASSERT_EQ(init(), 0);
  std::vector<Outcome> outs(20);
  BlobOptions o;
  o.num_clusters = 1;
  on(t0, [&] {
    for (auto& out : outs) bs->create_blob(o, Outcome::with_id, &out);
  });
  s.settle(200000);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i].called);
    EXPECT_EQ(outs[i].rc, 0);
    if (i) {
      EXPECT_GT(outs[i].id, outs[i - 1].id);
    }
  }
}

TEST_F(Store, TwoThreadsWritingOneThinClusterAllocateItOnce) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2, true));
  event::IoChannel* c0 = nullptr;
  on(t0, [&] { c0 = bs->alloc_io_channel(); });
  fill(0, 1, 1);
  fill(512, 1, 2);
  Outcome a, z;
  on(t0, [&] { ASSERT_EQ(bs->write(b, c0, mem(0), 0, 1, Outcome::op, &a), 0); });
  on(t1, [&] { ASSERT_EQ(bs->write(b, channel(), mem(512), 1, 1, Outcome::op, &z), 0); });
  s.settle();
  EXPECT_EQ(a.rc, 0);
  EXPECT_EQ(z.rc, 0);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  std::vector<uint8_t> want(mem(0), mem(1024));
  EXPECT_EQ(read_back(b, 0, 2), want);
  on(t0, [&] { bs->free_io_channel(c0); });
  close(b);
}

TEST_F(Store, ThinWriteAcrossTwoClustersAllocatesBoth) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(4, true));
  auto data = write_pattern(b, kUnitsPerCluster - 4, 8, 3);
  EXPECT_EQ(b->num_allocated_clusters(), 2u);
  EXPECT_EQ(read_back(b, kUnitsPerCluster - 4, 8), data);
  close(b);
}

TEST_F(Store, WriteAtTheLastIoUnit) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2, true));
  auto data = write_pattern(b, 2 * kUnitsPerCluster - 1, 1, 4);
  EXPECT_EQ(read_back(b, 2 * kUnitsPerCluster - 1, 1), data);
  close(b);
}

TEST_F(Store, ThinShrinkReleasesAllocatedClustersAfterSync) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(4, true));
  write_pattern(b, 3 * kUnitsPerCluster, 1, 1);
  const uint64_t after_write = bs->free_clusters();
  ASSERT_EQ(resize(b, 2), 0);
  EXPECT_EQ(bs->free_clusters(), after_write);
  ASSERT_EQ(sync(b), 0);
  EXPECT_EQ(bs->free_clusters(), after_write + 1);
  close(b);
}

TEST_F(Store, ShrinkThenGrowBeforeSyncNeverReusesTheOldClusters) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(3);
  Blob* b = open(id);
  const uint64_t third = b->device_cluster(2);
  ASSERT_EQ(resize(b, 1), 0);
  ASSERT_EQ(resize(b, 3), 0);
  EXPECT_NE(b->device_cluster(2), third);  // still reserved for the durable version
  ASSERT_EQ(sync(b), 0);
  close(b);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(id)->num_allocated_clusters(), 3u);
}

TEST_F(Store, CloneGrownBeyondItsParentReadsZeroesThere) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  write_pattern(b, 0, 4, 1);
  const BlobId sid = snapshot(id);
  const BlobId cid = clone(sid);
  Blob* c = open(cid);
  ASSERT_EQ(resize(c, 3), 0);
  EXPECT_EQ(read_back(c, 2 * kUnitsPerCluster, 4), std::vector<uint8_t>(4 * 512, 0));
  auto data = write_pattern(c, 2 * kUnitsPerCluster, 4, 2);
  EXPECT_EQ(read_back(c, 2 * kUnitsPerCluster, 4), data);
  close(b);
  close(c);
}

TEST_F(Store, SnapshotOfACloneKeepsTheChain) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  auto base = write_pattern(b, 0, 4, 1);
  const BlobId s1 = snapshot(id);
  const BlobId cid = clone(s1);
  Blob* c = open(cid);
  auto mine = write_pattern(c, kUnitsPerCluster, 4, 2);
  const BlobId s2 = snapshot(cid);
  EXPECT_EQ(bs->find(s2)->parent_id(), s1);
  EXPECT_TRUE(bs->find(s2)->is_clone());
  EXPECT_EQ(c->parent_id(), s2);
  EXPECT_EQ(read_back(c, 0, 4), base);
  EXPECT_EQ(read_back(c, kUnitsPerCluster, 4), mine);
  close(b);
  close(c);
  crash();
  ASSERT_EQ(load(), 0);
  c = open(cid);
  EXPECT_EQ(read_back(c, 0, 4), base);
  EXPECT_EQ(read_back(c, kUnitsPerCluster, 4), mine);
  close(c);
}

TEST_F(Store, InflateACloneOfACloneCopiesFromEveryLevel) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2, true);
  Blob* b = open(id);
  auto first = write_pattern(b, 0, 4, 1);
  snapshot(id);
  auto second = write_pattern(b, kUnitsPerCluster, 4, 2);
  snapshot(id);
  ASSERT_EQ(inflate(id), 0);
  EXPECT_EQ(b->num_allocated_clusters(), 2u);
  EXPECT_EQ(read_back(b, 0, 4), first);
  EXPECT_EQ(read_back(b, kUnitsPerCluster, 4), second);
  close(b);
}

TEST_F(Store, DeleteTheCloneThenTheSnapshot) {
  ASSERT_EQ(init(), 0);
  const uint64_t free0 = bs->free_clusters();
  const BlobId sid = snapshot(create(2));
  const BlobId cid = clone(sid);
  EXPECT_EQ(remove(sid), -EBUSY);  // two clones
  ASSERT_EQ(remove(cid), 0);
  ASSERT_EQ(remove(sid), 0);  // one clone left (the original blob): merged into it
  for (BlobId id : bs->blob_ids()) ASSERT_EQ(remove(id), 0);
  EXPECT_EQ(bs->free_clusters(), free0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->blob_ids().empty());
  EXPECT_EQ(bs->free_clusters(), free0);
}

TEST_F(Store, DecoupleOfAReadOnlyBlobIsRefused) {
  ASSERT_EQ(init(), 0);
  const BlobId sid = snapshot(create(1));
  EXPECT_EQ(decouple(sid), -EPERM);
  EXPECT_EQ(decouple(4242), -ENOENT);
}

TEST_F(Store, WriteZeroesOnACloneCopiesTheRestOfTheCluster) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  auto base = write_pattern(b, 0, 16, 1);
  snapshot(id);
  Outcome z = run([&](Outcome* o) { ASSERT_EQ(bs->write_zeroes(b, channel(), 4, 4, Outcome::op, o), 0); }, t1);
  EXPECT_EQ(z.rc, 0);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  auto want = base;
  std::fill(want.begin() + 4 * 512, want.begin() + 8 * 512, 0);
  EXPECT_EQ(read_back(b, 0, 16), want);
  close(b);
}

TEST_F(Store, UnmapOfAThinHoleIsANoOp) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2, true));
  Outcome u = run([&](Outcome* o) { ASSERT_EQ(bs->unmap(b, channel(), 0, 10, Outcome::op, o), 0); }, t1);
  EXPECT_EQ(u.rc, 0);
  EXPECT_EQ(b->num_allocated_clusters(), 0u);
  close(b);
}

TEST_F(Store, ClearMethodWriteZeroesGivesZeroedClusters) {
  ASSERT_EQ(init(), 0);
  Blob* junk = open(create(3));
  write_pattern(junk, 0, 3 * kUnitsPerCluster, 9);
  close(junk);
  ASSERT_EQ(remove(junk->id()), 0);
  BlobOptions o;
  o.num_clusters = 3;
  o.clear_method = ClearMethod::kWriteZeroes;
  Outcome r = run([&](Outcome* out) { bs->create_blob(o, Outcome::with_id, out); });
  ASSERT_EQ(r.rc, 0);
  Blob* b = open(r.id);
  EXPECT_EQ(b->clear_method(), ClearMethod::kWriteZeroes);
  EXPECT_EQ(read_back(b, 0, 3 * kUnitsPerCluster), std::vector<uint8_t>(3 * kCluster, 0));
  close(b);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(r.id)->clear_method(), ClearMethod::kWriteZeroes);
}

TEST_F(Store, FragmentedBlobReloadsWithTheSameClusters) {
  ASSERT_EQ(init(), 0);
  std::vector<BlobId> small;
  for (int i = 0; i < 40; ++i) small.push_back(create(1));
  for (int i = 0; i < 40; i += 2) ASSERT_EQ(remove(small[i]), 0);
  const BlobId id = create(bs->free_clusters());  // takes the holes and the rest
  std::vector<uint64_t> where = bs->find(id)->metadata().clusters;
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(id)->metadata().clusters, where);
  EXPECT_EQ(bs->free_clusters(), 0u);
}

TEST_F(Store, IoOnTheMetadataThreadWorksToo) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  event::IoChannel* c0 = nullptr;
  on(t0, [&] { c0 = bs->alloc_io_channel(); });
  fill(0, 4, 5);
  Outcome w = run([&](Outcome* o) { ASSERT_EQ(bs->write(b, c0, mem(0), 0, 4, Outcome::op, o), 0); });
  EXPECT_EQ(w.rc, 0);
  std::vector<uint8_t> want(mem(0), mem(4 * 512));
  EXPECT_EQ(read_back(b, 0, 4), want);
  on(t0, [&] { bs->free_io_channel(c0); });
  close(b);
}

TEST_F(Store, InternalXattrsAreApartFromUserOnes) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  ASSERT_EQ(b->set_xattr("same", "user", 4), 0);
  ASSERT_EQ(b->set_xattr("same", "internal", 8, true), 0);
  const void* v;
  std::size_t n;
  ASSERT_EQ(b->get_xattr("same", &v, &n), 0);
  EXPECT_EQ(n, 4u);
  ASSERT_EQ(b->get_xattr("same", &v, &n, true), 0);
  EXPECT_EQ(n, 8u);
  EXPECT_EQ(b->xattr_names(true), std::vector<std::string>{"same"});
  EXPECT_EQ(b->remove_xattr("same", true), 0);
  EXPECT_EQ(b->get_xattr("same", &v, &n), 0);
  close(b);
}

TEST_F(Store, InternalXattrsMayChangeOnAReadOnlyBlob) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  b->set_read_only();
  EXPECT_EQ(b->set_xattr("owner", "lvs", 3, true), 0);
  close(b);
}

TEST_F(Store, EmptyStoreReloadsWithAllItsSpace) {
  ASSERT_EQ(init(), 0);
  const uint64_t free0 = bs->free_clusters();
  for (int i = 0; i < 5; ++i) create(3, i % 2);
  for (BlobId id : bs->blob_ids()) ASSERT_EQ(remove(id), 0);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->free_clusters(), free0);
  EXPECT_EQ(bs->used_md_pages(), 0u);
}

TEST_F(Store, SuperBlockRecordsTheGeometry) {
  StoreOptions o;
  o.md_pages = 100;
  ASSERT_EQ(init(o), 0);
  const SuperBlock sb = bs->super_block();
  EXPECT_EQ(sb.cluster_size, kCluster);
  EXPECT_EQ(sb.io_unit_size, 512u);
  EXPECT_EQ(sb.md_pages, 100u);
  EXPECT_EQ(sb.total_clusters, (32u << 20) / kCluster);
  EXPECT_EQ(sb.md_start + sb.md_pages <= sb.first_data_cluster * (kCluster / kPageSize), true);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->super_block().md_pages, 100u);
  EXPECT_TRUE(bs->super_block().clean == false);  // in use again
}

class Store4k : public BlobFixture {
 protected:
  void SetUp() override {
    BlobFixture::SetUp();
    on(t0, [&] { ASSERT_TRUE(bdev::create_malloc_bdev(*mgr, {"m4k", 4096, 4096, nullptr, nullptr}).ok()); });
  }
};

TEST_F(Store4k, FourKiBIoUnits) {
  StoreOptions o;
  o.cluster_size = kCluster;
  Outcome r = run([&](Outcome* out) { Blobstore::init(*mgr, "m4k", o, Outcome::with_store, out); });
  ASSERT_EQ(r.rc, 0);
  bs = r.bs;
  EXPECT_EQ(bs->io_unit_size(), 4096u);
  Blob* b = open(create(2, true));
  EXPECT_EQ(b->num_io_units(), 2 * kCluster / 4096);
  for (uint32_t i = 0; i < 4096; ++i) mem(0)[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> want(mem(0), mem(4096));
  ASSERT_EQ(write(b, 17, 1), 0);
  std::memset(mem(0), 0, 4096);
  ASSERT_EQ(read(b, 17, 1), 0);
  EXPECT_EQ(std::vector<uint8_t>(mem(0), mem(4096)), want);
  close(b);
}

}  // namespace
}  // namespace pollux::blob
