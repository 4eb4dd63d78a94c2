// NVMe/TCP connects and resets without blocking (nvme::Controller::reset_start/reset_poll,
// alloc_io_qpair_async/poll_io_qpair_connect): the real controller and queue pairs against a
// scripted target on loopback sockets (testing/scripted_target.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/status.h"
#include "fabric/tcp/host.h"
#include "fabric/tcp/testing/scripted_target.h"

namespace pollux::fabric::tcp {
namespace {

namespace st = pollux::fabric::tcp::testing;
namespace sn = spec::nvme;
namespace nf = spec::nvmf;
using st::Clock;

constexpr auto kWait = std::chrono::seconds(10);
constexpr uint32_t kBlock = 512;

struct Done {
  bool done = false;
  sn::CompletionEntry cpl{};
};
void on_done(void* ctx, const sn::CompletionEntry& cpl) {
  auto* d = static_cast<Done*>(ctx);
  d->cpl = cpl;
  d->done = true;
}

class AsyncConnectTest : public ::testing::Test {
 protected:
  void SetUp() override { target_ = std::make_unique<st::ScriptedTarget>(st::TargetOptions{}); }
  void TearDown() override {
    for (auto& [c, q] : pairs_) {
      if (q) c->free_io_qpair(std::move(q));
    }
    pairs_.clear();
    ctrls_.clear();
    const auto v = target_->violations();
    EXPECT_TRUE(v.empty()) << "the target saw the host break the rules";
    target_.reset();
  }

  nvme::Controller& attach(nvme::ControllerOptions o = {}) {
    nvme::TransportId t;
    t.trtype = nvme::TransportType::kTcp;
    t.traddr = "127.0.0.1";
    t.trsvcid = std::to_string(target_->port());
    t.subnqn = target_->subnqn();
    auto tr = TcpTransport::create(t, {});
    EXPECT_TRUE(tr);
    o.hostnqn = "nqn.2026-01.io.pollux:async-test";
    auto c = nvme::Controller::attach(std::move(tr).value(), o);
    EXPECT_TRUE(c) << c.error().message;
    ctrls_.push_back(std::move(c).value());
    return *ctrls_.back();
  }
  nvme::Qpair& keep(nvme::Controller& c, std::unique_ptr<nvme::Qpair> q) {
    pairs_.emplace_back(&c, std::move(q));
    return *pairs_.back().second;
  }

  std::unique_ptr<st::ScriptedTarget> target_;
  std::vector<std::unique_ptr<nvme::Controller>> ctrls_;
  std::vector<std::pair<nvme::Controller*, std::unique_ptr<nvme::Qpair>>> pairs_;
};

// One controller's reset runs in steps while the same thread keeps another controller's I/O
// going. The target keeps the reset's admin Connect unanswered: every reset_poll() returns at
// once, and reads of the other controller complete in between; the reset fails when the
// Connect times out, and the next one (answered) succeeds. During a reset the admin queue is
// the reset's: a synchronous admin command is refused, not queued behind it.
TEST_F(AsyncConnectTest, AResetRunsInStepsWhileAnotherControllersIoCompletes) {
  nvme::ControllerOptions slow;
  slow.admin_timeout_us = 2'000'000;
  nvme::Controller& a = attach(slow);
  nvme::Controller& b = attach();
  auto qa = a.alloc_io_qpair({.queue_size = 32});
  ASSERT_TRUE(qa) << qa.error().message;
  nvme::Qpair& pa = keep(a, std::move(qa).value());
  auto qb = b.alloc_io_qpair({.queue_size = 32});
  ASSERT_TRUE(qb) << qb.error().message;
  nvme::Qpair& pb = keep(b, std::move(qb).value());
  const nvme::Namespace* nsa = a.ns(1);
  const nvme::Namespace* nsb = b.ns(1);
  ASSERT_TRUE(nsa && nsb);
  auto hold = std::make_shared<std::atomic<bool>>(true);  // the hook outlives this body
  auto held = std::make_shared<std::atomic<int>>(0);
  target_->set_hook([hold, held](st::Conn&, const st::Command& cmd) {
    if (!hold->load() || !cmd.is_connect()) return false;
    nf::ConnectCommand connect;
    std::memcpy(&connect, &cmd.sqe, sizeof connect);
    if (connect.qid != 0) return false;
    held->fetch_add(1);
    return true;  // never answered
  });

  ASSERT_EQ(a.reset_start(), -EAGAIN);
  EXPECT_TRUE(a.reset_in_progress());
  sn::SubmissionEntry get{};
  get.opcode = sn::admin::kGetFeatures;
  get.cdw10 = sn::feature::kNumberOfQueues;
  auto busy = a.admin_sync(get);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, -EBUSY);

  const auto deadline = Clock::now() + kWait;
  std::vector<uint8_t> rbuf(4096);
  int reads = 0;
  while (held->load() == 0 || reads < 20) {
    ASSERT_LT(Clock::now(), deadline) << "the reset's admin Connect never reached the target";
    ASSERT_EQ(a.reset_poll(), -EAGAIN) << "the reset ended with its Connect unanswered";
    Done r;
    ASSERT_EQ(pb.read(*nsb, rbuf.data(), 0, 8, on_done, &r), 0);
    while (!r.done) {
      ASSERT_LT(Clock::now(), deadline);
      pb.process_completions();
    }
    EXPECT_FALSE(nvme::cpl_is_error(r.cpl));
    ++reads;
  }
  EXPECT_TRUE(a.reset_in_progress());
  int rc;
  while ((rc = a.reset_poll()) == -EAGAIN) ASSERT_LT(Clock::now(), deadline);
  EXPECT_NE(rc, 0);  // the Connect timed out
  EXPECT_FALSE(a.reset_in_progress());
  hold->store(false);
  ASSERT_EQ(a.reset(), 0);
  EXPECT_TRUE(a.healthy());
  EXPECT_TRUE(a.admin_sync(get));
  std::vector<uint8_t> wbuf(4096, 0x5a);
  Done w;
  ASSERT_EQ(pa.write(*nsa, wbuf.data(), 64, 8, on_done, &w), 0);
  while (!w.done) {
    ASSERT_LT(Clock::now(), deadline);
    pa.process_completions();
  }
  EXPECT_FALSE(nvme::cpl_is_error(w.cpl));
  EXPECT_EQ(target_->ram(64 * kBlock, 4096), wbuf);
}

// A queue pair allocated without blocking exists at once; what is submitted to it waits until
// its owner's polls have made the connection and sent the Connect, which goes first.
TEST_F(AsyncConnectTest, AnIoQueuePairConnectsFromItsOwnersPolls) {
  nvme::Controller& c = attach();
  auto q = c.alloc_io_qpair_async({.queue_size = 32});
  ASSERT_TRUE(q) << q.error().message;
  nvme::Qpair& qp = keep(c, std::move(q).value());
  EXPECT_TRUE(qp.transport().broken());  // not connected yet
  EXPECT_TRUE(c.healthy());              // ... and not a lost connection either
  std::vector<uint8_t> wbuf(4096, 0xc3);
  Done w;
  ASSERT_EQ(qp.write(*c.ns(1), wbuf.data(), 8, 8, on_done, &w), 0);
  int rc;
  const auto deadline = Clock::now() + kWait;
  while ((rc = c.poll_io_qpair_connect(qp)) == -EAGAIN) {
    ASSERT_LT(Clock::now(), deadline);
    std::this_thread::yield();
  }
  ASSERT_EQ(rc, 0);
  EXPECT_FALSE(qp.transport().broken());
  while (!w.done) {
    ASSERT_LT(Clock::now(), deadline);
    qp.process_completions();
  }
  EXPECT_FALSE(nvme::cpl_is_error(w.cpl));
  EXPECT_EQ(target_->ram(8 * kBlock, 4096), wbuf);
  target_->inspect([&](const st::Log& l) {
    const auto cmds = l.commands(l.conn_of_qid(qp.id()));
    ASSERT_EQ(cmds.size(), 2u);
    EXPECT_EQ(cmds[0].opcode, nf::kOpcodeFabrics);  // the Connect first
    EXPECT_EQ(cmds[1].opcode, sn::nvm::kWrite);
  });
}

// A queue pair whose Connect is refused stays unconnected, which the health check sees; the
// reset connects it, and what waited in it goes out then.
TEST_F(AsyncConnectTest, AQueuePairWhoseConnectIsRefusedIsConnectedByTheReset) {
  nvme::Controller& c = attach();
  auto refuse = std::make_shared<std::atomic<bool>>(true);  // the hook outlives this body
  target_->set_hook([refuse](st::Conn& conn, const st::Command& cmd) {
    if (!refuse->load() || !cmd.is_connect()) return false;
    nf::ConnectCommand connect;
    std::memcpy(&connect, &cmd.sqe, sizeof connect);
    if (connect.qid == 0) return false;
    conn.send_resp(cmd.sqe.cid,
                   sn::status::make(sn::sct::kCommandSpecific, nf::sc::kConnectInvalidParameters));
    return true;
  });
  auto q = c.alloc_io_qpair_async({.queue_size = 32});
  ASSERT_TRUE(q) << q.error().message;
  nvme::Qpair& qp = keep(c, std::move(q).value());
  std::vector<uint8_t> rbuf(4096);
  Done r;
  ASSERT_EQ(qp.read(*c.ns(1), rbuf.data(), 0, 8, on_done, &r), 0);
  int rc;
  const auto deadline = Clock::now() + kWait;
  while ((rc = c.poll_io_qpair_connect(qp)) == -EAGAIN) ASSERT_LT(Clock::now(), deadline);
  EXPECT_EQ(rc, -EIO);
  EXPECT_FALSE(c.healthy());
  EXPECT_FALSE(r.done);  // still waiting, not failed
  refuse->store(false);
  ASSERT_EQ(c.reset(), 0);
  EXPECT_TRUE(c.healthy());
  EXPECT_EQ(c.poll_io_qpair_connect(qp), 0);  // the reset took it over: nothing under way
  while (!r.done) {
    ASSERT_LT(Clock::now(), deadline);
    qp.process_completions();
  }
  EXPECT_FALSE(nvme::cpl_is_error(r.cpl)) << nvme::describe(nvme::Status::from_cqe(r.cpl.status));
}

// A queue pair whose Connect is in flight when a reset takes it over, or when it is freed: the
// Connect ends (the rings' reset, the queue's end) and its callback writes into the queue's
// connect state, which must still be there (chaos seeds 7931519 and 7931827: a use after free,
// the reset had dropped the state first). ASan checks this in the sanitizer stage.
TEST_F(AsyncConnectTest, AConnectInFlightEndsSafelyWhenAResetTakesTheQueueOverOrItIsFreed) {
  nvme::Controller& c = attach();
  auto hold = std::make_shared<std::atomic<bool>>(true);  // the hook outlives this body
  auto held = std::make_shared<std::atomic<int>>(0);
  target_->set_hook([hold, held](st::Conn&, const st::Command& cmd) {
    if (!hold->load() || !cmd.is_connect()) return false;
    nf::ConnectCommand connect;
    std::memcpy(&connect, &cmd.sqe, sizeof connect);
    if (connect.qid == 0) return false;
    held->fetch_add(1);
    return true;  // never answered
  });
  auto q1 = c.alloc_io_qpair_async({.queue_size = 32});
  ASSERT_TRUE(q1) << q1.error().message;
  nvme::Qpair& qp = keep(c, std::move(q1).value());
  const auto deadline = Clock::now() + kWait;
  while (held->load() < 1) {
    ASSERT_LT(Clock::now(), deadline);
    ASSERT_EQ(c.poll_io_qpair_connect(qp), -EAGAIN);
  }
  // A second queue pair, its Connect in flight too, is freed.
  auto q2 = c.alloc_io_qpair_async({.queue_size = 32});
  ASSERT_TRUE(q2) << q2.error().message;
  while (held->load() < 2) {
    ASSERT_LT(Clock::now(), deadline);
    ASSERT_EQ(c.poll_io_qpair_connect(**q2), -EAGAIN);
  }
  EXPECT_EQ(c.free_io_qpair(std::move(q2).value()), 0);
  // The reset takes the first over and connects it (answered now).
  hold->store(false);
  ASSERT_EQ(c.reset(), 0);
  EXPECT_EQ(c.poll_io_qpair_connect(qp), 0);
  EXPECT_FALSE(qp.transport().broken());
  std::vector<uint8_t> rbuf(4096);
  Done r;
  ASSERT_EQ(qp.read(*c.ns(1), rbuf.data(), 0, 8, on_done, &r), 0);
  while (!r.done) {
    ASSERT_LT(Clock::now(), deadline);
    qp.process_completions();
  }
  EXPECT_FALSE(nvme::cpl_is_error(r.cpl));
}

}  // namespace
}  // namespace pollux::fabric::tcp
