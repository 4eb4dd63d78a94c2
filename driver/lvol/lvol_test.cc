// Logical volumes on a malloc bdev: lvstore create/load/unload, lvol bdevs and their I/O,
// snapshot, clone, inflate, decouple, resize, rename, delete, and the errors of each.
#include "driver/lvol/lvol.h"

#include <gtest/gtest.h>

#include "driver/blob/test_util.h"

namespace pollux::lvol {
namespace {

using blob::testing::Outcome;

struct LvolOutcome {
  bool called = false;
  int rc = 1;
  Lvol* lvol = nullptr;
  LvolStore* lvs = nullptr;
  static void with_lvol(void* a, Lvol* l, int rc) { *static_cast<LvolOutcome*>(a) = {true, rc, l}; }
  static void with_store(void* a, LvolStore* s, int rc) { *static_cast<LvolOutcome*>(a) = {true, rc, nullptr, s}; }
};

class Lvols : public blob::testing::BlobFixture {
 protected:
  void TearDown() override {
    close_bdev();
    if (lvs) {
      ASSERT_EQ(unload(), 0);
    }
    BlobFixture::TearDown();
  }
  LvolOutcome lrun(const std::function<void(LvolOutcome*)>& fn) {
    LvolOutcome out;
    on(t0, [&] { fn(&out); });
    for (int i = 0; i < 200000 && !out.called; ++i) s.fw->step();
    EXPECT_TRUE(out.called);
    return out;
  }
  int create_store(const std::string& name = "lvs0") {
    auto r = lrun([&](LvolOutcome* o) { LvolStore::create(*mgr, "m0", name, kCluster, LvolOutcome::with_store, o); });
    if (r.rc == 0) lvs = r.lvs;
    return r.rc;
  }
  int load_store() {
    auto r = lrun([&](LvolOutcome* o) { LvolStore::load(*mgr, "m0", LvolOutcome::with_store, o); });
    if (r.rc == 0) lvs = r.lvs;
    return r.rc;
  }
  int unload() {
    close_bdev();
    Outcome r = run([&](Outcome* o) { lvs->unload(Outcome::op, o); });
    if (r.rc == 0) lvs = nullptr;
    return r.rc;
  }
  Lvol* create_lvol(const std::string& name, uint64_t bytes, bool thin = false, int* rc = nullptr) {
    auto r = lrun([&](LvolOutcome* o) { lvs->create_lvol(name, bytes, thin, LvolOutcome::with_lvol, o); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.lvol;
  }
  Lvol* snapshot(Lvol* l, const std::string& name, int* rc = nullptr) {
    auto r = lrun([&](LvolOutcome* o) { lvs->snapshot(l, name, LvolOutcome::with_lvol, o); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.lvol;
  }
  Lvol* clone(Lvol* l, const std::string& name, int* rc = nullptr) {
    auto r = lrun([&](LvolOutcome* o) { lvs->clone(l, name, LvolOutcome::with_lvol, o); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.lvol;
  }
  int op(const std::function<void(Outcome*)>& fn) { return run(fn).rc; }

  // Bdev I/O through the bdev layer, as any user of an lvol bdev does it.
  bdev::Desc* open_bdev(const std::string& name) {
    close_bdev();
    on(t0, [&] {
      auto d = mgr->open(name, true);
      ASSERT_TRUE(d.ok()) << d.error().message;
      desc = d.value();
    });
    on(t1, [&] { bch = mgr->get_io_channel(desc); });
    return desc;
  }
  void close_bdev() {
    if (bch) on(t1, [&] { mgr->put_io_channel(bch); });
    bch = nullptr;
    s.settle();
    if (desc) on(t0, [&] { mgr->close(desc); });
    desc = nullptr;
    s.settle();
  }
  static void bdev_done(bdev::BdevIo&, bool ok, void* a) { *static_cast<Outcome*>(a) = {true, ok ? 0 : -EIO}; }
  int bdev_io(bdev::IoType t, uint64_t off, uint64_t n) {
    Outcome r = run([&](Outcome* o) {
      int rc = -EINVAL;
      if (t == bdev::IoType::kWrite) rc = mgr->write(desc, bch, mem(0), off, n, bdev_done, o);
      if (t == bdev::IoType::kRead) rc = mgr->read(desc, bch, mem(0), off, n, bdev_done, o);
      if (t == bdev::IoType::kFlush) rc = mgr->flush(desc, bch, off, n, bdev_done, o);
      if (rc != 0) *o = {true, rc};
    }, t1);
    return r.rc;
  }
  std::vector<uint8_t> put(uint64_t off, uint64_t n, uint64_t seed) {
    fill(0, n, seed);
    std::vector<uint8_t> v(mem(0), mem(n * 512));
    EXPECT_EQ(bdev_io(bdev::IoType::kWrite, off, n), 0);
    return v;
  }
  std::vector<uint8_t> get(uint64_t off, uint64_t n) {
    std::memset(mem(0), 0xee, n * 512);
    EXPECT_EQ(bdev_io(bdev::IoType::kRead, off, n), 0);
    return {mem(0), mem(n * 512)};
  }

  LvolStore* lvs = nullptr;
  bdev::Desc* desc = nullptr;
  event::IoChannel* bch = nullptr;
};

TEST_F(Lvols, StoreAndLvolsSurviveUnloadAndLoad) {
  ASSERT_EQ(create_store(), 0);
  EXPECT_EQ(LvolStore::find("lvs0"), lvs);
  Lvol* a = create_lvol("a", 256 * 1024);
  create_lvol("b", 1 << 20, true);
  bdev::Bdev* ab = mgr->find("lvs0/a");
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(ab->num_blocks(), 256u * 1024 / 512);
  EXPECT_EQ(ab->props().product, "Logical Volume");
  EXPECT_EQ(mgr->find("lvs0/b")->num_blocks(), (1u << 20) / 512);
  EXPECT_FALSE(a->blob->is_thin());
  open_bdev("lvs0/a");
  auto data = put(100, 50, 1);
  ASSERT_EQ(unload(), 0);
  EXPECT_EQ(mgr->find("lvs0/a"), nullptr);
  EXPECT_EQ(LvolStore::find("lvs0"), nullptr);
  ASSERT_EQ(load_store(), 0);
  EXPECT_EQ(lvs->name(), "lvs0");
  EXPECT_EQ(lvs->lvol_names(), (std::vector<std::string>{"a", "b"}));
  open_bdev("lvs0/a");
  EXPECT_EQ(get(100, 50), data);
}

TEST_F(Lvols, NameErrors) {
  ASSERT_EQ(create_store(), 0);
  int rc = 0;
  create_lvol("a", 4096);
  create_lvol("a", 4096, false, &rc);
  EXPECT_EQ(rc, -EEXIST);
  create_lvol("x/y", 4096, false, &rc);
  EXPECT_EQ(rc, -EINVAL);
  create_lvol("", 4096, false, &rc);
  EXPECT_EQ(rc, -EINVAL);
  on(t0, [&] { ASSERT_TRUE(bdev::create_malloc_bdev(*mgr, {"m1", 16384, 512, nullptr, nullptr}).ok()); });
  auto r = lrun([&](LvolOutcome* o) { LvolStore::create(*mgr, "m1", "lvs0", kCluster, LvolOutcome::with_store, o); });
  EXPECT_EQ(r.rc, -EEXIST);
}

TEST_F(Lvols, LoadOfANonLvolBlobstoreFails) {
  ASSERT_EQ(init(), 0);  // a plain blobstore, bstype ""
  ASSERT_EQ(BlobFixture::unload(), 0);
  EXPECT_EQ(load_store(), -ENXIO);
}

TEST_F(Lvols, TooLargeThickLvolFails) {
  ASSERT_EQ(create_store(), 0);
  int rc = 0;
  create_lvol("big", 1ull << 30, false, &rc);
  EXPECT_EQ(rc, -ENOSPC);
  create_lvol("thin", 1ull << 30, true, &rc);
  EXPECT_EQ(rc, 0);
}

TEST_F(Lvols, SnapshotCloneInflateDelete) {
  ASSERT_EQ(create_store(), 0);
  Lvol* a = create_lvol("a", 4 * kCluster);
  open_bdev("lvs0/a");
  auto base = put(0, 64, 1);
  close_bdev();
  Lvol* snap = snapshot(a, "snap");
  EXPECT_TRUE(snap->blob->is_snapshot());
  Lvol* c = clone(snap, "c");
  open_bdev("lvs0/c");
  EXPECT_EQ(get(0, 64), base);
  auto mine = put(8, 8, 2);
  close_bdev();
  EXPECT_EQ(op([&](Outcome* o) { lvs->inflate(c, Outcome::op, o); }), 0);
  EXPECT_FALSE(c->blob->is_clone());
  Lvol* c2 = clone(snap, "c2");
  EXPECT_EQ(op([&](Outcome* o) { lvs->destroy(snap, Outcome::op, o); }), -EBUSY);  // a and c2
  EXPECT_EQ(op([&](Outcome* o) { lvs->destroy(c2, Outcome::op, o); }), 0);
  // One clone left (a): the snapshot is merged into it (SPDK's delete of a snapshot).
  EXPECT_EQ(op([&](Outcome* o) { lvs->destroy(snap, Outcome::op, o); }), 0);
  EXPECT_FALSE(a->blob->is_clone());
  EXPECT_EQ(mgr->find("lvs0/snap"), nullptr);
  open_bdev("lvs0/a");
  EXPECT_EQ(get(0, 64), base);
  open_bdev("lvs0/c");
  auto want = base;
  std::copy(mine.begin(), mine.end(), want.begin() + 8 * 512);
  EXPECT_EQ(get(0, 64), want);
  close_bdev();
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load_store(), 0);
  EXPECT_EQ(lvs->lvol_names(), (std::vector<std::string>{"a", "c"}));
}

TEST_F(Lvols, SnapshotNameTaken) {
  ASSERT_EQ(create_store(), 0);
  Lvol* a = create_lvol("a", kCluster);
  int rc = 0;
  snapshot(a, "a", &rc);
  EXPECT_EQ(rc, -EEXIST);
  Lvol* s = snapshot(a, "s");
  clone(s, "s", &rc);
  EXPECT_EQ(rc, -EEXIST);
  clone(a, "c", &rc);
  EXPECT_EQ(rc, -EINVAL);  // a is writable
}

TEST_F(Lvols, ResizeChangesTheBdev) {
  ASSERT_EQ(create_store(), 0);
  Lvol* a = create_lvol("a", kCluster);
  EXPECT_EQ(op([&](Outcome* o) { lvs->resize(a, 3 * kCluster, Outcome::op, o); }), 0);
  EXPECT_EQ(mgr->find("lvs0/a")->num_blocks(), 3 * kUnitsPerCluster);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load_store(), 0);
  EXPECT_EQ(mgr->find("lvs0/a")->num_blocks(), 3 * kUnitsPerCluster);
}

TEST_F(Lvols, RenameMovesTheBdevAndPersists) {
  ASSERT_EQ(create_store(), 0);
  Lvol* a = create_lvol("a", kCluster);
  create_lvol("b", kCluster);
  EXPECT_EQ(op([&](Outcome* o) { lvs->rename(a, "b", Outcome::op, o); }), -EEXIST);
  EXPECT_EQ(op([&](Outcome* o) { lvs->rename(a, "z", Outcome::op, o); }), 0);
  EXPECT_EQ(mgr->find("lvs0/a"), nullptr);
  EXPECT_NE(mgr->find("lvs0/z"), nullptr);
  ASSERT_EQ(unload(), 0);
  ASSERT_EQ(load_store(), 0);
  EXPECT_EQ(lvs->lvol_names(), (std::vector<std::string>{"b", "z"}));
}

// The first write to a thin lvol's cluster allocates it and persists the allocation before
// it completes; a flush then has nothing left to sync.
TEST_F(Lvols, ThinLvolAllocatesOnWriteDurablyAndFlushSucceeds) {
  ASSERT_EQ(create_store(), 0);
  Lvol* t = create_lvol("t", 8 * kCluster, true);
  const uint64_t before = lvs->free_clusters();
  open_bdev("lvs0/t");
  auto data = put(3 * kUnitsPerCluster, 8, 5);
  EXPECT_EQ(lvs->free_clusters(), before - 1);
  EXPECT_FALSE(t->blob->dirty());
  EXPECT_EQ(bdev_io(bdev::IoType::kFlush, 0, 8 * kUnitsPerCluster), 0);
  EXPECT_FALSE(t->blob->dirty());
  EXPECT_EQ(get(3 * kUnitsPerCluster, 8), data);
}

TEST_F(Lvols, DeleteFreesTheSpace) {
  ASSERT_EQ(create_store(), 0);
  const uint64_t before = lvs->free_clusters();
  Lvol* a = create_lvol("a", 4 * kCluster);
  EXPECT_EQ(lvs->free_clusters(), before - 4);
  EXPECT_EQ(op([&](Outcome* o) { lvs->destroy(a, Outcome::op, o); }), 0);
  EXPECT_EQ(lvs->free_clusters(), before);
  EXPECT_EQ(lvs->lvol(std::string("a")), nullptr);
}

// A snapshot of an lvol held open with a channel on another thread (an exported namespace):
// the lvol's I/O freezes around it, and writes after it copy the snapshot's clusters.
TEST_F(Lvols, SnapshotOfAnOpenLvolThenWritesCopyOnWrite) {
  ASSERT_EQ(create_store(), 0);
  create_lvol("v", 4 * kCluster, true);
  open_bdev("lvs0/v");
  const auto first = put(3, 8, 1);
  int rc = 1;
  snapshot(lvs->lvol(std::string("v")), "s", &rc);
  ASSERT_EQ(rc, 0);
  const auto second = put(kUnitsPerCluster / 2, 8, 2);  // in the snapshot's cluster 0: a copy
  EXPECT_EQ(get(3, 8), first);
  EXPECT_EQ(get(kUnitsPerCluster / 2, 8), second);
  const auto third = put(2 * kUnitsPerCluster + 1, 8, 3);  // a hole in both: a fresh cluster
  EXPECT_EQ(get(2 * kUnitsPerCluster + 1, 8), third);
}

// A host crash: the lvol bdevs go (an open user is told kRemove), nothing more is written, and
// a load brings back every lvol with what its acknowledged writes left (dirty load).
TEST_F(Lvols, CrashDropsTheBdevsAndALoadRecoversThem) {
  ASSERT_EQ(create_store(), 0);
  create_lvol("thick", 2 * kCluster);
  create_lvol("thin", 8 * kCluster, true);
  bool removed = false;
  on(t0, [&] {
    auto d = mgr->open("lvs0/thin", true, [](bdev::DescEvent e, bdev::Bdev&, void* a) {
      if (e == bdev::DescEvent::kRemove) *static_cast<bool*>(a) = true;
    }, &removed);
    ASSERT_TRUE(d.ok());
    desc = d.value();
  });
  on(t1, [&] { bch = mgr->get_io_channel(desc); });
  const auto data = put(5 * kUnitsPerCluster + 3, 4, 9);  // allocates, never flushed
  Outcome crashed;
  on(t0, [&] { lvs->crash(Outcome::op, &crashed); });
  s.settle();
  EXPECT_TRUE(removed);
  EXPECT_FALSE(crashed.called);  // the user still holds the bdev open
  close_bdev();
  for (int i = 0; i < 100000 && !crashed.called; ++i) s.fw->step();
  ASSERT_TRUE(crashed.called);
  EXPECT_EQ(crashed.rc, 0);
  lvs = nullptr;
  EXPECT_EQ(mgr->find("lvs0/thin"), nullptr);
  EXPECT_EQ(LvolStore::find("lvs0"), nullptr);
  ASSERT_EQ(load_store(), 0);
  EXPECT_FALSE(lvs->blobstore().report().was_clean);
  EXPECT_EQ(lvs->lvol_names(), (std::vector<std::string>{"thick", "thin"}));
  open_bdev("lvs0/thin");
  EXPECT_EQ(get(5 * kUnitsPerCluster + 3, 4), data);
}

// The base bdev's hot removal takes the lvstore down by itself (no hang of the removal), and
// the lvols come back when the base does.
TEST_F(Lvols, HotRemovalOfTheBaseCrashesTheStore) {
  ASSERT_EQ(create_store(), 0);
  create_lvol("a", 2 * kCluster);
  open_bdev("lvs0/a");
  const auto data = put(7, 2, 3);
  close_bdev();
  bool gone = false;
  on(t0, [&] {
    ASSERT_EQ(mgr->unregister_bdev("m0", [](void* a) { *static_cast<bool*>(a) = true; }, &gone), 0);
  });
  for (int i = 0; i < 100000 && !gone; ++i) s.fw->step();
  ASSERT_TRUE(gone);
  lvs = nullptr;
  EXPECT_EQ(mgr->find("lvs0/a"), nullptr);
  EXPECT_EQ(LvolStore::find("lvs0"), nullptr);
}

}  // namespace
}  // namespace pollux::lvol
