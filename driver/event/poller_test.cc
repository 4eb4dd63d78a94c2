#include <gtest/gtest.h>

#include "driver/event/test_util.h"

namespace pollux::event {
namespace {

using testing::StepFramework;

struct Counter {
  int runs = 0;
  int pause_after = -1;
  int unregister_after = -1;
  Poller* self = nullptr;
  PollStatus status = PollStatus::kBusy;
};

PollStatus count_poll(void* arg) {
  auto* c = static_cast<Counter*>(arg);
  ++c->runs;
  if (c->runs == c->pause_after) Thread::current()->pause_poller(c->self);
  if (c->runs == c->unregister_after) Thread::current()->unregister_poller(c->self);
  return c->status;
}

TEST(Poller, ActivePollerRunsEveryIteration) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Counter c;
  c.self = t->register_poller(count_poll, &c, 0, "count");
  ASSERT_NE(c.self, nullptr);
  for (int i = 0; i < 5; ++i) s.fw->step();
  EXPECT_EQ(c.runs, 5);
  EXPECT_EQ(c.self->stats().runs.load(), 5u);
  EXPECT_EQ(c.self->stats().busy_runs.load(), 5u);
}

TEST(Poller, PausesAndUnregistersItselfFromInside) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Counter pauser, quitter;
  pauser.pause_after = 3;
  quitter.unregister_after = 2;
  pauser.self = t->register_poller(count_poll, &pauser, 0, "pauser");
  quitter.self = t->register_poller(count_poll, &quitter, 0, "quitter");
  EXPECT_EQ(t->poller_count(), 2u);
  for (int i = 0; i < 10; ++i) s.fw->step();
  EXPECT_EQ(pauser.runs, 3);
  EXPECT_EQ(quitter.runs, 2);
  EXPECT_EQ(t->poller_count(), 1u);  // the quitter is gone, the paused one remains
  EXPECT_TRUE(pauser.self->paused());

  // Resume from a message on the owner thread.
  ASSERT_EQ(t->send_msg([](void* p) { Thread::current()->resume_poller(static_cast<Poller*>(p)); },
                        pauser.self),
            0);
  for (int i = 0; i < 4; ++i) s.fw->step();
  EXPECT_EQ(pauser.runs, 3 + 4);  // the resume ran before the pollers in the same iteration
}

TEST(Poller, UnregisterWhilePausedFreesIt) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Counter c;
  c.pause_after = 1;
  c.self = t->register_poller(count_poll, &c, 0, "p");
  s.fw->step();
  ASSERT_TRUE(c.self->paused());
  {
    CurrentThreadScope on(t);
    t->unregister_poller(c.self);
  }
  EXPECT_EQ(t->poller_count(), 0u);
  EXPECT_TRUE(t->poller_samples().empty());
}

// A timed poller in step mode with a virtual clock runs exactly once per period.
TEST(Poller, TimedPollerFollowsTheVirtualClock) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Counter c;
  c.self = t->register_poller(count_poll, &c, 100, "timed-100us");  // registered at t=0
  for (int us = 0; us < 1000; us += 10) {
    s.clock.advance_us(10);
    s.fw->step();
  }
  EXPECT_EQ(c.runs, 10);  // at 100, 200, ... 1000 µs
  // Not yet due: stepping without advancing time does nothing.
  for (int i = 0; i < 50; ++i) s.fw->step();
  EXPECT_EQ(c.runs, 10);

  CurrentThreadScope on(t);
  t->pause_poller(c.self);
  s.clock.advance_us(500);
  s.fw->step();
  EXPECT_EQ(c.runs, 10);  // paused
  t->resume_poller(c.self);  // next run one full period after resuming
  s.clock.advance_us(99);
  s.fw->step();
  EXPECT_EQ(c.runs, 10);
  s.clock.advance_us(1);
  s.fw->step();
  EXPECT_EQ(c.runs, 11);
}

TEST(Poller, TimedPollersRunEarliestFirst) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  static std::vector<int> order;
  order.clear();
  auto record = [](void* arg) {
    order.push_back(static_cast<int>(reinterpret_cast<intptr_t>(arg)));
    return PollStatus::kBusy;
  };
  t->register_poller(record, reinterpret_cast<void*>(300), 300, "300");
  t->register_poller(record, reinterpret_cast<void*>(100), 100, "100");
  t->register_poller(record, reinterpret_cast<void*>(200), 200, "200");
  s.clock.advance_us(300);
  s.fw->step();
  EXPECT_EQ(order, (std::vector<int>{100, 200, 300}));
}

TEST(Poller, StatisticsSplitBusyAndIdle) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Counter busy, idle;
  idle.status = PollStatus::kIdle;
  t->register_poller(count_poll, &busy, 0, "busy");
  t->register_poller(count_poll, &idle, 0, "idle");
  for (int i = 0; i < 7; ++i) s.fw->step();
  auto samples = t->poller_samples();
  ASSERT_EQ(samples.size(), 2u);
  for (const auto& p : samples) {
    EXPECT_EQ(p.runs, 7u) << p.name;
    EXPECT_EQ(p.busy_runs, p.name == "busy" ? 7u : 0u) << p.name;
  }
  const ReactorStats& rs = s.fw->reactor(0).stats();
  EXPECT_GE(rs.iterations.load(), 7u);
}

// The clock is read once per poller run and that reading ends the thread's interval too:
// every tick goes to the poller and the thread that spent it, none is lost or counted twice.
TEST(Poller, TicksGoToThePollerAndThreadThatSpentThem) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  Thread* other = s.fw->create_thread("other", 0);  // no pollers: its share is nothing
  struct Spend {
    env::VirtualClock* clock;
    uint64_t ticks;
    PollStatus status;
  };
  auto spend = [](void* arg) {
    auto* sp = static_cast<Spend*>(arg);
    sp->clock->advance(sp->ticks);
    return sp->status;
  };
  Spend busy{&s.clock, 5, PollStatus::kBusy}, idle{&s.clock, 3, PollStatus::kIdle};
  t->register_poller(spend, &busy, 0, "busy");
  t->register_poller(spend, &idle, 0, "idle");
  s.fw->step();  // the threads arrive
  const uint64_t t0 = t->stats().busy_ticks.load(), r0 = s.fw->reactor(0).stats().busy_ticks.load();
  constexpr int kSteps = 10;
  for (int i = 0; i < kSteps; ++i) s.fw->step();
  for (const auto& p : t->poller_samples())
    EXPECT_EQ(p.busy_ticks, p.name == "busy" ? 5u * (kSteps + 1) : 0u) << p.name;
  EXPECT_EQ(t->stats().busy_ticks.load() - t0, 8u * kSteps);
  EXPECT_EQ(t->stats().idle_ticks.load(), 0u);
  EXPECT_EQ(other->stats().busy_ticks.load() + other->stats().idle_ticks.load(), 0u);
  EXPECT_EQ(s.fw->reactor(0).stats().busy_ticks.load() - r0, 8u * kSteps);
}

TEST(Poller, RejectsANullFunction) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  EXPECT_EQ(t->register_poller(nullptr, nullptr, 0, "null"), nullptr);
}

}  // namespace
}  // namespace pollux::event
