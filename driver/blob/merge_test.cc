// Deleting a snapshot that has exactly one clone merges it into the clone (as SPDK does): the
// clone takes the clusters it read through the snapshot and the snapshot's parent, with the
// same data, across a crash too.
#include <gtest/gtest.h>

#include "driver/blob/blobstore.h"
#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::BlobFixture;

class Merge : public BlobFixture {};

TEST_F(Merge, ASnapshotWithOneCloneMergesIntoIt) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4);
  Blob* b = open(id);
  const auto c0 = write_pattern(b, 0, 4, 1);
  const auto c2 = write_pattern(b, 2 * kUnitsPerCluster, 4, 2);
  const BlobId sid = snapshot(id);
  const auto own = write_pattern(b, 1, 2, 3);  // b's own copy of cluster 0
  const uint64_t free_before = bs->free_clusters();
  ASSERT_EQ(remove(sid), 0);
  EXPECT_EQ(bs->find(sid), nullptr);
  EXPECT_FALSE(b->is_clone());
  EXPECT_EQ(b->parent_id(), kInvalidBlobId);
  EXPECT_EQ(b->num_allocated_clusters(), 4u);       // its own cluster 0, the snapshot's 1-3
  EXPECT_EQ(bs->free_clusters(), free_before + 1);  // the snapshot's cluster 0 is free
  auto expect_data = [&](Blob* x) {
    auto r0 = read_back(x, 0, 4);
    EXPECT_TRUE(std::equal(own.begin(), own.end(), r0.begin() + 512));
    EXPECT_TRUE(std::equal(c0.begin(), c0.begin() + 512, r0.begin()));
    EXPECT_EQ(read_back(x, 2 * kUnitsPerCluster, 4), c2);
  };
  expect_data(b);
  close(b);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(sid), nullptr);
  b = open(id);
  EXPECT_EQ(b->parent_id(), kInvalidBlobId);
  expect_data(b);
}

// The oldest of two snapshots: its clone (the newer snapshot) takes its clusters and stays a
// read-only snapshot, now without a parent; the blob on top reads the same.
TEST_F(Merge, TheOldestSnapshotOfAChainMergesIntoTheNextOne) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  const auto d0 = write_pattern(b, 0, 8, 1);
  const BlobId s1 = snapshot(id);
  const auto d1 = write_pattern(b, kUnitsPerCluster, 8, 2);
  const BlobId s2 = snapshot(id);
  ASSERT_EQ(remove(s1), 0);
  Blob* x = bs->find(s2);
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(x->is_snapshot());
  EXPECT_TRUE(x->is_read_only());
  EXPECT_EQ(x->parent_id(), kInvalidBlobId);
  EXPECT_EQ(b->parent_id(), s2);
  EXPECT_EQ(read_back(b, 0, 8), d0);
  EXPECT_EQ(read_back(b, kUnitsPerCluster, 8), d1);
  close(b);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(read_back(b, 0, 8), d0);
  EXPECT_EQ(read_back(b, kUnitsPerCluster, 8), d1);
}

TEST_F(Merge, TwoClonesStillRefuse) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  const BlobId sid = snapshot(id);
  clone(sid);
  EXPECT_EQ(remove(sid), -EBUSY);
}

TEST_F(Merge, AnOpenSnapshotRefuses) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  const BlobId sid = snapshot(id);
  Blob* s = open(sid);
  EXPECT_EQ(remove(sid), -EBUSY);
  close(s);
  EXPECT_EQ(remove(sid), 0);
}

}  // namespace
}  // namespace pollux::blob
