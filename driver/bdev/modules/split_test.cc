// split: partition geometry, offset translation, range checks, and the hot-remove chain
// that takes every part down before the base goes.
#include "driver/bdev/modules/split.h"

#include "driver/bdev/modules/vbdev_test_util.h"

namespace pollux::bdev {
namespace {

using testing::Done;
using testing::Watch;

class SplitTest : public testing::VbdevFixture {
 protected:
  void SetUp() override {
    VbdevFixture::SetUp();
    sm = std::make_unique<SplitModule>(*mgr);
  }
  Result<bool> create(SplitOptions o) {
    Result<bool> r = false;
    on(t0, [&] { r = sm->create(o); });
    return r;
  }
  std::unique_ptr<SplitModule> sm;
};

TEST_F(SplitTest, EqualPartsTranslateOffsets) {
  add_malloc("M0", 4099);  // 3 blocks left over
  auto r = create({"M0", 4, 0, 0});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r.value());
  for (int i = 0; i < 4; ++i) {
    Bdev* p = mgr->find("M0p" + std::to_string(i));
    ASSERT_NE(p, nullptr) << i;
    EXPECT_EQ(p->num_blocks(), 1024u);
    EXPECT_EQ(p->module(), "split");
  }
  EXPECT_EQ(mgr->find("M0p4"), nullptr);

  Desc* p2 = open("M0p2");
  auto* ch = channel(p2, t1);
  for (int i = 0; i < 1024; ++i) mem()[i] = static_cast<uint8_t>(i ^ 0x5a);
  Done w;
  ASSERT_EQ(write(p2, ch, 0, 5, 2, &w), 0);
  s.settle();
  ASSERT_EQ(w.ok, 1);
  Desc* base = open("M0", false);
  auto* bc = channel(base, t0);
  Done r0;
  ASSERT_EQ(read(base, bc, 4096, 2 * 1024 + 5, 2, &r0), 0);
  s.settle();
  ASSERT_EQ(r0.ok, 1);
  EXPECT_EQ(std::memcmp(mem(0), mem(4096), 1024), 0);

  // Beyond a part's end: refused by the core.
  Done bad;
  EXPECT_EQ(read(p2, ch, 0, 1024, 1, &bad), -EINVAL);
  EXPECT_EQ(read(p2, ch, 0, 1020, 8, &bad), -EINVAL);
  Done last;
  EXPECT_EQ(read(p2, ch, 0, 1023, 1, &last), 0);
  s.settle();
  EXPECT_EQ(last.ok, 1);
  EXPECT_EQ(bad.calls, 0);
}

TEST_F(SplitTest, SizeInMegabytesAndBadGeometry) {
  add_malloc("M0", 16384);  // 8 MiB
  EXPECT_FALSE(create({"M0", 5, 2, 0}).ok());  // 10 MiB do not fit
  EXPECT_TRUE(sm->configs().empty());
  ASSERT_TRUE(create({"M0", 3, 2, 0}).ok());
  EXPECT_EQ(mgr->find("M0p0")->num_blocks(), 4096u);
  EXPECT_EQ(mgr->find("M0p2")->num_blocks(), 4096u);
  EXPECT_EQ(mgr->find("M0p3"), nullptr);
  EXPECT_FALSE(create({"M0", 0, 0, 0}).ok());
  auto dup = create({"M0", 2, 0, 0});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, -EEXIST);
}

TEST_F(SplitTest, BuiltWhenTheBaseAppears) {
  auto r = create({"N0", 2, 0, 512});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value());
  add_null("N0");
  ASSERT_NE(mgr->find("N0p1"), nullptr);
  EXPECT_EQ(mgr->find("N0p1")->num_blocks(), 512u);
}

TEST_F(SplitTest, HotRemoveTakesEveryPartDown) {
  add_malloc("M0");
  ASSERT_TRUE(create({"M0", 4, 0, 0}).ok());
  Watch w0, w3;
  Desc* p0 = open("M0p0", true, &w0);
  Desc* p3 = open("M0p3", true, &w3);
  auto* c0 = channel(p0, t0);
  auto* c3 = channel(p3, t1);
  Done a, b;
  ASSERT_EQ(write(p0, c0, 0, 0, 1, &a), 0);
  ASSERT_EQ(write(p3, c3, 0, 1000, 1, &b), 0);
  s.settle();
  EXPECT_EQ(a.ok + b.ok, 2);
  w0.on_remove = [&] { close_now(p0); };
  bool gone = false;
  on(t0, [&] { mgr->unregister_bdev("M0", [](void* x) { *static_cast<bool*>(x) = true; }, &gone); });
  s.settle();
  EXPECT_EQ(w0.removes, 1);
  EXPECT_EQ(w3.removes, 1);
  EXPECT_FALSE(gone);  // p3 is still open: the base waits for it
  EXPECT_EQ(mgr->find("M0"), nullptr);
  on(t1, [&] { close_now(p3); });
  s.settle();
  EXPECT_TRUE(gone);
  EXPECT_TRUE(mgr->bdevs().empty());
  EXPECT_TRUE(sm->vbdev_names().empty());
  ASSERT_EQ(sm->configs().size(), 1u);
  EXPECT_FALSE(sm->configs()[0].second);
}

TEST_F(SplitTest, NameCollisionUndoesThePartsAlreadyBuilt) {
  add_malloc("M0");
  add_null("M0p1");  // part 1's name is taken
  auto r = create({"M0", 3, 0, 0});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("already taken"), std::string::npos) << r.error().message;
  s.settle();
  EXPECT_EQ(mgr->find("M0p0"), nullptr);  // undone
  EXPECT_TRUE(sm->configs().empty());
  EXPECT_TRUE(sm->vbdev_names().empty());
  open("M0", true);  // and the base is released
}

TEST_F(SplitTest, RemoveViaModule) {
  add_malloc("M0");
  ASSERT_TRUE(create({"M0", 2, 0, 0}).ok());
  bool done = false;
  on(t0, [&] { ASSERT_EQ(sm->remove("M0", [](void* x) { *static_cast<bool*>(x) = true; }, &done), 0); });
  s.settle();
  EXPECT_TRUE(done);
  EXPECT_EQ(mgr->bdevs().size(), 1u);
  open("M0", true);
}

}  // namespace
}  // namespace pollux::bdev
