// delay: the latency model's moments, the latency the stack really shows in virtual time
// (deterministic for a seed), and teardown with held completions.
#include "driver/bdev/modules/delay.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "driver/bdev/modules/vbdev_test_util.h"

namespace pollux::bdev {
namespace {

using testing::Done;
using testing::Watch;

uint64_t test_seed() {
  const char* e = std::getenv("POLLUX_DELAY_SEED");
  const uint64_t seed = e ? std::strtoull(e, nullptr, 0) : 20240611;
  std::printf("delay test seed: %llu (set POLLUX_DELAY_SEED to change)\n",
              static_cast<unsigned long long>(seed));
  return seed;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double p99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(0.99 * static_cast<double>(v.size() - 1))];
}

TEST(LatencyModelTest, MatchesAverageAndP99) {
  const uint64_t seed = test_seed();
  struct Case { double avg, p99; LatencyModel::Kind kind; } cases[] = {
      {100, 400, LatencyModel::Kind::kLognormal},
      {20, 25, LatencyModel::Kind::kLognormal},
      {10, 300, LatencyModel::Kind::kTwoPoint},
      {30, 0, LatencyModel::Kind::kConstant},
      {0, 0, LatencyModel::Kind::kNone}};
  for (const auto& c : cases) {
    auto m = LatencyModel::make(c.avg, c.p99);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->kind(), c.kind);
    std::mt19937_64 rng(seed);
    std::vector<double> v(200000);
    for (auto& x : v) x = m->draw_us(rng);
    EXPECT_NEAR(mean(v), c.avg, 0.02 * c.avg + 1e-9) << c.avg << "/" << c.p99;
    const double want_p99 = c.p99 ? c.p99 : c.avg;
    EXPECT_NEAR(p99(v), want_p99, 0.05 * want_p99 + 1e-9) << c.avg << "/" << c.p99;
  }
  EXPECT_FALSE(LatencyModel::make(100, 50).ok());    // p99 below the average
  EXPECT_FALSE(LatencyModel::make(10, 1000).ok());   // more than 50x
  EXPECT_FALSE(LatencyModel::make(-1, 0).ok());
  EXPECT_FALSE(LatencyModel::make(0, 10).ok());
}

class DelayTest : public testing::VbdevFixture {
 protected:
  void SetUp() override {
    VbdevFixture::SetUp();
    dm = std::make_unique<DelayModule>(*mgr);
  }
  Result<bool> create(DelayOptions o) {
    Result<bool> r = false;
    on(t0, [&] { r = dm->create(o); });
    return r;
  }

  // A closed loop at queue depth qd on t0 until n I/Os have completed, 1 µs per step.
  struct Loop;
  struct Req {
    Loop* loop;
    uint64_t start;
  };
  struct Loop {
    Manager* mgr;
    Desc* d;
    event::IoChannel* ch;
    const env::Clock* clock;
    void* buf;
    bool writes;
    int left;
    std::vector<double> lat_us;
    std::vector<Req> reqs;
    uint64_t lba = 0;
    void submit(Req* r) {
      r->start = clock->now();
      --left;
      lba = (lba + 8) % 4096;
      const int rc = writes ? mgr->write(d, ch, buf, lba, 1, &done, r)
                            : mgr->read(d, ch, buf, lba, 1, &done, r);
      ASSERT_EQ(rc, 0);
    }
    static void done(BdevIo&, bool ok, void* arg) {
      auto* r = static_cast<Req*>(arg);
      Loop* l = r->loop;
      EXPECT_TRUE(ok);
      l->lat_us.push_back(static_cast<double>(l->clock->now() - r->start) / 1000.0);
      if (l->left > 0) l->submit(r);
    }
  };
  std::vector<double> run_loop(const std::string& name, bool writes, int n, int qd) {
    Desc* d = open(name);
    auto* ch = channel(d, t0);
    Loop l{mgr.get(), d, ch, &s.fw->clock(), mem(), writes, n, {}, {}, 0};
    l.reqs.resize(qd);
    on(t0, [&] {
      for (auto& r : l.reqs) {
        r.loop = &l;
        l.submit(&r);
      }
    });
    for (int i = 0; i < 10'000'000 && static_cast<int>(l.lat_us.size()) < n; ++i) {
      s.clock.advance_us(1);
      s.fw->step();
    }
    EXPECT_EQ(static_cast<int>(l.lat_us.size()), n);
    return l.lat_us;
  }
  std::unique_ptr<DelayModule> dm;
};

TEST_F(DelayTest, LatencyDistributionInVirtualTime) {
  const uint64_t seed = test_seed();
  add_null("N0");
  DelayOptions o{"D0", "N0", 100, 400, 50, 0, seed};
  auto r = create(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto reads = run_loop("D0", false, 4000, 32);
  const double m = mean(reads), p = p99(reads);
  std::printf("reads: mean %.1f us, p99 %.1f us (want 100 / 400)\n", m, p);
  EXPECT_NEAR(m, 100, 10);
  EXPECT_NEAR(p, 400, 80);
  auto writes = run_loop("D0", true, 500, 8);
  for (double w : writes) {
    EXPECT_GE(w, 50.0);
    EXPECT_LE(w, 52.0);
  }
  auto st = dm->stats("D0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->delayed, 4500u);
  EXPECT_EQ(st->held, 0u);
}

TEST_F(DelayTest, SameSeedSameLatencies) {
  const uint64_t seed = test_seed();
  add_null("N0");
  add_null("N1");
  ASSERT_TRUE(create({"D0", "N0", 80, 300, 0, 0, seed}).ok());
  ASSERT_TRUE(create({"D1", "N1", 80, 300, 0, 0, seed}).ok());
  auto a = run_loop("D0", false, 300, 1);
  auto b = run_loop("D1", false, 300, 1);
  EXPECT_EQ(a, b);
}

TEST_F(DelayTest, BadLatenciesAreRefused) {
  add_null("N0");
  auto r = create({"D0", "N0", 100, 50, 0, 0, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("read latency"), std::string::npos) << r.error().message;
  EXPECT_TRUE(dm->configs().empty());
}

TEST_F(DelayTest, HeldCompletionsAreReleasedOnHotRemove) {
  add_malloc("M0");
  ASSERT_TRUE(create({"D0", "M0", 1000, 0, 1000, 0, 1}).ok());
  Watch watch;
  Desc* d = open("D0", true, &watch);
  auto* c0 = channel(d, t0);
  auto* c1 = channel(d, t1);
  Done r0, r1;
  ASSERT_EQ(read(d, c0, 0, 0, 1, &r0), 0);
  ASSERT_EQ(write(d, c1, 0, 1, 1, &r1), 0);
  s.settle();
  EXPECT_EQ(r0.calls + r1.calls, 0);
  EXPECT_EQ(dm->stats("D0")->held, 2u);
  watch.on_remove = [&] { close_now(d); };
  on(t0, [&] { mgr->unregister_bdev("M0"); });
  s.settle();  // no clock movement: released by the teardown, not by time
  EXPECT_EQ(r0.ok + r1.ok, 2);
  EXPECT_EQ(watch.removes, 1);
  EXPECT_TRUE(mgr->bdevs().empty());
}

}  // namespace
}  // namespace pollux::bdev
