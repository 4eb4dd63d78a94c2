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

TEST(Poller, RejectsANullFunction) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  EXPECT_EQ(t->register_poller(nullptr, nullptr, 0, "null"), nullptr);
}

}  // namespace
}  // namespace pollux::event
