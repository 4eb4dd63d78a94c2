// The host stack's own timers follow the simulator's clock in virtual time: timed pollers and
// command timeouts fire at virtual instants, however long the host takes in wall time.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "driver/env/dma_memory.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim {
namespace {

std::unique_ptr<Rig> make_rig(const char* profile) {
  auto p = emu::timing::load_profile(profile);
  EXPECT_TRUE(p.ok()) << p.error();
  RigOptions o;
  o.profile = p.value();
  std::string err;
  auto rig = Rig::create(o, &err);
  EXPECT_NE(rig, nullptr) << err;
  return rig;
}

TEST(Lockstep, TimedPollersFireOnVirtualTime) {
  auto rig = make_rig("p3700");
  ASSERT_NE(rig, nullptr);
  int calls = 0;
  auto* poller = rig->thread().register_poller(
      [](void* c) {
        ++*static_cast<int*>(c);
        return event::PollStatus::kBusy;
      },
      &calls, /*period_us=*/100, "tick");
  ASSERT_NE(poller, nullptr);
  const uint64_t t0 = rig->lockstep().now_ns();
  while (rig->lockstep().now_ns() - t0 < 10'000'000) rig->lockstep().step();  // 10 ms virtual
  rig->thread().unregister_poller(poller);
  EXPECT_GE(calls, 99);
  EXPECT_LE(calls, 101);
}

struct Outcome {
  const env::Clock* clock = nullptr;
  int completions = 0, timeouts = 0;
  uint64_t timeout_at = 0;  // virtual ns
  uint16_t status = 0xffff;
};

// A 50 us timeout on a drive whose reads take ~77 us: the timeout is reported (in virtual
// time, once), and the read still completes with its data afterwards.
TEST(Lockstep, CommandTimeoutsFollowVirtualTime) {
  auto rig = make_rig("p3700");
  ASSERT_NE(rig, nullptr);
  Outcome out;
  nvme::QpairOptions qo;
  qo.timeout_us = 50;
  qo.timeout_cb = [](void* ctx, nvme::Qpair&, uint16_t) {
    auto* o = static_cast<Outcome*>(ctx);
    ++o->timeouts;
    o->timeout_at = o->clock->now();
  };
  qo.timeout_ctx = &out;
  out.clock = &rig->clock();
  auto qp = rig->controller(0).alloc_io_qpair(qo);
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  auto buf = env::DmaRegion::create(rig->registry(), 4096);
  ASSERT_TRUE(buf.ok());
  const nvme::Namespace* ns = rig->controller(0).ns(1);
  ASSERT_NE(ns, nullptr);
  const uint64_t t0 = rig->lockstep().now_ns();
  ASSERT_EQ(qp.value()->read(*ns, buf.value()->data(), 0, 8,
                             [](void* ctx, const spec::nvme::CompletionEntry& c) {
                               auto* o = static_cast<Outcome*>(ctx);
                               ++o->completions;
                               o->status = c.status;
                             },
                             &out),
            0);
  qp.value()->flush_doorbell();
  while (out.completions == 0 && rig->lockstep().now_ns() - t0 < 1'000'000) {
    qp.value()->process_completions();
    rig->lockstep().step();
  }
  const uint64_t timeout_at = out.timeout_at - t0;
  EXPECT_EQ(out.completions, 1);
  EXPECT_EQ(out.timeouts, 1);
  EXPECT_GE(timeout_at, 50'000u);
  EXPECT_LT(timeout_at, 77'000u) << "reported before the read came back";
  EXPECT_EQ(spec::nvme::status::sc(out.status), 0);
  EXPECT_EQ(rig->controller(0).free_io_qpair(std::move(qp).value()), 0);
}

// Realtime mode: time follows the wall clock from the switch on — a step taken at least 2 ms
// of wall time later sees at least 2 ms more — and a read still completes no earlier than
// the model's latency (~77 us on this profile) after its submission.
TEST(Lockstep, RealtimeFollowsTheWallClock) {
  auto rig = make_rig("p3700");
  ASSERT_NE(rig, nullptr);
  Lockstep& ls = rig->lockstep();
  const uint64_t t0 = ls.now_ns();
  ls.set_realtime(true);
  const auto after_switch = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - after_switch < std::chrono::milliseconds(2)) {
  }
  ls.step();
  EXPECT_GE(ls.now_ns() - t0, 2'000'000u);

  nvme::Controller& ctrl = rig->controller(0);
  auto qp = ctrl.alloc_io_qpair({});
  ASSERT_TRUE(qp.ok());
  ls.watch(qp.value().get());
  auto mem = env::DmaRegion::create(rig->registry(), 4096);
  ASSERT_TRUE(mem.ok());
  struct Done {
    bool done = false;
    uint64_t at = 0;
    Lockstep* ls;
  } d{false, 0, &ls};
  const uint64_t submitted = ls.now_ns();
  ASSERT_EQ(qp.value()->read(*ctrl.ns(1), mem.value()->data(), 8, 8,
                             [](void* c, const spec::nvme::CompletionEntry&) {
                               auto* x = static_cast<Done*>(c);
                               x->done = true;
                               x->at = x->ls->now_ns();
                             },
                             &d),
            0);
  qp.value()->flush_doorbell();
  while (!d.done && ls.now_ns() - submitted < 1'000'000'000) {
    qp.value()->process_completions();
    ls.step();
  }
  ASSERT_TRUE(d.done);
  EXPECT_GE(d.at - submitted, 70'000u) << "a completion seen before its simulated time";
  ls.unwatch(qp.value().get());
  EXPECT_EQ(ctrl.free_io_qpair(std::move(qp).value()), 0);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
