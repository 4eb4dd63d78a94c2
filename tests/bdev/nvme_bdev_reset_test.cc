// bdev_nvme's controller resets against Pollux's emulator (nvme_bdev_fixture.h): a bdev reset
// under load on two threads, the reset API, fatal status, timeouts, aborts across a reset, a
// failed reset, and reactors on two OS threads.
#include "tests/bdev/nvme_bdev_fixture.h"

namespace pollux::nvme_bdev_testing {
namespace {

// ---------------------------------------------------------------- controller resets ----

// A bdev reset is a controller reset: writes in flight on two threads (four of them held by
// the device, which only a controller reset ends) and writes issued on another bdev of the
// controller while the reset runs all complete once, successfully, and read back.
TEST_F(NvmeBdevTest, BdevResetResetsControllerUnderLoadOnTwoThreads) {
  attach_in_process();
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  Open b2 = open(t1_, "Nvme0n2");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  hold_commands(sn::nvm::kWrite, 4);
  constexpr int kPer = 32;  // writes per thread, 8 blocks (4 KiB) each
  for (int i = 0; i < 2 * kPer; ++i)
    for (int j = 0; j < 4096; ++j) buf(i * 4096)[j] = static_cast<uint8_t>(i * 31 + j * 7 + 1);
  std::vector<Each> wa(kPer), wb(kPer);
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < kPer; ++i)
      ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(i * 4096), i * 8, 8, Each::cb, &wa[i]), 0);
  }
  {
    CurrentThreadScope on(t1_);
    for (int i = 0; i < kPer; ++i)
      ASSERT_EQ(mgr_->write(b.desc, b.ch, buf((kPer + i) * 4096), 1024 + i * 8, 8, Each::cb,
                            &wb[i]),
                0);
  }
  // Everything but the four held writes completes; those stay (no timeout is set).
  run_until([&] { return completed(wa) + completed(wb) == 2 * kPer - 4 && fault_hits() == 4; });
  for (int i = 0; i < 50; ++i) fw_->step();
  ASSERT_EQ(completed(wa) + completed(wb), 2 * kPer - 4);
  // The reset, from t0; meanwhile t1 keeps writing to the other namespace (not frozen by
  // the bdev layer: while the module's channel is paused they are parked, not lost).
  constexpr int kDuring = 64;
  for (int i = 0; i < kDuring; ++i)
    for (int j = 0; j < 4096; ++j) buf((1 << 20) + i * 4096)[j] = static_cast<uint8_t>(i ^ j);
  std::vector<Each> during(kDuring);
  Done reset;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->reset(a.desc, a.ch, Done::cb, &reset), 0);
  }
  int issued = 0;
  run_until([&] {
    if (reset.n == 0 && issued < kDuring) {
      CurrentThreadScope on(t1_);
      EXPECT_EQ(mgr_->write(b2.desc, b2.ch, buf((1 << 20) + issued * 4096), issued, 1, Each::cb,
                            &during[issued]),
                0);
      ++issued;
    }
    return reset.n == 1;
  });
  ASSERT_GT(issued, 0);
  during.resize(issued);
  run_until([&] {
    return completed(wa) + completed(wb) == 2 * kPer && completed(during) == issued;
  });
  for (int i = 0; i < 100; ++i) fw_->step();  // nothing completes a second time
  EXPECT_EQ(reset.n, 1);
  EXPECT_EQ(reset.ok, 1) << bdev::to_string(reset.status);
  expect_all_once_ok(wa, "t0 write");
  expect_all_once_ok(wb, "t1 write");
  expect_all_once_ok(during, "write during reset");
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(bdev::nvme_controller_stats(*mgr_, "Nvme0")->reset_failures, 0u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);  // CC.EN 1 -> 0 once
  // The data is there.
  Done r;
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(4 << 20), 0, kPer * 8, Done::cb, &r), 0);
    ASSERT_EQ(mgr_->read(b2.desc, b2.ch, buf(6 << 20), 0, issued, Done::cb, &r), 0);
  }
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(5 << 20), 1024, kPer * 8, Done::cb, &r), 0);
  }
  run_until([&] { return r.n == 3; });
  ASSERT_EQ(r.ok, 3);
  EXPECT_EQ(std::memcmp(buf(4 << 20), buf(0), kPer * 4096), 0);
  EXPECT_EQ(std::memcmp(buf(5 << 20), buf(kPer * 4096), kPer * 4096), 0);
  EXPECT_EQ(std::memcmp(buf(6 << 20), buf(1 << 20), issued * 4096), 0);
  close(t0_, a);
  close(t1_, b);
  close(t1_, b2);
  detach();
}

// nvme_reset_controller: done(ctx, rc) on the calling thread; resets requested while one runs
// join it (one controller reset for all of them); unknown names are -ENODEV.
TEST_F(NvmeBdevTest, ResetControllerApiJoinsAndReportsOnCallingThread) {
  // The queue-pair observer sees each channel's queue pair created and freed, on its thread.
  struct Seen {
    std::vector<std::pair<const nvme::Qpair*, event::Thread*>> created, freed;
  } seen;
  bdev::NvmeBdevOptions opt;
  opt.qpair_observer = [&seen](const nvme::Qpair* qp, bool created, const std::string&) {
    (created ? seen.created : seen.freed).push_back({qp, event::Thread::current()});
  };
  attach_in_process(opt);
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n2");  // channels (queue pairs) on both threads
  struct Waiter {
    event::Thread* want;
    int n = 0;
    int rc = 1;
    bool right_thread = false;
    static void fn(void* ctx, int rc) {
      auto* w = static_cast<Waiter*>(ctx);
      ++w->n;
      w->rc = rc;
      w->right_thread = event::Thread::current() == w->want;
    }
  };
  Waiter w0{t0_}, w0b{t0_}, w1{t1_};
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(bdev::nvme_reset_controller(*mgr_, "Nope", Waiter::fn, &w0), -ENODEV);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w0), 0);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w0b), 0);
  }
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w1), 0);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", nullptr, nullptr), 0);
  }
  run_until([&] { return w0.n == 1 && w0b.n == 1 && w1.n == 1; });
  for (Waiter* w : {&w0, &w0b, &w1}) {
    EXPECT_EQ(w->n, 1);
    EXPECT_EQ(w->rc, 0);
    EXPECT_TRUE(w->right_thread);
  }
  EXPECT_EQ(module_resets(), 1u);
  // I/O works on both threads afterwards.
  Done d;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(), 0, 8, Done::cb, &d), 0);
  }
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(1 << 20), 0, 1, Done::cb, &d), 0);
  }
  run_until([&] { return d.n == 2; });
  EXPECT_EQ(d.ok, 2);
  close(t0_, a);
  close(t1_, b);
  detach();
  ASSERT_EQ(seen.created.size(), 2u);
  EXPECT_EQ(seen.created[0].second, t0_);
  EXPECT_EQ(seen.created[1].second, t1_);
  ASSERT_EQ(seen.freed.size(), 2u);
  for (const auto& f : seen.freed)
    EXPECT_TRUE(f == seen.created[0] || f == seen.created[1]);
}

// CSTS.CFS with I/O outstanding (two writes held by the device, more waiting in the SQs that
// the fatal controller no longer fetches): the admin poller's health check resets the
// controller and every I/O is retried to success.
TEST_F(NvmeBdevTest, FatalStatusIsResetByTheAdminPoller) {
  attach_in_process();
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  hold_commands(sn::nvm::kWrite, 2);
  for (int i = 0; i < 48; ++i)
    for (int j = 0; j < 4096; ++j) buf(i * 4096)[j] = static_cast<uint8_t>(i * 17 + j * 3 + 5);
  std::vector<Each> w(48);
  auto issue = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const bool first = i % 2 == 0;
      CurrentThreadScope on(first ? t0_ : t1_);
      Open& o = first ? a : b;
      ASSERT_EQ(mgr_->write(o.desc, o.ch, buf(i * 4096), i * 8, 8, Each::cb, &w[i]), 0);
    }
  };
  issue(0, 32);
  run_until([&] { return completed(w) == 30 && fault_hits() == 2; });
  device_->with_device([](auto& d) { d.controller().inject_fatal_status(); });
  issue(32, 48);
  run_until([&] { return completed(w) == 48; });
  for (int i = 0; i < 100; ++i) fw_->step();
  expect_all_once_ok(w, "write");
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);
  Done r;
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(4 << 20), 0, 48 * 8, Done::cb, &r), 0);
  }
  run_until([&] { return r.n == 1; });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(buf(4 << 20), buf(0), 48 * 4096), 0);
  close(t0_, a);
  close(t1_, b);
  detach();
}

// An I/O timeout with action kReset on a channel that is not on the admin thread: the
// driver's reset request goes through the module's hook (pause, reset, resume), and the
// read the device never answered is retried to success.
TEST_F(NvmeBdevTest, TimeoutActionResetRecoversHeldIo) {
  bdev::NvmeBdevOptions o;
  o.qpair.timeout_us = 100'000;
  attach_in_process(o, nvme::TimeoutAction::kReset);
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  for (int j = 0; j < 4096; ++j) buf()[j] = static_cast<uint8_t>(j * 11 + 3);
  Done w;
  io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  hold_commands(sn::nvm::kRead, 1);
  std::memset(buf(1 << 20), 0, 4096);
  Done r;
  io(t1_, r, [&] { return mgr_->read(b.desc, b.ch, buf(1 << 20), 40, 8, Done::cb, &r); });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.ok, 1) << bdev::to_string(r.status);
  EXPECT_EQ(fault_hits(), 1u);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(), 4096), 0);
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);
  close(t0_, a);
  close(t1_, b);
  detach();
}

// A write the device holds is given up by its submitter (Manager::abort: a fabric target
// whose host connection went). The submitter writes newer data to the same blocks; the
// controller reset that ends the held write must not issue it again (it would land over the
// newer data): it completes aborted, and the newer data stays.
TEST_F(NvmeBdevTest, AnAbortedWriteIsNotRetriedAfterTheResetThatEndsIt) {
  bdev::NvmeBdevOptions o;
  o.retry_count = 4;
  attach_in_process(o);
  Open a = open(t0_, "Nvme0n1");
  for (int j = 0; j < 4096; ++j) {
    buf()[j] = static_cast<uint8_t>(j * 3 + 1);      // the stale write
    buf(8192)[j] = static_cast<uint8_t>(j * 5 + 2);  // the newer one
  }
  hold_commands(sn::nvm::kWrite, 1);
  Done stale;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &stale), 0);
  }
  run_until([&] { return fault_hits() == 1; });
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(mgr_->abort(a.desc, a.ch, &stale), 1);
  }
  Done newer;
  io(t0_, newer, [&] { return mgr_->write(a.desc, a.ch, buf(8192), 40, 8, Done::cb, &newer); });
  ASSERT_EQ(newer.ok, 1);
  EXPECT_EQ(stale.n, 0);  // the device still holds it
  Done reset;
  io(t0_, reset, [&] { return mgr_->reset(a.desc, a.ch, Done::cb, &reset); });
  run_until([&] { return stale.n == 1; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(stale.n, 1);
  EXPECT_EQ(stale.status, bdev::IoStatus::kAborted);
  Done r;
  io(t0_, r, [&] { return mgr_->read(a.desc, a.ch, buf(1 << 20), 40, 8, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(8192), 4096), 0);
  close(t0_, a);
  detach();
}

// The same hazard one step earlier: an aborted write still waiting in the queue pair for an
// SQ slot (the queue is full) ends there and never reaches the device.
TEST_F(NvmeBdevTest, AnAbortedWriteWaitingForAnSqSlotNeverReachesTheDevice) {
  bdev::NvmeBdevOptions o;
  o.qpair.queue_size = 2;  // one slot
  attach_in_process(o);
  Open a = open(t0_, "Nvme0n1");
  for (int j = 0; j < 4096; ++j) {
    buf()[j] = static_cast<uint8_t>(j * 3 + 1);      // held by the device
    buf(8192)[j] = static_cast<uint8_t>(j * 5 + 2);  // waits, then is given up
  }
  hold_commands(sn::nvm::kWrite, 1);
  Done held, given_up;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &held), 0);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(8192), 80, 8, Done::cb, &given_up), 0);
  }
  run_until([&] { return fault_hits() == 1; });
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(mgr_->abort(a.desc, a.ch, &given_up), 1);
  }
  run_until([&] { return given_up.n == 1; });
  EXPECT_EQ(given_up.status, bdev::IoStatus::kAborted);
  Done reset;  // ends the held write (retried: it was not given up)
  io(t0_, reset, [&] { return mgr_->reset(a.desc, a.ch, Done::cb, &reset); });
  run_until([&] { return held.n == 1; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(held.ok, 1);
  EXPECT_EQ(given_up.n, 1);
  Done r;
  std::memset(buf(1 << 20), 0xee, 4096);
  io(t0_, r, [&] { return mgr_->read(a.desc, a.ch, buf(1 << 20), 80, 8, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_NE(std::memcmp(buf(1 << 20), buf(8192), 4096), 0);  // never written
  close(t0_, a);
  detach();
}

// Real time, 50 times faster: the driver's 10.5 s wait for a controller that never becomes
// ready again (CAP.TO) takes 210 ms.
class FastClock final : public env::Clock {
 public:
  uint64_t read() const override { return env::system_clock().now() * 50; }
  uint64_t ticks_per_second() const override { return env::system_clock().ticks_per_second(); }
};

// A reset that fails (the controller never becomes ready again) with max_reset_failures = 1:
// the controller is failed. What the device held ends with the driver's DNR status, what was
// parked during the reset fails, the bdev reset fails, nothing is left behind, and new I/O
// fails at once.
TEST_F(NvmeBdevTest, FailedResetFailsHeldAndParkedIo) {
  static FastClock fast;
  attach_in_process({}, nvme::TimeoutAction::kAbort, [](nvme::ControllerOptions& co) {
    co.clock = &fast;
    co.max_reset_failures = 1;
  });
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  Open b2 = open(t1_, "Nvme0n2");
  hold_commands(sn::nvm::kWrite, 2);
  std::vector<Each> w(16);
  for (int i = 0; i < 16; ++i) {
    CurrentThreadScope on(i % 2 ? t1_ : t0_);
    Open& o = i % 2 ? b : a;
    ASSERT_EQ(mgr_->write(o.desc, o.ch, buf(i * 4096), i * 8, 8, Each::cb, &w[i]), 0);
  }
  run_until([&] { return completed(w) == 14 && fault_hits() == 2; });
  device_->with_device([](auto& d) { d.controller().hold_ready(true); });
  Done reset;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->reset(a.desc, a.ch, Done::cb, &reset), 0);
  }
  std::vector<Each> during(64);
  int issued = 0;
  run_until([&] {
    if (reset.n == 0 && issued < 64) {
      CurrentThreadScope on(t1_);
      EXPECT_EQ(mgr_->write(b2.desc, b2.ch, buf(1 << 20), issued, 1, Each::cb, &during[issued]), 0);
      ++issued;
    }
    return reset.n == 1;
  });
  during.resize(issued);
  run_until([&] { return completed(w) == 16 && completed(during) == issued; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(reset.n, 1);
  EXPECT_EQ(reset.status, IoStatus::kFailed);
  int held = 0;
  for (const Each& e : w) {
    EXPECT_EQ(e.n, 1);
    if (e.status == IoStatus::kSuccess) continue;
    ++held;
    EXPECT_EQ(e.status, IoStatus::kNvmeError);  // the driver's final status (DNR): not retried
  }
  EXPECT_EQ(held, 2);
  for (const Each& e : during) EXPECT_EQ(e.n, 1);
  auto st = bdev::nvme_controller_stats(*mgr_, "Nvme0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->resets, 0u);
  EXPECT_EQ(st->reset_failures, 1u);
  Done late;
  io(t1_, late, [&] { return mgr_->write(b2.desc, b2.ch, buf(), 0, 1, Done::cb, &late); });
  EXPECT_EQ(late.status, IoStatus::kFailed);
  close(t0_, a);
  close(t1_, b);
  close(t1_, b2);
  detach();
}

// ------------------------------------------- controller reset, free-running reactors ----

// Runs f on t (a message).
void post(event::Thread* t, std::function<void()> f) {
  auto* p = new std::function<void()>(std::move(f));
  if (t->send_msg(
          [](void* a) {
            std::unique_ptr<std::function<void()>> g(static_cast<std::function<void()>*>(a));
            (*g)();
          },
          p) != 0) {
    delete p;
    ADD_FAILURE() << "send_msg failed";
  }
}
// On the current thread: polls pred() every period_us, runs then() once it holds.
void when(std::function<bool()> pred, std::function<void()> then, uint64_t period_us = 0) {
  struct W {
    std::function<bool()> pred;
    std::function<void()> then;
    event::Poller* p = nullptr;
  };
  auto* w = new W{std::move(pred), std::move(then)};
  w->p = event::Thread::current()->register_poller(
      [](void* a) {
        auto* w = static_cast<W*>(a);
        if (!w->pred()) return event::PollStatus::kIdle;
        event::Thread::current()->unregister_poller(w->p);
        std::unique_ptr<W> own(w);
        own->then();
        return event::PollStatus::kBusy;
      },
      w, period_us, "test_when");
}

// The reset under load again, with the reactors on two OS threads (run under TSan): channel
// threads pause while the admin thread resets, completions the reset delivers are deferred to
// their channel's thread, and writes issued by the other thread meanwhile are parked.
TEST(NvmeBdevFreeRun, ControllerResetWithReactorsOnTwoOsThreads) {
  event::FrameworkOptions fo;
  fo.core_mask = "0x3";
  fo.pin_reactors = false;
  auto fwr = event::Framework::create(fo);
  ASSERT_TRUE(fwr.ok()) << fwr.error().message;
  std::unique_ptr<event::Framework> fw = std::move(fwr).value();
  event::Thread* t1 = fw->create_thread("t1", 1);
  ASSERT_NE(t1, nullptr);
  auto mgrr = bdev::Manager::create(*fw);
  ASSERT_TRUE(mgrr.ok());
  std::unique_ptr<bdev::Manager> mgr = std::move(mgrr).value();
  auto memr = env::DmaRegion::create(env::MemoryRegistry::global(), 8 << 20);
  ASSERT_TRUE(memr.ok());
  std::unique_ptr<env::DmaRegion> mem = std::move(memr).value();
  auto* base = static_cast<uint8_t*>(mem->data());
  auto devr = emu::device::InProcessNvmeDevice::create(config());
  ASSERT_TRUE(devr.ok()) << devr.error();
  std::unique_ptr<emu::device::InProcessNvmeDevice> device = std::move(devr).value();
  auto pci = env::VfioUserDevice::attach(device.get(), env::MemoryRegistry::global());
  ASSERT_TRUE(pci.ok()) << pci.error().message;
  nvme::ControllerOptions co;
  co.io_queues_requested = 4;
  auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  const uint64_t emu_resets =
      device->with_device([](auto& d) { return d.controller().counters().resets; });
  auto fault_hits = [&] {
    return device->with_device([](auto& d) { return d.controller().fault_hits(); });
  };

  constexpr int kPer = 32, kDuring = 256;
  struct Io {
    std::atomic<int> n{0}, ok{0};
    std::atomic<int>* group = nullptr;
    static void cb(BdevIo&, bool success, void* arg) {
      auto* x = static_cast<Io*>(arg);
      x->ok += success;
      ++x->n;
      ++*x->group;
    }
  };
  struct State {
    Io wa[kPer], wb[kPer], during[kDuring], reads[3];
    std::atomic<int> writes_done{0}, during_done{0}, during_issued{0}, reads_done{0};
    std::atomic<int> reset_n{0}, reset_ok{0};
    std::atomic<bool> writer_stopped{false}, finished{false};
    bdev::NvmeControllerStats stats;
    uint64_t emu_resets = 0;  // before the detach (its shutdown clears CC.EN too)
    bool data_ok[3] = {false, false, false};
    bdev::Desc *a = nullptr, *b = nullptr, *b2 = nullptr;
    event::IoChannel *ach = nullptr, *bch = nullptr, *b2ch = nullptr;
    event::Thread* app = nullptr;
  } st;
  for (Io& x : st.wa) x.group = &st.writes_done;
  for (Io& x : st.wb) x.group = &st.writes_done;
  for (Io& x : st.during) x.group = &st.during_done;
  for (Io& x : st.reads) x.group = &st.reads_done;
  for (int i = 0; i < 2 * kPer; ++i)
    for (int j = 0; j < 4096; ++j) base[i * 4096 + j] = static_cast<uint8_t>(i * 29 + j * 5 + 3);
  for (int i = 0; i < kDuring; ++i)
    for (int j = 0; j < 4096; ++j) base[(1 << 20) + i * 4096 + j] = static_cast<uint8_t>(i + j * 3);
  // The device holds the first four writes: only a controller reset ends them.
  const emu::nvme::FaultRule hold = held(sn::nvm::kWrite, 4);
  ASSERT_TRUE(device->with_device([&](auto& d) { return d.controller().faults().add(hold).ok(); }));

  std::function<void()> finish_up;  // on the app thread
  std::function<void()> start = [&] {
    st.app = event::Thread::current();
    bdev::NvmeBdevOptions o;
    o.name = "Nvme0";
    o.admin_poll_period_us = 1000;
    auto names = bdev::nvme_attach_controller(*mgr, std::move(ctrl).value(), o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    auto d = mgr->open("Nvme0n1", true, nullptr, nullptr);
    ASSERT_TRUE(d.ok());
    st.a = *d;
    st.ach = mgr->get_io_channel(st.a);
    post(t1, [&] {
      auto d1 = mgr->open("Nvme0n1", true, nullptr, nullptr);
      auto d2 = mgr->open("Nvme0n2", true, nullptr, nullptr);
      ASSERT_TRUE(d1.ok() && d2.ok());
      st.b = *d1;
      st.b2 = *d2;
      st.bch = mgr->get_io_channel(st.b);
      st.b2ch = mgr->get_io_channel(st.b2);
      for (int i = 0; i < kPer; ++i)
        EXPECT_EQ(mgr->write(st.b, st.bch, base + (kPer + i) * 4096, 1024 + i * 8, 8, Io::cb,
                             &st.wb[i]),
                  0);
      post(st.app, [&] {
        for (int i = 0; i < kPer; ++i)
          EXPECT_EQ(mgr->write(st.a, st.ach, base + i * 4096, i * 8, 8, Io::cb, &st.wa[i]), 0);
        when([&] { return st.writes_done == 2 * kPer - 4 && fault_hits() == 4; }, [&] {
          // t1 keeps writing to the other namespace (one write every 20 us) until the reset
          // is over; the reset starts from this thread.
          post(t1, [&] {
            when([&] {
              if (st.reset_n.load() == 0 && st.during_issued < kDuring) {
                const int i = st.during_issued;
                EXPECT_EQ(mgr->write(st.b2, st.b2ch, base + (1 << 20) + i * 4096, i, 1, Io::cb,
                                     &st.during[i]),
                          0);
                ++st.during_issued;
                return false;
              }
              return true;
            }, [&] { st.writer_stopped = true; }, 20);
          });
          EXPECT_EQ(mgr->reset(st.a, st.ach,
                               [](BdevIo&, bool ok, void* arg) {
                                 auto* s = static_cast<State*>(arg);
                                 s->reset_ok += ok;
                                 ++s->reset_n;
                               },
                               &st),
                    0);
          when([&] {
            return st.reset_n == 1 && st.writes_done == 2 * kPer && st.writer_stopped &&
                   st.during_done == st.during_issued;
          }, finish_up);
        });
      });
    });
  };
  finish_up = [&] {
    st.stats = *bdev::nvme_controller_stats(*mgr, "Nvme0");
    st.emu_resets = device->with_device([](auto& d) { return d.controller().counters().resets; });
    const int issued = st.during_issued;
    EXPECT_EQ(mgr->read(st.a, st.ach, base + (4 << 20), 1024, kPer * 8, Io::cb, &st.reads[0]), 0);
    post(t1, [&, issued] {
      EXPECT_EQ(mgr->read(st.b, st.bch, base + (5 << 20), 0, kPer * 8, Io::cb, &st.reads[1]), 0);
      EXPECT_EQ(mgr->read(st.b2, st.b2ch, base + (6 << 20), 0, issued, Io::cb, &st.reads[2]), 0);
    });
    when([&] { return st.reads_done == 3; }, [&, issued] {
      st.data_ok[0] = std::memcmp(base + (4 << 20), base + kPer * 4096, kPer * 4096) == 0;
      st.data_ok[1] = std::memcmp(base + (5 << 20), base, kPer * 4096) == 0;
      st.data_ok[2] = std::memcmp(base + (6 << 20), base + (1 << 20), issued * 4096) == 0;
      mgr->put_io_channel(st.ach);
      mgr->close(st.a);
      post(t1, [&] {
        mgr->put_io_channel(st.bch);
        mgr->put_io_channel(st.b2ch);
        mgr->close(st.b);
        mgr->close(st.b2);
        post(st.app, [&] {
          EXPECT_EQ(bdev::nvme_detach_controller(
                        *mgr, "Nvme0",
                        [](void* arg) {
                          std::unique_ptr<std::pair<event::Framework*, State*>> s(
                              static_cast<std::pair<event::Framework*, State*>*>(arg));
                          s->second->finished = true;
                          s->first->stop(0);
                        },
                        new std::pair<event::Framework*, State*>(fw.get(), &st)),
                    0);
        });
      });
    });
  };
  // A lost completion fails the test instead of hanging it.
  std::atomic<bool> over{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 400 && !over.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!over.load()) {
      ADD_FAILURE() << "scenario did not finish in 20 s";
      fw->stop(1);
    }
  });
  const int rc = fw->run(
      [](void* arg) {
        auto* f = static_cast<std::function<void()>*>(arg);
        (*f)();
      },
      &start);
  over = true;
  watchdog.join();
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(st.finished);
  EXPECT_EQ(st.reset_n.load(), 1);
  EXPECT_EQ(st.reset_ok.load(), 1);
  for (int i = 0; i < kPer; ++i) {
    EXPECT_EQ(st.wa[i].n.load(), 1) << i;
    EXPECT_EQ(st.wa[i].ok.load(), 1) << i;
    EXPECT_EQ(st.wb[i].n.load(), 1) << i;
    EXPECT_EQ(st.wb[i].ok.load(), 1) << i;
  }
  EXPECT_GT(st.during_issued.load(), 0);
  for (int i = 0; i < st.during_issued; ++i) {
    EXPECT_EQ(st.during[i].n.load(), 1) << i;
    EXPECT_EQ(st.during[i].ok.load(), 1) << i;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(st.reads[i].ok.load(), 1) << i;
    EXPECT_TRUE(st.data_ok[i]) << i;
  }
  EXPECT_EQ(st.stats.resets, 1u);
  EXPECT_EQ(st.stats.reset_failures, 0u);
  EXPECT_EQ(st.emu_resets - emu_resets, 1u);  // CC.EN 1 -> 0 once
  mgr.reset();
  fw.reset();
}

}  // namespace
}  // namespace pollux::nvme_bdev_testing
