// The host stack's own timers follow the simulator's clock in virtual time: timed pollers and
// command timeouts fire at virtual instants, however long the host takes in wall time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
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

// A scripted workload for the CPU-time tests: one poller keeps 8 reads outstanding until 200
// have completed, polling its queue pair on every run and reporting busy on every run (so all
// it costs is its busy time); another reports busy having done nothing, a third idle.
struct Script {
  nvme::Qpair* qp = nullptr;
  const nvme::Namespace* ns = nullptr;
  void* buf = nullptr;
  int submitted = 0, completed = 0;
  static constexpr int kTotal = 200, kDepth = 8;

  static void done(void* arg, const spec::nvme::CompletionEntry&) {
    ++static_cast<Script*>(arg)->completed;
  }
  static event::PollStatus io(void* arg) {
    auto* s = static_cast<Script*>(arg);
    s->qp->process_completions();
    bool queued = false;
    while (s->submitted < kTotal && s->submitted - s->completed < kDepth) {
      EXPECT_EQ(s->qp->read(*s->ns, s->buf, 8u * static_cast<uint64_t>(s->submitted), 8, done, s),
                0);
      ++s->submitted;
      queued = true;
    }
    if (queued) s->qp->flush_doorbell();
    return event::PollStatus::kBusy;
  }
};

struct ScriptRun {
  std::unique_ptr<nvme::Qpair> qp;
  std::unique_ptr<env::DmaRegion> buf;
  Script script;
  event::Poller* io = nullptr;
  event::Poller* bystander = nullptr;
  event::Poller* idle = nullptr;

  explicit ScriptRun(Rig& rig) {
    auto q = rig.controller(0).alloc_io_qpair({});
    EXPECT_TRUE(q.ok());
    qp = std::move(q).value();
    auto b = env::DmaRegion::create(rig.registry(), 4096);
    EXPECT_TRUE(b.ok());
    buf = std::move(b).value();
    script = {qp.get(), rig.controller(0).ns(1), buf->data()};
    rig.lockstep().watch(qp.get());
    event::Thread& t = rig.thread();
    io = t.register_poller(Script::io, &script, 0, "io");
    bystander =
        t.register_poller([](void*) { return event::PollStatus::kBusy; }, nullptr, 0, "bystander");
    idle = t.register_poller([](void*) { return event::PollStatus::kIdle; }, nullptr, 0, "idle");
  }
  void finish(Rig& rig) {
    event::Thread& t = rig.thread();
    t.unregister_poller(io);
    t.unregister_poller(bystander);
    t.unregister_poller(idle);
    rig.lockstep().unwatch(qp.get());
    EXPECT_EQ(rig.controller(0).free_io_qpair(std::move(qp)), 0);
  }
};

struct Times {
  uint64_t reactor_busy, reactor_idle, last_tick, thread_busy, thread_idle;
  static Times of(Rig& rig) {
    const event::ReactorStats& r = rig.framework().reactor(0).stats();
    const event::ThreadStats& t = rig.thread().stats();
    return {r.busy_ticks.load(), r.idle_ticks.load(), r.last_tick.load(), t.busy_ticks.load(),
            t.idle_ticks.load()};
  }
};

uint64_t busy_ticks_of(event::Poller* p) {
  return p->stats().busy_ticks.load();
}

// Virtual time: each poller's busy time is exactly what the cost model charged for its work
// (the io poller: its polls, submissions, completions and doorbells, from its queue pair's
// counts; the bystander did nothing the model charges); the reactor adds the iteration's own
// cost; the idle jumps while the device works are idle time; busy + idle covers every
// nanosecond the reactor's clock moved through.
TEST(Lockstep, PollersBusyTimeIsTheCostModelsChargeForTheirWork) {
  auto rig = make_rig("p4800x");
  ASSERT_NE(rig, nullptr);
  Lockstep& ls = rig->lockstep();
  EXPECT_EQ(&rig->framework().cpu_clock(), &ls.cpu_clock());
  ls.step();  // the host thread arrives on its reactor
  ScriptRun run(*rig);
  const Times t0 = Times::of(*rig);
  const uint64_t steps0 = ls.steps();
  while (run.script.completed < Script::kTotal) ls.step();
  const Times t1 = Times::of(*rig);
  const uint64_t steps = ls.steps() - steps0;
  const nvme::QpairStats& qs = run.qp->stats();
  const HostCostModel& c = ls.costs();

  EXPECT_EQ(qs.completed, 200u);
  EXPECT_EQ(qs.polls, steps);  // one poll per step, each charged
  const uint64_t io_cost = qs.polls * c.poll_ns + qs.submitted * c.submit_ns +
                           qs.completed * c.complete_ns + qs.doorbells * c.doorbell_ns;
  EXPECT_EQ(busy_ticks_of(run.io), io_cost);
  EXPECT_EQ(busy_ticks_of(run.bystander), 0u);
  EXPECT_EQ(busy_ticks_of(run.idle), 0u);
  EXPECT_EQ(run.bystander->stats().busy_runs.load(), steps);

  // Every iteration was busy: the thread's polls are the io poller's work, the reactor's add
  // the iteration cost, and the time between iterations (the idle jumps) is idle.
  EXPECT_EQ(t1.thread_busy - t0.thread_busy, io_cost);
  EXPECT_EQ(t1.reactor_busy - t0.reactor_busy, io_cost + steps * c.reactor_iteration_ns);
  EXPECT_GT(t1.reactor_idle - t0.reactor_idle, 0u);
  EXPECT_EQ(t1.thread_idle - t0.thread_idle, t1.reactor_idle - t0.reactor_idle);
  EXPECT_EQ(t1.reactor_busy + t1.reactor_idle - t0.reactor_busy - t0.reactor_idle,
            t1.last_tick - t0.last_tick);
  // The last step reaped the last completion, so it did not jump: the reactor's clock ends
  // where virtual time is.
  EXPECT_EQ(t1.last_tick, ls.now_ns());
  std::printf(
      "p4800x QD8, 200 reads: %.1f us virtual, reactor busy %.2f%%, io poller %.2f%%\n",
      static_cast<double>(t1.last_tick - t0.last_tick) / 1e3,
      100.0 * static_cast<double>(t1.reactor_busy - t0.reactor_busy) /
          static_cast<double>(t1.last_tick - t0.last_tick),
      100.0 * static_cast<double>(io_cost) / static_cast<double>(t1.last_tick - t0.last_tick));
  run.finish(*rig);
}

// Realtime: the same workload measured with the TSC. Each reactor's busy + idle is exactly the
// span of its own clock readings and lies within the wall time the lockstep's clock saw; the
// io poller's measured time is not zero, the bystander's is its own (tiny) run time.
TEST(Lockstep, RealtimeBusyPlusIdleIsTheWallTimeTheReactorRanThrough) {
  auto rig = make_rig("p4800x");
  ASSERT_NE(rig, nullptr);
  Lockstep& ls = rig->lockstep();
  ls.set_realtime(true);
  ls.step();
  ScriptRun run(*rig);
  ls.step();
  const uint64_t clock0 = ls.now_ns();
  const Times t0 = Times::of(*rig);
  while (run.script.completed < Script::kTotal) ls.step();
  const Times t1 = Times::of(*rig);
  const uint64_t span = t1.last_tick - t0.last_tick;
  EXPECT_EQ(t1.reactor_busy + t1.reactor_idle - t0.reactor_busy - t0.reactor_idle, span);
  // One thread and no modelled overhead: the thread's time is the reactor's.
  EXPECT_EQ(t1.thread_busy + t1.thread_idle - t0.thread_busy - t0.thread_idle, span);
  // Each step's devices caught up to the wall clock after the reactor's iteration.
  EXPECT_LE(t0.last_tick, clock0);
  EXPECT_LE(t1.last_tick, ls.now_ns());
  EXPECT_GT(busy_ticks_of(run.io), 0u);
  EXPECT_GT(t1.reactor_busy - t0.reactor_busy, 0u);
  std::printf(
      "realtime, 200 reads: reactor %.1f us (busy %.1f%%), wall %.1f us\n",
      static_cast<double>(span) / 1e3,
      100.0 * static_cast<double>(t1.reactor_busy - t0.reactor_busy) / static_cast<double>(span),
      static_cast<double>(ls.now_ns() - clock0) / 1e3);
  run.finish(*rig);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
