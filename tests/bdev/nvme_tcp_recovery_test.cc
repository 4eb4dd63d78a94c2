// bdev_nvme's recovery knobs over NVMe/TCP (SPDK's reconnect_delay_sec, fast_io_fail_timeout_sec,
// ctrlr_loss_timeout_sec) against the scripted target: the target "goes down" (its connections
// are dropped and every new association is cut at its Connect), then comes back, or not.
// The framework runs in step mode on the test's thread with the real clock; the target serves
// on threads of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/env/dma_memory.h"
#include "driver/event/framework.h"
#include "driver/nvme/transport_id.h"
#include "fabric/tcp/testing/scripted_target.h"

namespace pollux {
namespace {

namespace st = fabric::tcp::testing;
using bdev::BdevIo;
using bdev::IoStatus;
using event::CurrentThreadScope;
using SteadyClock = std::chrono::steady_clock;

struct Each {
  int n = 0;
  IoStatus status = IoStatus::kPending;
  SteadyClock::time_point at{};
  static void cb(BdevIo& io, bool, void* arg) {
    auto* e = static_cast<Each*>(arg);
    ++e->n;
    e->status = io.status();
    e->at = SteadyClock::now();
  }
};
int completed(const std::vector<Each>& v) {
  int n = 0;
  for (const Each& e : v) n += e.n;
  return n;
}

struct Events {
  int removes = 0;
  static void fn(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
    if (e == bdev::DescEvent::kRemove) ++static_cast<Events*>(ctx)->removes;
  }
};

double ms_since(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t).count();
}

class NvmeTcpRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = std::make_unique<st::ScriptedTarget>();
    target_->set_hook([this](st::Conn& c, const st::Command&) {
      if (!down_.load()) return false;
      c.close();  // down: whatever arrives (a new association's Connect) is cut off
      return true;
    });
    event::FrameworkOptions fo;
    fo.core_mask = "0x1";
    fo.step_mode = true;
    fo.pin_reactors = false;
    auto fw = event::Framework::create(fo);
    ASSERT_TRUE(fw.ok()) << fw.error().message;
    fw_ = std::move(fw).value();
    t0_ = fw_->create_thread("t0", 0);
    auto mgr = bdev::Manager::create(*fw_);
    ASSERT_TRUE(mgr.ok()) << mgr.error().message;
    mgr_ = std::move(mgr).value();
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 1 << 20);
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(mem).value();
  }
  void TearDown() override {
    if (o_.ch || o_.desc) close();
    if (fw_ && !bdev::nvme_controller_names(*mgr_).empty()) {
      // Detached, so the controller and its queues are freed (LeakSanitizer).
      down_ = false;
      {
        CurrentThreadScope on(t0_);
        bdev::nvme_detach_controller(*mgr_, "Nvme0");
      }
      run_until([&] { return bdev::nvme_controller_names(*mgr_).empty(); });
    }
    if (fw_) {
      fw_->stop(0);
      run_until([&] { return fw_->finished(); });
    }
    mgr_.reset();
    fw_.reset();
    mem_.reset();
    if (target_) {
      EXPECT_TRUE(target_->violations().empty())
          << "the host broke the protocol: " << target_->violations().front();
    }
  }

  void attach(const std::function<void(bdev::NvmeBdevOptions&)>& knobs) {
    bdev::NvmeBdevOptions o;
    o.name = "Nvme0";
    o.admin_poll_period_us = 1000;
    knobs(o);
    nvme::TransportId trid;
    trid.trtype = nvme::TransportType::kTcp;
    trid.traddr = "127.0.0.1";
    trid.trsvcid = std::to_string(target_->port());
    trid.subnqn = target_->subnqn();
    nvme::ControllerOptions co;
    co.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000aa";
    co.keep_alive_timeout_ms = 0;  // the connections' state, not keep-alives, tells loss here
    CurrentThreadScope on(t0_);
    auto names = bdev::nvme_attach_controller(*mgr_, trid, o, co);
    ASSERT_TRUE(names.ok()) << names.error().message;
    ASSERT_EQ(*names, std::vector<std::string>{"Nvme0n1"});
    auto d = mgr_->open("Nvme0n1", true, Events::fn, &events_);
    ASSERT_TRUE(d.ok()) << d.error().message;
    o_.desc = *d;
    o_.ch = mgr_->get_io_channel(o_.desc);
    ASSERT_NE(o_.ch, nullptr);
  }
  void close() {
    CurrentThreadScope on(t0_);
    if (o_.ch) mgr_->put_io_channel(o_.ch);
    if (o_.desc) mgr_->close(o_.desc);
    o_ = {};
  }

  // The target drops every connection and cuts off every new one at its first command.
  void go_down() {
    down_ = true;
    const int conns = target_->inspect([](const st::Log& l) { return int(l.conns.size()); });
    for (int i = 0; i < conns; ++i) target_->close_connection(i);
  }
  void come_back() { down_ = false; }
  // Connect commands the target has seen (each is one association or queue attempt).
  int connects() {
    return target_->inspect([](const st::Log& l) {
      int n = 0;
      for (const st::Pdu* p : l.of_type(spec::nvme_tcp::pdu::kCapsuleCmd)) {
        const auto sqe = p->sqe();
        n += sqe.opcode == spec::nvmf::kOpcodeFabrics &&
             reinterpret_cast<const uint8_t*>(&sqe)[4] == spec::nvmf::fctype::kConnect;
      }
      return n;
    });
  }

  void run_until(const std::function<bool()>& pred, double seconds = 20) {
    const auto end = SteadyClock::now() + std::chrono::duration<double>(seconds);
    while (!pred()) {
      if (SteadyClock::now() > end) {
        ADD_FAILURE() << "condition not reached in " << seconds << " s";
        return;
      }
      fw_->step();
    }
  }
  void run_for(double ms) {
    const auto end = SteadyClock::now() + std::chrono::duration<double, std::milli>(ms);
    while (SteadyClock::now() < end) fw_->step();
  }
  bdev::NvmeControllerStats stats() {
    auto s = bdev::nvme_controller_stats(*mgr_, "Nvme0");
    EXPECT_TRUE(s.ok());
    return s.ok() ? *s : bdev::NvmeControllerStats{};
  }
  uint8_t* buf(std::size_t off = 0) { return static_cast<uint8_t*>(mem_->data()) + off; }

  // Writes a pattern to blocks [0, 64) and waits for it.
  void write_pattern() {
    for (std::size_t i = 0; i < 64 * 512; ++i) buf()[i] = static_cast<uint8_t>(i * 13 + 7);
    Each w;
    {
      CurrentThreadScope on(t0_);
      ASSERT_EQ(mgr_->write(o_.desc, o_.ch, buf(), 0, 64, Each::cb, &w), 0);
    }
    run_until([&] { return w.n == 1; });
    ASSERT_EQ(w.status, IoStatus::kSuccess);
  }
  // Reads block i (of 64) into its own slot at 256 KiB + i * 512.
  void submit_reads(std::vector<Each>& r) {
    CurrentThreadScope on(t0_);
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::memset(buf((256 << 10) + i * 512), 0, 512);
      ASSERT_EQ(mgr_->read(o_.desc, o_.ch, buf((256 << 10) + i * 512), i, 1, Each::cb, &r[i]), 0);
    }
  }
  void expect_read_data(const std::vector<Each>& r) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(std::memcmp(buf((256 << 10) + i * 512), buf(i * 512), 512), 0) << "block " << i;
    }
  }

  std::unique_ptr<st::ScriptedTarget> target_;
  std::atomic<bool> down_{false};
  std::unique_ptr<event::Framework> fw_;
  event::Thread* t0_ = nullptr;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<env::DmaRegion> mem_;
  struct {
    bdev::Desc* desc = nullptr;
    event::IoChannel* ch = nullptr;
  } o_;
  Events events_;
};

// Never given up, never failed fast: I/O issued while the target is away waits, reconnect
// attempts are spaced by reconnect_delay, and when the target is back the I/O completes with
// the data written before the loss.
TEST_F(NvmeTcpRecoveryTest, IoWaitsThroughAnOutageAndCompletesWhenTheTargetReturns) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 100'000;
    o.ctrlr_loss_timeout_us = bdev::NvmeBdevOptions::kRetryForever;
  });
  write_pattern();
  go_down();
  const auto lost_at = SteadyClock::now();
  const int connects_before = connects();
  std::vector<Each> r(16);
  submit_reads(r);
  run_until([&] { return stats().lost; }, 5);
  run_for(800);
  const double down_ms = ms_since(lost_at);
  EXPECT_EQ(completed(r), 0) << "I/O ended while the controller was lost without fast-fail";
  EXPECT_TRUE(stats().lost);
  // One attempt per reconnect_delay (plus the first, at once): several, but nowhere near one
  // per admin poll (1 ms).
  const int attempts = connects() - connects_before;
  EXPECT_GE(attempts, 3) << "over " << down_ms << " ms";
  EXPECT_LE(attempts, down_ms / 100 + 2) << "over " << down_ms << " ms";
  EXPECT_GE(stats().reset_failures, 3u);

  come_back();
  run_until([&] { return completed(r) == 16; }, 10);
  for (const Each& e : r) {
    EXPECT_EQ(e.n, 1);
    EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  }
  expect_read_data(r);
  const auto s = stats();
  EXPECT_FALSE(s.lost);
  EXPECT_EQ(s.fast_failed, 0u);
  EXPECT_GE(s.resets, 1u);
  EXPECT_EQ(events_.removes, 0);
  // New I/O works on the new association.
  std::vector<Each> again(4);
  submit_reads(again);
  run_until([&] { return completed(again) == 4; });
  for (const Each& e : again) EXPECT_EQ(e.status, IoStatus::kSuccess);
  expect_read_data(again);
}

// A write whose connection was lost with it may still reach the target (a partition can hold
// it on the wire; the target may hold it): the host sends it again only after the target's
// KATO + CQT from the reset (docs/ARCHITECTURE.md, "A lost association's writes wait"), so an
// old copy cannot land over what it writes later. A read goes again at once.
TEST_F(NvmeTcpRecoveryTest, AWriteALostConnectionEndedWaitsForKatoPlusCqtAndAReadDoesNot) {
  constexpr int kCqtMs = 2000;  // no keep-alive here (KATO 0): the wait is CQT alone
  target_->update([](st::TargetOptions& o) { o.cqt_ms = kCqtMs; });
  attach([](bdev::NvmeBdevOptions&) {});
  write_pattern();
  // The target takes the next write and read and never answers them.
  auto held = std::make_shared<std::atomic<int>>(0);  // the target's threads outlive the body
  target_->set_hook([held](st::Conn&, const st::Command& cmd) {
    const bool io = cmd.qid > 0 && !cmd.fabrics() &&
                    (cmd.sqe.opcode == spec::nvme::nvm::kWrite ||
                     cmd.sqe.opcode == spec::nvme::nvm::kRead);
    if (!io || held->load() >= 2) return false;
    ++*held;
    return true;
  });
  for (std::size_t i = 0; i < 8 * 512; ++i) buf(128 << 10)[i] = static_cast<uint8_t>(0xa5 ^ i);
  Each w, r;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(o_.desc, o_.ch, buf(128 << 10), 0, 8, Each::cb, &w), 0);
    ASSERT_EQ(mgr_->read(o_.desc, o_.ch, buf(256 << 10), 8, 1, Each::cb, &r), 0);
  }
  run_until([&] { return held->load() == 2; });
  const auto dropped_at = SteadyClock::now();
  const int conns = target_->inspect([](const st::Log& l) { return int(l.conns.size()); });
  for (int i = 0; i < conns; ++i) target_->close_connection(i);

  run_until([&] { return r.n == 1; });
  EXPECT_EQ(r.status, IoStatus::kSuccess) << bdev::to_string(r.status);
  EXPECT_EQ(std::memcmp(buf(256 << 10), buf(8 * 512), 512), 0);
  EXPECT_EQ(w.n, 0) << "the write went again before KATO + CQT";
  run_until([&] { return w.n == 1; });
  EXPECT_EQ(w.status, IoStatus::kSuccess) << bdev::to_string(w.status);
  const auto ms = [](SteadyClock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  EXPECT_GE(ms(w.at - dropped_at), kCqtMs);
  // The target saw the write twice: held, then sent again no earlier than CQT after the drop.
  const auto writes = target_->inspect([](const st::Log& l) {
    std::vector<SteadyClock::time_point> at;
    for (const st::Pdu* p : l.of_type(spec::nvme_tcp::pdu::kCapsuleCmd))
      if (p->sqe().opcode == spec::nvme::nvm::kWrite) at.push_back(p->at);
    return at;
  });
  ASSERT_GE(writes.size(), 2u);
  EXPECT_GE(ms(writes.back() - dropped_at), kCqtMs);
  EXPECT_EQ(std::memcmp(target_->ram(0, 8 * 512).data(), buf(128 << 10), 8 * 512), 0);
}

// A bdev opened while its controller is lost (SPDK's rule): the channel is created with its
// queue pair unconnected rather than failed — before, its I/O queue's Connect was tried at
// once, cut off by the target, and get_io_channel() returned nothing, so a workload could not
// open its bdev until the controller had been reset. I/O issued on it waits, and completes
// with the data once the target is back and the reset has connected the queue.
TEST_F(NvmeTcpRecoveryTest, AChannelCreatedWhileLostWaitsForTheReconnect) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 50'000;
    o.ctrlr_loss_timeout_us = bdev::NvmeBdevOptions::kRetryForever;
  });
  write_pattern();
  close();
  run_for(20);  // the channel (and its queue pair) goes
  go_down();
  run_until([&] { return stats().lost; }, 5);
  {
    CurrentThreadScope on(t0_);
    auto d = mgr_->open("Nvme0n1", true, Events::fn, &events_);
    ASSERT_TRUE(d.ok()) << d.error().message;
    o_.desc = *d;
    o_.ch = mgr_->get_io_channel(o_.desc);
  }
  ASSERT_NE(o_.ch, nullptr) << "no channel while the controller is lost";
  std::vector<Each> r(16);
  submit_reads(r);
  run_for(300);
  EXPECT_EQ(completed(r), 0) << "I/O ended while the controller was lost without fast-fail";
  come_back();
  run_until([&] { return completed(r) == 16; }, 10);
  for (const Each& e : r) {
    EXPECT_EQ(e.n, 1);
    EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  }
  expect_read_data(r);
  EXPECT_FALSE(stats().lost);
  EXPECT_EQ(events_.removes, 0);
}

// fast_io_fail_timeout: what waits fails once the controller has been lost that long (not
// before), new I/O fails at once meanwhile, and I/O works again once the target is back.
TEST_F(NvmeTcpRecoveryTest, FastIoFailEndsWaitingIoAfterItsTimeoutAndNewIoAtOnce) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 50'000;
    o.fast_io_fail_timeout_us = 300'000;
    o.ctrlr_loss_timeout_us = bdev::NvmeBdevOptions::kRetryForever;
  });
  write_pattern();
  go_down();
  std::vector<Each> r(8);
  submit_reads(r);
  const auto submitted = SteadyClock::now();
  run_until([&] { return completed(r) == 8; }, 10);
  for (const Each& e : r) {
    EXPECT_EQ(e.n, 1);
    EXPECT_EQ(e.status, IoStatus::kFailed) << bdev::to_string(e.status);
    // Not before the controller had been lost for fast_io_fail_timeout (it was lost after the
    // reads were submitted).
    const double after_ms = std::chrono::duration<double, std::milli>(e.at - submitted).count();
    EXPECT_GE(after_ms, 300);
  }
  EXPECT_TRUE(stats().lost);
  const uint64_t fast_failed = stats().fast_failed;
  EXPECT_GE(fast_failed, 8u);

  // While it is still lost, a new I/O fails without waiting for anything.
  std::vector<Each> now(1);
  submit_reads(now);
  const auto t = SteadyClock::now();
  run_until([&] { return completed(now) == 1; }, 5);
  EXPECT_EQ(now[0].status, IoStatus::kFailed);
  EXPECT_LT(ms_since(t), 50);  // far under reconnect_delay: it did not wait for a reconnect
  EXPECT_EQ(stats().fast_failed, fast_failed + 1);

  come_back();
  run_until([&] { return !stats().lost; }, 10);
  std::vector<Each> after(8);
  submit_reads(after);
  run_until([&] { return completed(after) == 8; });
  for (const Each& e : after) EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  expect_read_data(after);
  EXPECT_EQ(events_.removes, 0);
}

// ctrlr_loss_timeout: a target that stays away is given up: waiting I/O fails, the bdev is
// removed (its descriptors told), and once closed the controller is gone.
TEST_F(NvmeTcpRecoveryTest, ControllerLossTimeoutDeletesTheControllerAndItsBdevs) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 100'000;
    o.ctrlr_loss_timeout_us = 400'000;
  });
  write_pattern();
  go_down();
  const auto down_at = SteadyClock::now();
  std::vector<Each> r(8);
  submit_reads(r);
  run_until([&] { return events_.removes == 1 && completed(r) == 8; }, 10);
  EXPECT_GE(ms_since(down_at), 400);
  for (const Each& e : r) {
    EXPECT_EQ(e.n, 1);
    EXPECT_NE(e.status, IoStatus::kSuccess);
  }
  EXPECT_EQ(mgr_->find("Nvme0n1"), nullptr);
  close();
  run_until([&] { return bdev::nvme_controller_names(*mgr_).empty(); });
  // Coming back later changes nothing: the controller was deleted.
  come_back();
  run_for(200);
  EXPECT_TRUE(bdev::nvme_controller_names(*mgr_).empty());
}

// A loss shorter than ctrlr_loss_timeout is survived: the controller is kept, I/O completes.
TEST_F(NvmeTcpRecoveryTest, LossShorterThanTheLossTimeoutIsSurvived) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 50'000;
    o.ctrlr_loss_timeout_us = 2'000'000;
  });
  write_pattern();
  go_down();
  std::vector<Each> r(8);
  submit_reads(r);
  run_until([&] { return stats().lost; }, 5);
  run_for(300);
  come_back();
  run_until([&] { return completed(r) == 8; }, 10);
  for (const Each& e : r) EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  expect_read_data(r);
  EXPECT_EQ(events_.removes, 0);
  EXPECT_EQ(bdev::nvme_controller_names(*mgr_), std::vector<std::string>{"Nvme0"});
}

// Multipath, failover: a second scripted target stands for a second port of the same
// subsystem (the same subnqn; its namespace is given the first one's bytes when that one goes
// down, as one subsystem's storage would be).
class NvmeTcpMultipathTest : public NvmeTcpRecoveryTest {
 protected:
  void SetUp() override {
    NvmeTcpRecoveryTest::SetUp();
    b_ = std::make_unique<st::ScriptedTarget>();
    b_->set_hook([this](st::Conn& c, const st::Command&) {
      if (!b_down_.load()) return false;
      c.close();
      return true;
    });
  }
  void TearDown() override {
    NvmeTcpRecoveryTest::TearDown();
    if (b_) {
      EXPECT_TRUE(b_->violations().empty()) << b_->violations().front();
    }
  }
  nvme::TransportId trid_b() const {
    nvme::TransportId t;
    t.trtype = nvme::TransportType::kTcp;
    t.traddr = "127.0.0.1";
    t.trsvcid = std::to_string(b_->port());
    t.subnqn = b_->subnqn();
    return t;
  }
  Result<std::vector<std::string>> add_path(const nvme::TransportId& t) {
    CurrentThreadScope on(t0_);
    return bdev::nvme_add_path(*mgr_, "Nvme0", t);
  }
  static void copy(st::ScriptedTarget& from, st::ScriptedTarget& to) {
    const std::vector<uint8_t> bytes = from.ram(0, 64 * 512);
    to.fill_ram(0, bytes);
  }
  void b_go_down() {
    b_down_ = true;
    const int conns = b_->inspect([](const st::Log& l) { return int(l.conns.size()); });
    for (int i = 0; i < conns; ++i) b_->close_connection(i);
  }
  int b_connects() {
    return b_->inspect([](const st::Log& l) { return int(l.conns.size()); });
  }
  std::unique_ptr<st::ScriptedTarget> b_;
  std::atomic<bool> b_down_{false};
};

// The path in use goes down: the reset that fails there moves to the other path, I/O that
// waited completes there with the data, new writes land there; then back again.
TEST_F(NvmeTcpMultipathTest, FailoverMovesIoToTheOtherPathAndBack) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 50'000;
    o.ctrlr_loss_timeout_us = bdev::NvmeBdevOptions::kRetryForever;
  });
  auto names = add_path(trid_b());
  ASSERT_TRUE(names.ok()) << names.error().message;
  EXPECT_EQ(*names, std::vector<std::string>{"Nvme0n1"});
  EXPECT_EQ(stats().paths, 2u);
  EXPECT_EQ(stats().active_path, 0u);
  EXPECT_EQ(b_connects(), 0) << "a passive path is not used";
  write_pattern();

  go_down();
  copy(*target_, *b_);
  std::vector<Each> r(16);
  submit_reads(r);
  run_until([&] { return completed(r) == 16; }, 10);
  for (const Each& e : r) EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  expect_read_data(r);
  auto s = stats();
  EXPECT_EQ(s.active_path, 1u);
  EXPECT_GE(s.failovers, 1u);
  EXPECT_FALSE(s.lost);
  EXPECT_EQ(s.fast_failed, 0u);
  EXPECT_GT(b_connects(), 0);
  // New writes land on the path in use.
  for (std::size_t i = 0; i < 64 * 512; ++i) buf()[i] = static_cast<uint8_t>(i * 7 + 3);
  Each w;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(o_.desc, o_.ch, buf(), 0, 64, Each::cb, &w), 0);
  }
  run_until([&] { return w.n == 1; });
  ASSERT_EQ(w.status, IoStatus::kSuccess);
  EXPECT_EQ(b_->ram(0, 64 * 512), std::vector<uint8_t>(buf(), buf() + 64 * 512));

  // Back: the first path returns, the second goes.
  come_back();
  b_go_down();
  copy(*b_, *target_);
  std::vector<Each> back(8);
  submit_reads(back);
  run_until([&] { return completed(back) == 8; }, 10);
  for (const Each& e : back) EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  expect_read_data(back);
  s = stats();
  EXPECT_EQ(s.active_path, 0u);
  EXPECT_GE(s.failovers, 2u);
  EXPECT_EQ(events_.removes, 0);
}

// A new I/O queue whose connection cannot be made on the active path (here: the first port is
// gone, so the connect is refused) makes the other path active at once — before the reset
// that will connect the queue, which then goes there instead of spending its connect timeout
// on the dead path first (chaos seeds 7861628 and 7400099). The channel exists at once: its
// queue pair connects from the channel's poller (NVMe/TCP connects without blocking), and the
// reads submitted meanwhile wait in it.
TEST_F(NvmeTcpMultipathTest, AnIoQueueThatCannotConnectMovesTheNextAttemptToTheOtherPath) {
  attach([](bdev::NvmeBdevOptions& o) {
    o.reconnect_delay_us = 50'000;
    o.ctrlr_loss_timeout_us = bdev::NvmeBdevOptions::kRetryForever;
  });
  ASSERT_TRUE(add_path(trid_b()).ok());
  write_pattern();
  copy(*target_, *b_);
  {
    CurrentThreadScope on(t0_);
    mgr_->put_io_channel(o_.ch);
    o_.ch = nullptr;
  }
  run_for(20);  // the channel and its queue pair go
  target_.reset();  // the first port: nothing listens there any more
  {
    CurrentThreadScope on(t0_);
    o_.ch = mgr_->get_io_channel(o_.desc);  // its queue's connect is under way
  }
  ASSERT_NE(o_.ch, nullptr);
  EXPECT_EQ(stats().failovers, 0u);
  std::vector<Each> r(8);
  submit_reads(r);
  // The connect is refused; the reset (the admin connection is gone too) connects on the
  // other path at once.
  run_until([&] { return completed(r) == 8; }, 10);
  for (const Each& e : r) EXPECT_EQ(e.status, IoStatus::kSuccess) << bdev::to_string(e.status);
  expect_read_data(r);
  EXPECT_EQ(stats().failovers, 1u);  // one path change: the reset did not try the dead path
  EXPECT_EQ(stats().active_path, 1u);
  EXPECT_GT(b_connects(), 0);
}

// What is not a second path of this controller is refused, naming why; a config's second
// attach with multipath "failover" adds the path.
TEST_F(NvmeTcpMultipathTest, PathsThatAreNotTheSameSubsystemAreRefused) {
  attach([](bdev::NvmeBdevOptions&) {});
  nvme::TransportId other = trid_b();
  other.subnqn = "nqn.2026-01.io.pollux:another-subsystem";
  auto r = add_path(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("same subsystem"), std::string::npos) << r.error().message;
  nvme::TransportId again = trid_b();
  again.trsvcid = std::to_string(target_->port());
  r = add_path(again);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("already there"), std::string::npos) << r.error().message;
  {
    CurrentThreadScope on(t0_);
    auto none = bdev::nvme_add_path(*mgr_, "Nvme9", trid_b());
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, -ENODEV);
    bdev::NvmeAddress a;
    a.trtype = "tcp";
    a.traddr = "127.0.0.1";
    a.trsvcid = std::to_string(b_->port());
    a.subnqn = b_->subnqn();
    a.multipath = "multipath";
    auto aa = bdev::nvme_attach_controller_by_address(*mgr_, "Nvme0", a);
    ASSERT_FALSE(aa.ok());
    EXPECT_EQ(aa.error().code, -ENOTSUP);
    a.multipath = "sometimes";
    EXPECT_EQ(bdev::nvme_attach_controller_by_address(*mgr_, "Nvme0", a).error().code, -EINVAL);
    a.multipath = "";
    EXPECT_EQ(bdev::nvme_attach_controller_by_address(*mgr_, "Nvme0", a).error().code, -EEXIST);
    a.multipath = "failover";
    auto ok = bdev::nvme_attach_controller_by_address(*mgr_, "Nvme0", a);
    ASSERT_TRUE(ok.ok()) << ok.error().message;
    EXPECT_EQ(*ok, std::vector<std::string>{"Nvme0n1"});
  }
  EXPECT_EQ(stats().paths, 2u);
}

}  // namespace
}  // namespace pollux
