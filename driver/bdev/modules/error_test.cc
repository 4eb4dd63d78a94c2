// error: injected failures (status, NVMe status, count, type, LBA range), pending I/O
// released on clear, reset and hot-remove.
#include "driver/bdev/modules/error.h"

#include "driver/bdev/modules/vbdev_test_util.h"

namespace pollux::bdev {
namespace {

using testing::Done;
using testing::Watch;

class ErrorTest : public testing::VbdevFixture {
 protected:
  void SetUp() override {
    VbdevFixture::SetUp();
    em = std::make_unique<ErrorModule>(*mgr);
    add_malloc("M0");
    Result<bool> r = false;
    on(t0, [&] { r = em->create({"M0", ""}); });
    ASSERT_TRUE(r.ok()) << r.error().message;
    d = open("M0_err", true, &watch);
    c0 = channel(d, t0);
    c1 = channel(d, t1);
  }
  std::unique_ptr<ErrorModule> em;
  Watch watch;
  Desc* d = nullptr;
  event::IoChannel *c0 = nullptr, *c1 = nullptr;
};

TEST_F(ErrorTest, NamesAndValidation) {
  EXPECT_NE(mgr->find("M0_err"), nullptr);
  add_null("N0");
  Result<bool> r = false;
  on(t0, [&] { r = em->create({"N0", "custom"}); });
  ASSERT_TRUE(r.ok());
  EXPECT_NE(mgr->find("custom"), nullptr);
  ErrorInjection bad;
  bad.lba_start = 10;
  bad.lba_end = 10;
  EXPECT_EQ(em->inject("M0_err", bad), -EINVAL);
  ErrorInjection nvme0;
  nvme0.status = IoStatus::kNvmeError;  // no status field
  EXPECT_EQ(em->inject("M0_err", nvme0), -EINVAL);
  EXPECT_EQ(em->inject("nope", ErrorInjection{}), -ENODEV);
}

TEST_F(ErrorTest, FailsTheNextNOfATypeThenPassesAgain) {
  ErrorInjection inj;
  inj.type = IoType::kRead;
  inj.count = 2;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done r[3], w;
  ASSERT_EQ(write(d, c0, 0, 0, 1, &w), 0);  // other types pass
  for (auto& x : r) ASSERT_EQ(read(d, c1, 4096, 0, 1, &x), 0);
  s.settle();
  EXPECT_EQ(w.ok, 1);
  EXPECT_EQ(r[0].last, IoStatus::kFailed);
  EXPECT_EQ(r[1].last, IoStatus::kFailed);
  EXPECT_EQ(r[2].last, IoStatus::kSuccess);
  auto st = em->stats("M0_err");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->failed, 2u);
  EXPECT_EQ(st->injections, 0u);
}

TEST_F(ErrorTest, NvmeStatusReachesTheCaller) {
  ErrorInjection inj;
  inj.type = IoType::kWrite;
  inj.status = IoStatus::kNvmeError;
  inj.nvme_status = (0x2 << 9) | (0x81 << 1);  // media: unrecovered read error
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done w;
  ASSERT_EQ(write(d, c0, 0, 5, 1, &w), 0);
  s.settle();
  EXPECT_EQ(w.last, IoStatus::kNvmeError);
  EXPECT_EQ(w.nvme, inj.nvme_status);
}

TEST_F(ErrorTest, LbaRangeIsRespected) {
  ErrorInjection inj;  // every type, every I/O in range, until cleared
  inj.count = 0;
  inj.lba_start = 100;
  inj.lba_end = 200;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  struct Case { uint64_t off, n; bool fails; } cases[] = {
      {50, 50, false}, {99, 2, true}, {150, 1, true}, {190, 20, true}, {200, 8, false},
      {0, 300, true}};
  for (const auto& c : cases) {
    Done r;
    ASSERT_EQ(read(d, c0, 0, c.off, c.n, &r), 0);
    s.settle();
    EXPECT_EQ(r.last, c.fails ? IoStatus::kFailed : IoStatus::kSuccess) << c.off << "+" << c.n;
  }
  bool cleared = false;
  on(t0, [&] { ASSERT_EQ(em->clear("M0_err", std::nullopt, [](void* a) { *static_cast<bool*>(a) = true; }, &cleared), 0); });
  s.settle();
  EXPECT_TRUE(cleared);
  Done r;
  ASSERT_EQ(read(d, c0, 0, 150, 1, &r), 0);
  s.settle();
  EXPECT_EQ(r.last, IoStatus::kSuccess);
}

TEST_F(ErrorTest, PendingIsHeldUntilClearedThenAborted) {
  ErrorInjection inj;
  inj.type = IoType::kRead;
  inj.count = 3;
  inj.mode = ErrorMode::kPending;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done r0, r1, r2, w;
  ASSERT_EQ(read(d, c0, 0, 0, 1, &r0), 0);
  ASSERT_EQ(read(d, c1, 0, 1, 1, &r1), 0);
  ASSERT_EQ(read(d, c1, 0, 2, 1, &r2), 0);
  ASSERT_EQ(write(d, c0, 0, 3, 1, &w), 0);
  s.settle();
  s.clock.advance_us(10'000'000);
  s.settle();
  EXPECT_EQ(r0.calls + r1.calls + r2.calls, 0);  // held, whatever the time
  EXPECT_EQ(w.ok, 1);
  EXPECT_EQ(em->stats("M0_err")->held, 3u);
  // Clearing writes releases nothing.
  on(t0, [&] { em->clear("M0_err", IoType::kWrite); });
  s.settle();
  EXPECT_EQ(r0.calls + r1.calls + r2.calls, 0);
  on(t0, [&] { em->clear("M0_err"); });
  s.settle();
  for (Done* r : {&r0, &r1, &r2}) {
    EXPECT_EQ(r->calls, 1);
    EXPECT_EQ(r->last, IoStatus::kAborted);
  }
  auto st = em->stats("M0_err");
  EXPECT_EQ(st->held, 0u);
  EXPECT_EQ(st->aborted, 3u);
}

TEST_F(ErrorTest, ResetAbortsPendingIo) {
  ErrorInjection inj;
  inj.type = IoType::kRead;
  inj.count = 0;
  inj.mode = ErrorMode::kPending;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done r0, r1, rs;
  ASSERT_EQ(read(d, c0, 0, 0, 1, &r0), 0);
  ASSERT_EQ(read(d, c1, 0, 1, 1, &r1), 0);
  s.settle();
  on(t0, [&] { ASSERT_EQ(mgr->reset(d, c0, &Done::cb, &rs), 0); });
  s.settle();
  EXPECT_EQ(rs.ok, 1);
  EXPECT_EQ(r0.last, IoStatus::kAborted);
  EXPECT_EQ(r1.last, IoStatus::kAborted);
}

TEST_F(ErrorTest, PendingIsAbortedOnHotRemove) {
  ErrorInjection inj;
  inj.mode = ErrorMode::kPending;
  inj.count = 0;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done r0, r1;
  ASSERT_EQ(read(d, c0, 0, 0, 1, &r0), 0);
  ASSERT_EQ(write(d, c1, 0, 1, 1, &r1), 0);
  s.settle();
  // The user closes once its I/O has come back (then it may put its channels).
  watch.on_remove = [&] {
    EXPECT_EQ(r0.calls + r1.calls, 2);
    close_now(d);
  };
  bool gone = false;
  on(t0, [&] { mgr->unregister_bdev("M0", [](void* a) { *static_cast<bool*>(a) = true; }, &gone); });
  s.settle();
  EXPECT_EQ(r0.last, IoStatus::kAborted);
  EXPECT_EQ(r1.last, IoStatus::kAborted);
  EXPECT_EQ(watch.removes, 1);
  EXPECT_TRUE(gone);
  EXPECT_TRUE(mgr->bdevs().empty());
  EXPECT_TRUE(em->vbdev_names().empty());
}

TEST_F(ErrorTest, RemoveViaModuleAbortsPendingIo) {
  ErrorInjection inj;
  inj.mode = ErrorMode::kPending;
  ASSERT_EQ(em->inject("M0_err", inj), 0);
  Done r0;
  ASSERT_EQ(read(d, c0, 0, 0, 1, &r0), 0);
  s.settle();
  watch.on_remove = [&] { close_now(d); };
  on(t0, [&] { ASSERT_EQ(em->remove("M0_err"), 0); });
  s.settle();
  EXPECT_EQ(r0.last, IoStatus::kAborted);
  EXPECT_EQ(mgr->find("M0_err"), nullptr);
  open("M0", true);  // the claim is gone
}

}  // namespace
}  // namespace pollux::bdev
