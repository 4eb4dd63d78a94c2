// The bdev collector gathers each bdev's statistics through message walks on a timed poller
// and serves them per bdev and type; it never keeps a removed bdev alive.
#include "driver/metrics/bdev_source.h"

#include <gtest/gtest.h>

#include <string>

#include "driver/bdev/modules/malloc.h"
#include "driver/env/dma_memory.h"
#include "driver/event/test_util.h"

namespace pollux::metrics {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

struct Done {
  int ok = 0;
  static void cb(bdev::BdevIo&, bool success, void* arg) { static_cast<Done*>(arg)->ok += success; }
};

class BdevCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = bdev::Manager::create(*s.fw);
    ASSERT_TRUE(m.ok()) << m.error().message;
    mgr = std::move(m).value();
    t0 = s.fw->create_thread("app", 0);
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 64 << 10);
    ASSERT_TRUE(mem.ok());
    buf = std::move(mem).value();
    event::CurrentThreadScope on(t0);
    ASSERT_TRUE(bdev::create_malloc_bdev(*mgr, {"M0", 1024, 512}).ok());
  }
  // Lets the collector's poller run once more and the walks finish.
  void tick() {
    s.clock.advance_us(1500);
    s.settle();
  }
  // A collector gathering every 1 ms on the app thread, served by `e`, its first walk done.
  void start_collector() {
    {
      event::CurrentThreadScope on(t0);
      c = BdevCollector::start(*mgr, 1000);
    }
    e.add_source(c->source());
    s.settle();
  }
  event::testing::StepFramework s{"0x1"};
  std::unique_ptr<bdev::Manager> mgr;
  event::Thread* t0 = nullptr;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<BdevCollector> c;
  Exporter e;  // after c: destroyed first, as its source reads c
};

TEST_F(BdevCollectorTest, ServesOpsBytesLatencyAndQosPerBdev) {
  start_collector();
  // Before any I/O: the bdev is there with zero reads.
  EXPECT_TRUE(has_line(e.render(), "pollux_bdev_ops_total{bdev=\"M0\",type=\"read\"} 0"))
      << e.render();

  Done done;
  {
    event::CurrentThreadScope on(t0);
    auto d = mgr->open("M0", true);
    ASSERT_TRUE(d.ok());
    auto* ch = mgr->get_io_channel(*d);
    ASSERT_EQ(mgr->write(*d, ch, buf->data(), 0, 8, Done::cb, &done), 0);
    ASSERT_EQ(mgr->write(*d, ch, buf->data(), 8, 8, Done::cb, &done), 0);
    ASSERT_EQ(mgr->read(*d, ch, buf->data(), 0, 4, Done::cb, &done), 0);
    s.settle();
    mgr->put_io_channel(ch);
    mgr->close(*d);
    ASSERT_EQ(mgr->set_qos(*mgr->find("M0"), 5000, 0), 0);
  }
  s.settle();
  EXPECT_EQ(done.ok, 3);
  tick();
  const std::string text = e.render();
  EXPECT_TRUE(has_line(text, "pollux_bdev_ops_total{bdev=\"M0\",type=\"write\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_ops_total{bdev=\"M0\",type=\"read\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_bytes_total{bdev=\"M0\",type=\"write\"} 8192")) << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_bytes_total{bdev=\"M0\",type=\"read\"} 2048")) << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_errors_total{bdev=\"M0\",type=\"read\"} 0")) << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_latency_seconds_count{bdev=\"M0\",type=\"write\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_latency_seconds_count{bdev=\"M0\",type=\"read\"} 1"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_bdev_qos_limit_per_second{bdev=\"M0\",kind=\"ios\"} 5000"))
      << text;
  EXPECT_EQ(text.find("type=\"unmap\""), std::string::npos) << "types that never ran are left out";
  event::CurrentThreadScope on(t0);
  c->stop();
  s.settle();
}

TEST_F(BdevCollectorTest, LetsARemovedBdevGoAndPicksUpANewOne) {
  start_collector();
  ASSERT_NE(e.render().find("bdev=\"M0\""), std::string::npos);

  bool removed = false;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->unregister_bdev("M0", [](void* f) { *static_cast<bool*>(f) = true; }, &removed),
              0);
  }
  s.settle();
  EXPECT_TRUE(removed) << "the collector's descriptor must not hold the bdev";
  EXPECT_EQ(mgr->find("M0"), nullptr);
  EXPECT_EQ(e.render().find("bdev=\"M0\""), std::string::npos) << e.render();

  {
    event::CurrentThreadScope on(t0);
    ASSERT_TRUE(bdev::create_malloc_bdev(*mgr, {"M1", 1024, 512}).ok());
  }
  tick();
  EXPECT_NE(e.render().find("bdev=\"M1\""), std::string::npos) << e.render();
  event::CurrentThreadScope on(t0);
  c->stop();
  s.settle();
  // Stopped: M1 is free to go at once.
  removed = false;
  ASSERT_EQ(mgr->unregister_bdev("M1", [](void* f) { *static_cast<bool*>(f) = true; }, &removed), 0);
  s.settle();
  EXPECT_TRUE(removed);
}

}  // namespace
}  // namespace pollux::metrics
