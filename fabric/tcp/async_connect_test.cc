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

  nvme::Controller& attach() {
    nvme::TransportId t;
    t.trtype = nvme::TransportType::kTcp;
    t.traddr = "127.0.0.1";
    t.trsvcid = std::to_string(target_->port());
    t.subnqn = target_->subnqn();
    auto tr = TcpTransport::create(t, {});
    EXPECT_TRUE(tr);
    nvme::ControllerOptions o;
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
  int connects() {
    return target_->inspect([](const st::Log& l) {
      int n = 0;
      for (const st::Pdu* p : l.of_type(spec::nvme_tcp::pdu::kCapsuleCmd)) {
        const auto sqe = p->sqe();
        n += sqe.opcode == nf::kOpcodeFabrics &&
             reinterpret_cast<const uint8_t*>(&sqe)[4] == nf::fctype::kConnect;
      }
      return n;
    });
  }

  std::unique_ptr<st::ScriptedTarget> target_;
  std::vector<std::unique_ptr<nvme::Controller>> ctrls_;
  std::vector<std::pair<nvme::Controller*, std::unique_ptr<nvme::Qpair>>> pairs_;
};

// One controller's reset runs in steps while the same thread keeps another controller's I/O
// going: between two steps of the reset, reads of the other controller complete. During the
// reset the admin queue is the reset's: a synchronous admin command is refused, not queued
// behind it.
TEST_F(AsyncConnectTest, AResetRunsInStepsWhileAnotherControllersIoCompletes) {
  nvme::Controller& a = attach();
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
  const int connects_before = connects();

  ASSERT_EQ(a.reset_start(), -EAGAIN);
  EXPECT_TRUE(a.reset_in_progress());
  sn::SubmissionEntry get{};
  get.opcode = sn::admin::kGetFeatures;
  get.cdw10 = sn::feature::kNumberOfQueues;
  auto busy = a.admin_sync(get);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, -EBUSY);

  std::vector<uint8_t> rbuf(4096);
  int steps = 0, reads_between_steps = 0;
  int rc;
  const auto deadline = Clock::now() + kWait;
  while ((rc = a.reset_poll()) == -EAGAIN) {
    ASSERT_LT(Clock::now(), deadline) << "the reset did not end";
    ++steps;
    Done r;
    ASSERT_EQ(pb.read(*nsb, rbuf.data(), 0, 8, on_done, &r), 0);
    while (!r.done) {
      ASSERT_LT(Clock::now(), deadline);
      pb.process_completions();
    }
    EXPECT_FALSE(nvme::cpl_is_error(r.cpl));
    ++reads_between_steps;
  }
  ASSERT_EQ(rc, 0);
  EXPECT_FALSE(a.reset_in_progress());
  EXPECT_GT(steps, 1);
  EXPECT_EQ(reads_between_steps, steps);
  EXPECT_EQ(connects(), connects_before + 2);  // admin and I/O queue of `a`, again
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
  int polls = 0, rc;
  const auto deadline = Clock::now() + kWait;
  while ((rc = c.poll_io_qpair_connect(qp)) == -EAGAIN) {
    ASSERT_LT(Clock::now(), deadline);
    ++polls;
    std::this_thread::yield();
  }
  ASSERT_EQ(rc, 0);
  EXPECT_GT(polls, 0);
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

}  // namespace
}  // namespace pollux::fabric::tcp
