// The blobstore's API and its error paths, on a malloc bdev in step mode: init, load and
// unload, create and open, xattrs and flags, resize, delete, data. Snapshots, clones, sync and
// recovery: blobstore_snapshot_test.cc.
#include "driver/blob/blobstore.h"

#include <gtest/gtest.h>

#include "driver/blob/test_util.h"

namespace pollux::blob {
namespace {

using testing::BlobFixture;
using testing::Outcome;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

class Store : public BlobFixture {};

// ---------------------------------------------------------------- init / load / unload ----

TEST_F(Store, InitThenCleanUnloadAndLoad) {
  ASSERT_EQ(init(), 0);
  const uint64_t free_after_init = bs->free_clusters();
  EXPECT_GT(free_after_init, 0u);
  EXPECT_LT(free_after_init, bs->total_clusters());  // the layout takes cluster 0 at least
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->report().was_clean);
  EXPECT_EQ(bs->free_clusters(), free_after_init);
  EXPECT_TRUE(bs->report().errors.empty());
}

TEST_F(Store, TheStoreClaimsItsBdev) {
  ASSERT_EQ(init(), 0);
  on(t0, [&] {
    auto w = mgr->open("m0", true);
    ASSERT_FALSE(w.ok());  // no other writer while the store is loaded
    EXPECT_EQ(w.error().code, -EPERM);
    auto r = mgr->open("m0", false);
    ASSERT_TRUE(r.ok());  // readers are fine
    mgr->close(r.value());
  });
  ASSERT_EQ(unload(), 0);
  on(t0, [&] {
    auto w = mgr->open("m0", true);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(mgr->claim(w.value(), "other"), 0);  // released by the unload
    mgr->close(w.value());
  });
}

TEST_F(Store, LoadAfterCrashIsDirty) {
  ASSERT_EQ(init(), 0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_FALSE(bs->report().was_clean);
}

TEST_F(Store, LoadMarksTheStoreDirtyUntilUnload) {
  ASSERT_EQ(init(), 0);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  crash();  // loaded clean, then crashed: the next load must not trust the masks
  ASSERT_EQ(load(), 0);
  EXPECT_FALSE(bs->report().was_clean);
}

TEST_F(Store, LoadOfABlankDeviceFails) { EXPECT_EQ(load(), -EILSEQ); }

TEST_F(Store, InitRejectsBadClusterSize) {
  StoreOptions o;
  o.cluster_size = 6000;
  EXPECT_EQ(init(o), -EINVAL);
}

TEST_F(Store, InitRejectsTooLongBstype) {
  StoreOptions o;
  o.bstype = std::string(17, 'x');
  EXPECT_EQ(init(o), -EINVAL);
}

TEST_F(Store, InitOnUnknownBdevFails) {
  Outcome r = run([&](Outcome* out) { Blobstore::init(*mgr, "nope", {}, Outcome::with_store, out); });
  EXPECT_EQ(r.rc, -ENODEV);
}

TEST_F(Store, InitOnADeviceTooSmallForItsLayout) {
  StoreOptions o;
  o.cluster_size = 32u << 20;  // one cluster: nothing left after the metadata
  EXPECT_EQ(init(o), -ENOSPC);
}

TEST_F(Store, BstypeMustMatchOnLoad) {
  StoreOptions o;
  o.bstype = "lvs";
  ASSERT_EQ(init(o), 0);
  ASSERT_EQ(unload(), 0);
  StoreOptions other;
  other.bstype = "other";
  EXPECT_EQ(load(other), -ENXIO);
  EXPECT_EQ(load(o), 0);
  EXPECT_EQ(bs->super_block().bstype, "lvs");
}

TEST_F(Store, LoadWithoutBstypeAcceptsAny) {
  StoreOptions o;
  o.bstype = "lvs";
  ASSERT_EQ(init(o), 0);
  ASSERT_EQ(unload(), 0);
  EXPECT_EQ(load(), 0);
}

TEST_F(Store, UnloadWithAnOpenBlobIsRefused) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  EXPECT_EQ(unload(), -EBUSY);
  ASSERT_EQ(close(b), 0);
  EXPECT_EQ(unload(), 0);
}

TEST_F(Store, UnloadWithAChannelIsRefused) {
  ASSERT_EQ(init(), 0);
  event::IoChannel* c = channel();
  ASSERT_NE(c, nullptr);
  Outcome r = run([&](Outcome* out) { bs->unload(Outcome::op, out); });
  EXPECT_EQ(r.rc, -EBUSY);
  EXPECT_EQ(unload(), 0);  // frees the channel first
}

TEST_F(Store, InitWipesAnEarlierStore) {
  ASSERT_EQ(init(), 0);
  create(2);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(init(), 0);
  EXPECT_TRUE(bs->blob_ids().empty());
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->blob_ids().empty());
}

TEST_F(Store, SuperBlobIsPersisted) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  EXPECT_EQ(run([&](Outcome* o) { bs->set_super_blob(id, Outcome::op, o); }).rc, 0);
  EXPECT_EQ(run([&](Outcome* o) { bs->set_super_blob(999, Outcome::op, o); }).rc, -ENOENT);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->super_blob(), id);
}

TEST_F(Store, SuperBlobClearedWhenDeleted) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  EXPECT_EQ(run([&](Outcome* o) { bs->set_super_blob(id, Outcome::op, o); }).rc, 0);
  EXPECT_EQ(remove(id), 0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->super_blob(), kInvalidBlobId);
}

// ---------------------------------------------------------------------- create / open ----

TEST_F(Store, CreateThickAllocatesEveryCluster) {
  ASSERT_EQ(init(), 0);
  const uint64_t before = bs->free_clusters();
  Blob* b = open(create(5));
  EXPECT_EQ(b->num_clusters(), 5u);
  EXPECT_EQ(b->num_allocated_clusters(), 5u);
  EXPECT_EQ(b->num_io_units(), 5 * kUnitsPerCluster);
  EXPECT_FALSE(b->is_thin());
  EXPECT_EQ(bs->free_clusters(), before - 5);
  close(b);
}

TEST_F(Store, CreateThinAllocatesNothing) {
  ASSERT_EQ(init(), 0);
  const uint64_t before = bs->free_clusters();
  Blob* b = open(create(100, true));
  EXPECT_TRUE(b->is_thin());
  EXPECT_EQ(b->num_allocated_clusters(), 0u);
  EXPECT_EQ(bs->free_clusters(), before);
  close(b);
}

TEST_F(Store, CreateLargerThanFreeSpaceFails) {
  ASSERT_EQ(init(), 0);
  const uint64_t before = bs->free_clusters();
  int rc = 0;
  create(before + 1, false, {}, &rc);
  EXPECT_EQ(rc, -ENOSPC);
  EXPECT_EQ(bs->free_clusters(), before);
  EXPECT_TRUE(bs->blob_ids().empty());
}

TEST_F(Store, ThinBlobsMayBeLargerThanTheDevice) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(bs->total_clusters() * 4, true));
  EXPECT_EQ(b->num_clusters(), bs->total_clusters() * 4);
  close(b);
}

TEST_F(Store, CreateWithAnXattrTooLargeFails) {
  ASSERT_EQ(init(), 0);
  int rc = 0;
  create(1, false, {{"big", std::vector<uint8_t>(5000)}}, &rc);
  EXPECT_EQ(rc, -EINVAL);
}

TEST_F(Store, CreateZeroSizedBlob) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(0));
  EXPECT_EQ(b->num_clusters(), 0u);
  close(b);
}

TEST_F(Store, BlobIdsAreUniqueAndIterable) {
  ASSERT_EQ(init(), 0);
  std::vector<BlobId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(create(1));
  EXPECT_EQ(bs->blob_ids(), ids);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->blob_ids(), ids);
  const BlobId next = create(1);
  EXPECT_GT(next, ids.back());
}

TEST_F(Store, OpenUnknownBlob) {
  ASSERT_EQ(init(), 0);
  int rc = 0;
  EXPECT_EQ(open(12345, &rc), nullptr);
  EXPECT_EQ(rc, -ENOENT);
}

TEST_F(Store, OpenTwiceNeedsTwoCloses) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* a = open(id);
  Blob* b = open(id);
  EXPECT_EQ(a, b);
  EXPECT_EQ(close(a), 0);
  EXPECT_EQ(remove(id), -EBUSY);
  EXPECT_EQ(close(b), 0);
  EXPECT_EQ(close(b), -EINVAL);
  EXPECT_EQ(remove(id), 0);
}

// ------------------------------------------------------------------ xattrs and flags ----

TEST_F(Store, XattrsSurviveReload) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1, false, {{"name", bytes("first")}});
  Blob* b = open(id);
  ASSERT_EQ(b->set_xattr("color", "blue", 4), 0);
  ASSERT_EQ(b->set_xattr("hidden", "x", 1, true), 0);
  ASSERT_EQ(close(b), 0);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  b = open(id);
  const void* v = nullptr;
  std::size_t n = 0;
  ASSERT_EQ(b->get_xattr("name", &v, &n), 0);
  EXPECT_EQ(std::string(static_cast<const char*>(v), n), "first");
  ASSERT_EQ(b->get_xattr("color", &v, &n), 0);
  EXPECT_EQ(std::string(static_cast<const char*>(v), n), "blue");
  EXPECT_EQ(b->get_xattr("hidden", &v, &n), -ENOENT);  // internal ones are apart
  ASSERT_EQ(b->get_xattr("hidden", &v, &n, true), 0);
  EXPECT_EQ(b->xattr_names(), (std::vector<std::string>{"name", "color"}));
  close(b);
}

TEST_F(Store, XattrReplaceAndRemove) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  ASSERT_EQ(b->set_xattr("k", "one", 3), 0);
  ASSERT_EQ(b->set_xattr("k", "three", 5), 0);
  const void* v;
  std::size_t n;
  ASSERT_EQ(b->get_xattr("k", &v, &n), 0);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(b->remove_xattr("k"), 0);
  EXPECT_EQ(b->remove_xattr("k"), -ENOENT);
  EXPECT_EQ(b->get_xattr("k", &v, &n), -ENOENT);
  close(b);
}

TEST_F(Store, XattrErrors) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  EXPECT_EQ(b->set_xattr("", "x", 1), -EINVAL);
  std::vector<uint8_t> big(4100);
  EXPECT_EQ(b->set_xattr("big", big.data(), big.size()), -E2BIG);
  b->set_read_only();
  EXPECT_EQ(b->set_xattr("k", "v", 1), -EPERM);
  EXPECT_EQ(b->remove_xattr("k"), -EPERM);
  close(b);
}

TEST_F(Store, ManyXattrsSpanSeveralChainedPages) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  std::vector<uint8_t> value(1000, 0x5a);
  for (int i = 0; i < 20; ++i) {
    value[0] = static_cast<uint8_t>(i);
    ASSERT_EQ(b->set_xattr("x" + std::to_string(i), value.data(), value.size()), 0);
  }
  ASSERT_EQ(close(b), 0);
  EXPECT_GE(bs->used_md_pages(), 5u);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(b->xattr_names().size(), 20u);
  const void* v;
  std::size_t n;
  ASSERT_EQ(b->get_xattr("x13", &v, &n), 0);
  EXPECT_EQ(static_cast<const uint8_t*>(v)[0], 13);
  close(b);
}

TEST_F(Store, ReadOnlyIsPersistedAndRefusesWrites) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  b->set_read_only();
  ASSERT_EQ(sync(b), 0);
  EXPECT_EQ(write(b, 0, 1), -EPERM);
  EXPECT_EQ(resize(b, 2), -EPERM);
  close(b);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_TRUE(b->is_read_only());
  EXPECT_EQ(write(b, 0, 1), -EPERM);
  EXPECT_EQ(read(b, 0, 1), 0);
  close(b);
}

// ------------------------------------------------------------------------------ resize ----

TEST_F(Store, ResizeGrowsAndShrinks) {
  ASSERT_EQ(init(), 0);
  const uint64_t before = bs->free_clusters();
  Blob* b = open(create(2));
  ASSERT_EQ(resize(b, 6), 0);
  EXPECT_EQ(b->num_clusters(), 6u);
  EXPECT_EQ(b->num_allocated_clusters(), 6u);
  EXPECT_EQ(bs->free_clusters(), before - 6);
  ASSERT_EQ(resize(b, 1), 0);
  // The clusters given up stay taken until the smaller size is durable.
  EXPECT_EQ(bs->free_clusters(), before - 6);
  ASSERT_EQ(sync(b), 0);
  EXPECT_EQ(bs->free_clusters(), before - 1);
  close(b);
}

TEST_F(Store, ResizeIsDurableOnlyAfterSync) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(2);
  Blob* b = open(id);
  ASSERT_EQ(resize(b, 4), 0);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(b->num_clusters(), 2u);
  ASSERT_EQ(resize(b, 4), 0);
  ASSERT_EQ(sync(b), 0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(open(id)->num_clusters(), 4u);
}

TEST_F(Store, ResizeBeyondSpaceFailsAndChangesNothing) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  const uint64_t before = bs->free_clusters();
  EXPECT_EQ(resize(b, before + 2), -ENOSPC);
  EXPECT_EQ(b->num_clusters(), 1u);
  EXPECT_EQ(bs->free_clusters(), before);
  close(b);
}

TEST_F(Store, ResizeThinAllocatesNothing) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1, true));
  const uint64_t before = bs->free_clusters();
  ASSERT_EQ(resize(b, 50), 0);
  EXPECT_EQ(bs->free_clusters(), before);
  close(b);
}

TEST_F(Store, ResizeToAbsurdSizeIsInvalid) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1, true));
  EXPECT_EQ(resize(b, uint64_t{1} << 40), -EINVAL);
  close(b);
}

// ------------------------------------------------------------------------------ delete ----

TEST_F(Store, DeleteFreesEverythingAndStaysDeleted) {
  ASSERT_EQ(init(), 0);
  const uint64_t free0 = bs->free_clusters(), pages0 = bs->used_md_pages();
  const BlobId id = create(3);
  ASSERT_EQ(remove(id), 0);
  EXPECT_EQ(bs->free_clusters(), free0);
  EXPECT_EQ(bs->used_md_pages(), pages0);
  EXPECT_EQ(remove(id), -ENOENT);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_TRUE(bs->blob_ids().empty());
  EXPECT_EQ(bs->free_clusters(), free0);
}

TEST_F(Store, DeleteAfterManySyncsLeavesNoOldVersionBehind) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(1);
  Blob* b = open(id);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(b->set_xattr("gen", &i, sizeof i), 0);
    ASSERT_EQ(sync(b), 0);
  }
  close(b);
  ASSERT_EQ(remove(id), 0);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->find(id), nullptr);
  EXPECT_EQ(bs->report().pages_cleared, 0u);
}

TEST_F(Store, DeleteUnknownBlob) {
  ASSERT_EQ(init(), 0);
  EXPECT_EQ(remove(77), -ENOENT);
}

// ------------------------------------------------------------------------------- data ----

TEST_F(Store, WriteReadRoundTripAcrossReload) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(3);
  Blob* b = open(id);
  auto data = write_pattern(b, 100, 200, 1);  // crosses a cluster boundary
  EXPECT_EQ(read_back(b, 100, 200), data);
  ASSERT_EQ(close(b), 0);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(read_back(b, 100, 200), data);
  close(b);
}

TEST_F(Store, IoOutOfRangeIsInvalid) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  EXPECT_EQ(write(b, kUnitsPerCluster - 1, 2), -EINVAL);
  EXPECT_EQ(read(b, kUnitsPerCluster, 1), -EINVAL);
  EXPECT_EQ(read(b, 0, 0), -EINVAL);
  close(b);
}

TEST_F(Store, ReadvWritevWithManyIovecs) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2));
  fill(0, 16, 9);
  std::vector<iovec> iov;
  for (int i = 0; i < 16; ++i) iov.push_back({mem(i * 512), 512});
  Outcome w = run([&](Outcome* o) {
    ASSERT_EQ(bs->writev(b, channel(), iov.data(), 16, kUnitsPerCluster - 8, 16, Outcome::op, o), 0);
  }, t1);
  EXPECT_EQ(w.rc, 0);
  std::vector<uint8_t> expect(mem(0), mem(16 * 512));
  std::vector<iovec> riov;
  for (int i = 0; i < 16; ++i) riov.push_back({mem(64 * 1024 + (15 - i) * 512), 512});
  Outcome r = run([&](Outcome* o) {
    ASSERT_EQ(bs->readv(b, channel(), riov.data(), 16, kUnitsPerCluster - 8, 16, Outcome::op, o), 0);
  }, t1);
  EXPECT_EQ(r.rc, 0);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(std::memcmp(riov[i].iov_base, expect.data() + i * 512, 512), 0) << i;
  close(b);
}

TEST_F(Store, TooManyIovecsOrShortPayloadIsInvalid) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(1));
  std::vector<iovec> iov(33, iovec{mem(0), 512});
  EXPECT_EQ(bs->writev(b, channel(), iov.data(), 33, 0, 33, Outcome::op, nullptr), -EINVAL);
  EXPECT_EQ(bs->writev(b, channel(), iov.data(), 1, 0, 2, Outcome::op, nullptr), -EINVAL);
  close(b);
}

TEST_F(Store, ThinReadsZeroesAndAllocatesOnFirstWrite) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, true);
  Blob* b = open(id);
  EXPECT_EQ(read_back(b, 0, 8), std::vector<uint8_t>(8 * 512, 0));
  const uint64_t before = bs->free_clusters();
  auto data = write_pattern(b, kUnitsPerCluster * 2 + 5, 3, 4);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  EXPECT_NE(b->device_cluster(2), 0u);
  EXPECT_EQ(bs->free_clusters(), before - 1);
  EXPECT_EQ(read_back(b, kUnitsPerCluster * 2 + 5, 3), data);
  // The rest of the new cluster reads as zeroes, not as whatever the device held.
  EXPECT_EQ(read_back(b, kUnitsPerCluster * 2, 5), std::vector<uint8_t>(5 * 512, 0));
  ASSERT_EQ(close(b), 0);
  crash();
  ASSERT_EQ(load(), 0);
  b = open(id);
  EXPECT_EQ(b->num_allocated_clusters(), 1u);
  EXPECT_EQ(read_back(b, kUnitsPerCluster * 2 + 5, 3), data);
  close(b);
}

// The write that allocates persists the allocation before it completes (as SPDK): a crash
// without sync_md keeps both clusters, and the dirty load reclaims nothing.
TEST_F(Store, ThinAllocationIsDurableBeforeItsWriteCompletes) {
  ASSERT_EQ(init(), 0);
  const BlobId id = create(4, true);
  const uint64_t before = bs->free_clusters();
  Blob* b = open(id);
  write_pattern(b, 0, 1, 1);
  write_pattern(b, kUnitsPerCluster * 3, 1, 1);
  EXPECT_EQ(bs->free_clusters(), before - 2);
  crash();
  ASSERT_EQ(load(), 0);
  EXPECT_EQ(bs->free_clusters(), before - 2);
  EXPECT_EQ(bs->report().clusters_reclaimed, 0u);
  EXPECT_EQ(bs->find(id)->num_allocated_clusters(), 2u);
}

TEST_F(Store, ThinWriteWhenFullFails) {
  ASSERT_EQ(init(), 0);
  create(bs->free_clusters());
  Blob* b = open(create(2, true));
  EXPECT_EQ(write(b, 0, 1), -ENOSPC);
  close(b);
}

TEST_F(Store, WriteZeroesAndUnmap) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2));
  write_pattern(b, 0, 64, 3);
  Outcome z = run([&](Outcome* o) { ASSERT_EQ(bs->write_zeroes(b, channel(), 10, 20, Outcome::op, o), 0); }, t1);
  EXPECT_EQ(z.rc, 0);
  EXPECT_EQ(read_back(b, 10, 20), std::vector<uint8_t>(20 * 512, 0));
  Outcome u = run([&](Outcome* o) { ASSERT_EQ(bs->unmap(b, channel(), 0, 2 * kUnitsPerCluster, Outcome::op, o), 0); }, t1);
  EXPECT_EQ(u.rc, 0);
  b->set_read_only();
  EXPECT_EQ(bs->write_zeroes(b, channel(), 0, 1, Outcome::op, nullptr), -EPERM);
  EXPECT_EQ(bs->unmap(b, channel(), 0, 1, Outcome::op, nullptr), -EPERM);
  close(b);
}

TEST_F(Store, WriteZeroesOnAThinHoleAllocatesNothing) {
  ASSERT_EQ(init(), 0);
  Blob* b = open(create(2, true));
  Outcome z = run([&](Outcome* o) { ASSERT_EQ(bs->write_zeroes(b, channel(), 0, 10, Outcome::op, o), 0); }, t1);
  EXPECT_EQ(z.rc, 0);
  EXPECT_EQ(b->num_allocated_clusters(), 0u);
  close(b);
}

TEST_F(Store, ChannelRequestPoolExhausts) {
  StoreOptions o;
  o.requests_per_channel = 1;
  ASSERT_EQ(init(o), 0);
  Blob* b = open(create(2, true));
  // The first write waits for its cluster on the md thread, holding the only request.
  Outcome first;
  on(t1, [&] { ASSERT_EQ(bs->write(b, channel(), mem(0), 0, 1, Outcome::op, &first), 0); });
  on(t1, [&] { EXPECT_EQ(bs->write(b, channel(), mem(0), 1, 1, Outcome::op, nullptr), -ENOMEM); });
  s.settle();
  EXPECT_TRUE(first.called);
  EXPECT_EQ(first.rc, 0);
  close(b);
}

}  // namespace
}  // namespace pollux::blob
