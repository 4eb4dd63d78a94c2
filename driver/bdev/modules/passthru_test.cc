// passthru (and the shared vbdev machinery): examine before/after the base, claims, I/O
// forwarding and counting on two threads, stacking, and the hot-remove chain.
#include "driver/bdev/modules/passthru.h"

#include "driver/bdev/modules/vbdev_test_util.h"

namespace pollux::bdev {
namespace {

using testing::Done;
using testing::Watch;

class PassthruTest : public testing::VbdevFixture {
 protected:
  void SetUp() override {
    VbdevFixture::SetUp();
    pt = std::make_unique<PassthruModule>(*mgr);
  }
  Result<bool> create(const std::string& name, const std::string& base) {
    Result<bool> r = false;
    on(t0, [&] { r = pt->create({name, base}); });
    return r;
  }
  std::unique_ptr<PassthruModule> pt;
};

TEST_F(PassthruTest, BuiltWhenTheBaseAppearsAndClaimsIt) {
  auto r = create("P0", "M0");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value());  // waiting for M0
  EXPECT_EQ(mgr->find("P0"), nullptr);
  ASSERT_EQ(pt->configs().size(), 1u);
  EXPECT_FALSE(pt->configs()[0].second);

  Bdev* m0 = add_malloc("M0", 2048, 4096);
  Bdev* p0 = mgr->find("P0");
  ASSERT_NE(p0, nullptr);
  EXPECT_EQ(p0->module(), "passthru");
  EXPECT_EQ(p0->block_size(), 4096u);
  EXPECT_EQ(p0->num_blocks(), m0->num_blocks());
  EXPECT_TRUE(pt->configs()[0].second);

  // The base is claimed: no other writer, no second passthru.
  Result<Desc*> w = make_error(EINVAL, "");
  on(t0, [&] { w = mgr->open("M0", true); });
  EXPECT_FALSE(w.ok());
  auto again = create("P1", "M0");
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(pt->configs().size(), 1u);  // the failed one is not kept
  // Same name twice.
  auto dup = create("P0", "M9");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, -EEXIST);
  EXPECT_FALSE(create("", "M0").ok());
}

TEST_F(PassthruTest, ForwardsAndCountsOnTwoThreads) {
  add_malloc("M0");
  ASSERT_TRUE(create("P0", "M0").ok());
  Desc* d = open("P0");
  auto* c0 = channel(d, t0);
  auto* c1 = channel(d, t1);
  for (int i = 0; i < 4096; ++i) mem()[i] = static_cast<uint8_t>(i * 7);
  Done w0, w1, r0;
  ASSERT_EQ(write(d, c0, 0, 10, 4, &w0), 0);
  ASSERT_EQ(write(d, c1, 2048, 100, 4, &w1), 0);
  s.settle();
  EXPECT_EQ(w0.ok + w1.ok, 2);
  // Through the base (read-only descriptor is allowed beside the claim).
  Desc* base = open("M0", false);
  auto* bc = channel(base, t1);
  ASSERT_EQ(read(base, bc, 8192, 10, 4, &r0), 0);
  s.settle();
  ASSERT_EQ(r0.ok, 1);
  EXPECT_EQ(std::memcmp(mem(0), mem(8192), 2048), 0);
  Done r1;
  ASSERT_EQ(read(d, c0, 16384, 100, 4, &r1), 0);
  s.settle();
  EXPECT_EQ(std::memcmp(mem(2048), mem(16384), 2048), 0);
  // Out of range is refused by the core, not forwarded.
  Done bad;
  EXPECT_EQ(read(d, c0, 0, 4095, 2, &bad), -EINVAL);

  auto c = pt->counters("P0");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->submitted[static_cast<int>(IoType::kWrite)], 2u);
  EXPECT_EQ(c->completed[static_cast<int>(IoType::kWrite)], 2u);
  EXPECT_EQ(c->submitted[static_cast<int>(IoType::kRead)], 1u);
  EXPECT_EQ(c->failed[static_cast<int>(IoType::kRead)], 0u);
  EXPECT_FALSE(pt->counters("nope").ok());
}

TEST_F(PassthruTest, RemoveReleasesTheClaimAndForgetsTheConfig) {
  add_malloc("M0");
  ASSERT_TRUE(create("P0", "M0").ok());
  bool done = false;
  on(t0, [&] { EXPECT_EQ(pt->remove("P0", [](void* a) { *static_cast<bool*>(a) = true; }, &done), 0); });
  s.settle();
  EXPECT_TRUE(done);
  EXPECT_EQ(mgr->find("P0"), nullptr);
  EXPECT_TRUE(pt->configs().empty());
  EXPECT_TRUE(pt->vbdev_names().empty());
  open("M0", true);  // no claim left
  EXPECT_EQ(pt->remove("P0"), -ENOENT);
}

TEST_F(PassthruTest, HotRemoveChainAndRebuild) {
  add_malloc("M0");
  ASSERT_TRUE(create("P0", "M0").ok());
  Watch watch;
  Desc* d = open("P0", true, &watch);
  auto* ch = channel(d, t1);
  watch.on_remove = [&] { close_now(d); };
  Done w;
  ASSERT_EQ(write(d, ch, 0, 0, 8, &w), 0);
  s.settle();
  ASSERT_EQ(w.ok, 1);

  bool gone = false;
  on(t0, [&] {
    EXPECT_EQ(mgr->unregister_bdev("M0", [](void* a) { *static_cast<bool*>(a) = true; }, &gone), 0);
  });
  s.settle();
  EXPECT_EQ(watch.removes, 1);
  EXPECT_TRUE(gone);  // the base could only go once the passthru closed it
  EXPECT_EQ(mgr->find("P0"), nullptr);
  EXPECT_TRUE(mgr->bdevs().empty());
  ASSERT_EQ(pt->configs().size(), 1u);
  EXPECT_FALSE(pt->configs()[0].second);  // kept, unbuilt

  add_malloc("M0");  // the base comes back: so does the passthru
  EXPECT_NE(mgr->find("P0"), nullptr);
}

TEST_F(PassthruTest, StacksOnAnotherPassthru) {
  ASSERT_TRUE(create("P1", "P0").ok());
  ASSERT_TRUE(create("P0", "N0").ok());
  add_null("N0");
  ASSERT_NE(mgr->find("P1"), nullptr);
  Desc* d = open("P1");
  auto* ch = channel(d, t0);
  Done r;
  ASSERT_EQ(read(d, ch, 0, 0, 8, &r), 0);
  s.settle();
  EXPECT_EQ(r.ok, 1);
  EXPECT_EQ(pt->counters("P0")->completed[0], 1u);
  EXPECT_EQ(pt->counters("P1")->completed[0], 1u);
  release_all();
  on(t0, [&] { mgr->unregister_bdev("N0"); });  // the whole stack goes
  s.settle();
  EXPECT_TRUE(mgr->bdevs().empty());
}

}  // namespace
}  // namespace pollux::bdev
