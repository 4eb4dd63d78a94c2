#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include "driver/event/test_util.h"

namespace pollux::event {
namespace {

using testing::StepFramework;

TEST(CoreMask, ParsesHexAndLists) {
  EXPECT_EQ(*parse_core_mask("0x3"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*parse_core_mask("0x10"), (std::vector<int>{4}));
  EXPECT_EQ(*parse_core_mask("f0"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(*parse_core_mask("[0,2-3]"), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(*parse_core_mask("[5]"), (std::vector<int>{5}));
  for (const char* bad : {"", "0x", "0x0", "zz", "[1-", "[3-1]", "[a]", "[1,,2]"})
    EXPECT_FALSE(parse_core_mask(bad).ok()) << bad;
}

TEST(CoreMask, FormatsAsSpdkPrintsCpumasks) {
  EXPECT_EQ(format_core_mask({0, 1}), "0x3");
  EXPECT_EQ(format_core_mask({4}), "0x10");
  EXPECT_EQ(format_core_mask({0, 2, 7, 9}), "0x285");
  EXPECT_EQ(format_core_mask({}), "0x0");
  for (const char* m : {"0x3", "0x10", "0xf0", "0x1000000000000001"})
    EXPECT_EQ(format_core_mask(*parse_core_mask(m)), m);
}

TEST(Framework, RefusesCoresThisProcessCannotUse) {
  FrameworkOptions o;
  o.core_mask = "[1000]";
  auto r = Framework::create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("1000"), std::string::npos);
}

struct Seen {
  std::vector<int> values;
  std::vector<Thread*> on;
};

TEST(Messages, RunOnTheTargetThreadInOrder) {
  StepFramework s;
  Thread* a = s.fw->create_thread("a", 0);
  Thread* b = s.fw->create_thread("b", 1);
  static Seen seen;
  seen = {};
  struct Msg {
    int v;
  };
  std::vector<Msg> msgs(100);
  for (int i = 0; i < 100; ++i) {
    msgs[i].v = i;
    ASSERT_EQ(b->send_msg(
                  [](void* m) {
                    seen.values.push_back(static_cast<Msg*>(m)->v);
                    seen.on.push_back(Thread::current());
                  },
                  &msgs[i]),
              0);
  }
  s.settle();
  ASSERT_EQ(seen.values.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(seen.values[i], i);
    EXPECT_EQ(seen.on[i], b);
  }
  EXPECT_EQ(b->stats().messages.load(), 100u);
  EXPECT_EQ(a->stats().messages.load(), 0u);
}

TEST(Messages, FullQueueRefusesWithoutLosingQueuedOnes) {
  FrameworkOptions o;
  o.core_mask = "0x1";
  o.step_mode = true;
  o.msg_ring_size = 8;
  auto fw = std::move(Framework::create(o)).value();
  Thread* t = fw->create_thread("t");
  static int ran;
  ran = 0;
  int accepted = 0;
  for (int i = 0; i < 20; ++i) {
    const int rc = t->send_msg([](void*) { ++ran; }, nullptr);
    if (rc == 0) ++accepted; else EXPECT_EQ(rc, -EAGAIN);
  }
  EXPECT_EQ(accepted, 8);
  for (int i = 0; i < 3; ++i) fw->step();
  EXPECT_EQ(ran, 8);
}

TEST(Messages, ToAnExitedThreadAreRefused) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  t->exit();
  s.settle();
  ASSERT_TRUE(t->exited());
  EXPECT_EQ(t->send_msg([](void*) {}, nullptr), -ESHUTDOWN);
  EXPECT_EQ(s.fw->live_threads(), 0u);
}

TEST(Threads, MoveBetweenReactorsKeepingTheirPollers) {
  StepFramework s;
  Thread* t = s.fw->create_thread("mover", 0);
  static int runs;
  runs = 0;
  t->register_poller([](void*) { ++runs; return PollStatus::kBusy; }, nullptr, 0, "p");
  s.fw->step();
  EXPECT_EQ(t->reactor_index(), 0);
  ASSERT_EQ(t->send_msg([](void*) { Thread::current()->move_to(1); }, nullptr), 0);
  s.fw->step();  // moves at the end of this iteration
  s.fw->step();  // reactor 1 adopts it
  EXPECT_EQ(t->reactor_index(), 1);
  EXPECT_EQ(s.fw->reactor(0).thread_count(), 0u);
  EXPECT_EQ(s.fw->reactor(1).thread_count(), 1u);
  const int before = runs;
  s.fw->step();
  EXPECT_EQ(runs, before + 1);
}

TEST(Threads, CpumaskBoundsPlacementAndMoves) {
  StepFramework s("0x7");  // reactors on cores 0, 1, 2
  Thread* anywhere = s.fw->create_thread("anywhere");
  EXPECT_EQ(anywhere->cpumask(), (std::vector<int>{0, 1, 2}));
  // A reactor outside the mask is not taken even when asked for; cores the framework does
  // not have are dropped from the mask.
  Thread* pinned = s.fw->create_thread("pinned", 0, {2, 9});
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(pinned->cpumask(), (std::vector<int>{2}));
  s.fw->step();
  EXPECT_EQ(pinned->reactor_index(), 2);
  EXPECT_EQ(s.fw->create_thread("nowhere", -1, {5}), nullptr);

  static int move_rc[2];
  ASSERT_EQ(pinned->send_msg([](void*) { move_rc[0] = Thread::current()->move_to(1); }, nullptr), 0);
  ASSERT_EQ(anywhere->send_msg([](void*) { move_rc[1] = Thread::current()->move_to(1); }, nullptr),
            0);
  s.fw->step();
  s.fw->step();
  EXPECT_EQ(move_rc[0], -EINVAL);
  EXPECT_EQ(move_rc[1], 0);
  EXPECT_EQ(pinned->reactor_index(), 2);
  EXPECT_EQ(anywhere->reactor_index(), 1);
}

TEST(Threads, NewThreadsGoToTheLeastLoadedReactor) {
  StepFramework s;
  // Created back to back, before any reactor ran: placement must still spread them.
  Thread* t[4] = {s.fw->create_thread("a"), s.fw->create_thread("b"), s.fw->create_thread("c"),
                  s.fw->create_thread("d")};
  s.fw->step();
  int on_zero = 0;
  for (Thread* x : t) on_zero += x->reactor_index() == 0;
  EXPECT_EQ(on_zero, 2);
  EXPECT_EQ(s.fw->reactor(0).thread_count(), 2u);
  EXPECT_EQ(s.fw->reactor(1).thread_count(), 2u);
}

TEST(Threads, ForEachThreadVisitsAllThenReturnsToOrigin) {
  StepFramework s;
  Thread* origin = s.fw->create_thread("origin", 0);
  s.fw->create_thread("x", 1);
  s.fw->create_thread("y", 1);
  Thread* gone = s.fw->create_thread("gone", 0);
  gone->exit();
  s.settle();
  static std::vector<Thread*> visited;
  static Thread* done_on;
  visited.clear();
  done_on = nullptr;
  ASSERT_EQ(origin->send_msg(
                [](void*) {
                  Thread::current()->framework().for_each_thread(
                      [](void*) { visited.push_back(Thread::current()); }, nullptr,
                      [](void*) { done_on = Thread::current(); });
                },
                nullptr),
            0);
  s.settle();
  EXPECT_EQ(visited.size(), 3u);  // the exited thread is skipped
  EXPECT_EQ(done_on, origin);
}

// Free-running reactors on two OS threads: a message ping-pong across cores keeps order.
TEST(FreeRun, CrossCoreMessagesKeepOrderAndShutdownIsClean) {
  FrameworkOptions o;
  o.core_mask = "0x3";
  o.pin_reactors = false;  // CI may share its cores; ordering does not depend on pinning
  auto fw = std::move(Framework::create(o)).value();
  static constexpr int kCount = 20000;
  struct State {
    Framework* fw;
    Thread* receiver;
    std::atomic<int> next{0};
    std::atomic<int> errors{0};
    int sent = 0;
  } st;
  st.fw = fw.get();
  st.receiver = fw->create_thread("receiver", 1);
  struct Item {
    State* st;
    int seq;
  };
  static std::vector<Item> items;
  items.assign(kCount, Item{&st, 0});
  auto start = [](void* arg) {
    auto* st = static_cast<State*>(arg);
    Thread::current()->register_poller(
        [](void* a) {
          auto* st = static_cast<State*>(a);
          while (st->sent < kCount) {
            items[st->sent].seq = st->sent;
            const int rc = st->receiver->send_msg(
                [](void* m) {
                  auto* it = static_cast<Item*>(m);
                  if (it->seq != it->st->next.load()) it->st->errors++;
                  if (it->st->next.fetch_add(1) + 1 == kCount) it->st->fw->stop(7);
                },
                &items[st->sent]);
            if (rc != 0) break;  // full: try again next iteration
            ++st->sent;
          }
          return PollStatus::kBusy;
        },
        st, 0, "sender");
  };
  EXPECT_EQ(fw->run(start, &st), 7);
  EXPECT_EQ(st.next.load(), kCount);
  EXPECT_EQ(st.errors.load(), 0);
  EXPECT_EQ(fw->live_threads(), 0u);
  for (Thread* t : fw->threads()) {
    EXPECT_TRUE(t->exited()) << t->name();
    EXPECT_EQ(t->poller_count(), 0u) << t->name();
  }
}

TEST(StepMode, StopDrainsMessagesAndReleasesPollers) {
  StepFramework s;
  Thread* t = s.fw->create_thread("t", 0);
  static int ran;
  ran = 0;
  t->register_poller([](void*) { return PollStatus::kIdle; }, nullptr, 0, "p");
  t->register_poller([](void*) { return PollStatus::kIdle; }, nullptr, 1000, "timed");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(t->send_msg([](void*) { ++ran; }, nullptr), 0);
  s.fw->stop();
  EXPECT_EQ(s.fw->create_thread("late"), nullptr);
  s.settle();
  EXPECT_TRUE(s.fw->finished());
  EXPECT_EQ(ran, 5);  // queued before the stop: run, not dropped
  EXPECT_EQ(t->poller_count(), 0u);
}

}  // namespace
}  // namespace pollux::event
