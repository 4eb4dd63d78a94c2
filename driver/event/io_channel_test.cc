#include <gtest/gtest.h>

#include <vector>

#include "driver/event/test_util.h"

namespace pollux::event {
namespace {

using testing::StepFramework;

struct Device {
  int created = 0;
  int destroyed = 0;
  int fail_create = 0;
};

struct ChannelCtx {
  Device* dev;
  Thread* owner;
  int magic;
};

int create_ch(void* io_device, void* ctx) {
  auto* d = static_cast<Device*>(io_device);
  if (d->fail_create) return -ENOMEM;
  ++d->created;
  *static_cast<ChannelCtx*>(ctx) = {d, Thread::current(), 0x5a5a};
  return 0;
}

void destroy_ch(void* io_device, void* ctx) {
  auto* c = static_cast<ChannelCtx*>(ctx);
  EXPECT_EQ(c->magic, 0x5a5a);
  EXPECT_EQ(c->owner, Thread::current()) << "destroyed on a foreign thread";
  ++static_cast<Device*>(io_device)->destroyed;
}

struct Fixture : ::testing::Test {
  void SetUp() override {
    s.fw->register_io_device(&dev, create_ch, destroy_ch, sizeof(ChannelCtx), "dev");
  }
  StepFramework s;
  Device dev;
};

TEST_F(Fixture, CreatedLazilyOncePerThreadAndDestroyedAfterLastPut) {
  Thread* t = s.fw->create_thread("t", 0);
  CurrentThreadScope on(t);
  IoChannel* a = s.fw->get_io_channel(&dev);
  IoChannel* b = s.fw->get_io_channel(&dev);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a->refs(), 2u);
  EXPECT_EQ(dev.created, 1);
  EXPECT_EQ(static_cast<ChannelCtx*>(a->ctx())->owner, t);
  s.fw->put_io_channel(a);
  s.fw->put_io_channel(b);
  EXPECT_EQ(dev.destroyed, 0);  // deferred to a message
  s.settle();
  EXPECT_EQ(dev.destroyed, 1);
}

TEST_F(Fixture, PutThenGetInOneCallChainKeepsTheChannel) {
  Thread* t = s.fw->create_thread("t", 0);
  CurrentThreadScope on(t);
  IoChannel* a = s.fw->get_io_channel(&dev);
  s.fw->put_io_channel(a);
  IoChannel* again = s.fw->get_io_channel(&dev);
  EXPECT_EQ(again, a);
  s.settle();
  EXPECT_EQ(dev.created, 1);
  EXPECT_EQ(dev.destroyed, 0);
  s.fw->put_io_channel(again);
  s.settle();
  EXPECT_EQ(dev.destroyed, 1);
}

// The last put with the thread's own ring full: the release is deferred, never done inline
// under the caller (which may still be using the channel), and never lost.
TEST_F(Fixture, LastPutWithAFullRingIsDeferredNotInline) {
  FrameworkOptions o;
  o.core_mask = "0x1";
  o.step_mode = true;
  o.msg_ring_size = 2;
  auto fw = std::move(Framework::create(o)).value();
  Device d2;
  fw->register_io_device(&d2, create_ch, destroy_ch, sizeof(ChannelCtx), "d2");
  Thread* t = fw->create_thread("t");
  CurrentThreadScope on(t);
  IoChannel* ch = fw->get_io_channel(&d2);
  ASSERT_NE(ch, nullptr);
  while (t->send_msg([](void*) {}, nullptr) == 0) {
  }  // fill the ring
  fw->put_io_channel(ch);
  EXPECT_EQ(d2.destroyed, 0);  // not inline
  for (int i = 0; i < 5; ++i) fw->step();
  EXPECT_EQ(d2.destroyed, 1);
}

TEST_F(Fixture, CreateFailureAndUnknownDevicesGiveNull) {
  Thread* t = s.fw->create_thread("t", 0);
  CurrentThreadScope on(t);
  int other;
  EXPECT_EQ(s.fw->get_io_channel(&other), nullptr);
  dev.fail_create = 1;
  EXPECT_EQ(s.fw->get_io_channel(&dev), nullptr);
  dev.fail_create = 0;
  EXPECT_NE(s.fw->get_io_channel(&dev), nullptr);  // a failed create left nothing behind
}

TEST_F(Fixture, UnregisterCompletesOnlyAfterTheLastChannelIsGone) {
  Thread* t1 = s.fw->create_thread("t1", 0);
  Thread* t2 = s.fw->create_thread("t2", 1);
  IoChannel *c1, *c2;
  {
    CurrentThreadScope on(t1);
    c1 = s.fw->get_io_channel(&dev);
  }
  {
    CurrentThreadScope on(t2);
    c2 = s.fw->get_io_channel(&dev);
  }
  static bool done;
  done = false;
  {
    CurrentThreadScope on(t1);
    s.fw->unregister_io_device(&dev, [](void*) { done = true; }, nullptr);
    EXPECT_EQ(s.fw->get_io_channel(&dev), c1);  // existing channel still usable
    s.fw->put_io_channel(c1);
    s.fw->put_io_channel(c1);
  }
  s.settle();
  EXPECT_FALSE(done);
  {
    CurrentThreadScope on(t2);
    s.fw->put_io_channel(c2);
  }
  s.settle();
  EXPECT_TRUE(done);
  EXPECT_EQ(dev.destroyed, 2);
  CurrentThreadScope on(t1);
  EXPECT_EQ(s.fw->get_io_channel(&dev), nullptr);  // gone
}

struct Walk {
  std::vector<Thread*> visited;
  int done_status = 99;
  Thread* done_on = nullptr;
  int stop_at = -1;
};

TEST_F(Fixture, ForEachChannelVisitsEveryHolderThenReportsStatus) {
  Thread* holders[3] = {s.fw->create_thread("h0", 0), s.fw->create_thread("h1", 1),
                        s.fw->create_thread("h2", 0)};
  Thread* bystander = s.fw->create_thread("none", 1);
  for (Thread* t : holders) {
    CurrentThreadScope on(t);
    ASSERT_NE(s.fw->get_io_channel(&dev), nullptr);
  }
  static Walk w;
  for (int stop_at : {-1, 1}) {
    w = {};
    w.stop_at = stop_at;
    CurrentThreadScope on(bystander);
    s.fw->for_each_channel(
        &dev,
        [](ChannelIter& it) {
          auto* walk = static_cast<Walk*>(it.ctx());
          EXPECT_EQ(it.channel()->thread(), Thread::current());
          walk->visited.push_back(Thread::current());
          const bool stop = static_cast<int>(walk->visited.size()) - 1 == walk->stop_at;
          it.next(stop ? -EIO : 0);
        },
        &w,
        [](void* ctx, int status) {
          auto* walk = static_cast<Walk*>(ctx);
          walk->done_status = status;
          walk->done_on = Thread::current();
        });
    s.settle();
    if (stop_at < 0) {
      EXPECT_EQ(w.visited, (std::vector<Thread*>{holders[0], holders[1], holders[2]}));
      EXPECT_EQ(w.done_status, 0);
    } else {
      EXPECT_EQ(w.visited.size(), 2u);  // stopped by the second holder
      EXPECT_EQ(w.done_status, -EIO);
    }
    EXPECT_EQ(w.done_on, bystander);
  }
}

TEST_F(Fixture, ChannelsForgottenAtShutdownAreDestroyedAndCounted) {
  Thread* t = s.fw->create_thread("t", 0);
  {
    CurrentThreadScope on(t);
    ASSERT_NE(s.fw->get_io_channel(&dev), nullptr);
  }
  s.fw->stop();
  s.settle();
  EXPECT_TRUE(s.fw->finished());
  EXPECT_EQ(dev.destroyed, 1);
  EXPECT_EQ(s.fw->leaked_channels(), 1u);
}

}  // namespace
}  // namespace pollux::event
