// The driver against a real pollux-rnic process: two NICs served over vfio-user on UNIX
// sockets, two hosts in this process attached through them (DMA_MAP of memfds, the doorbell
// page mapped from the server's memfd), a SEND, a WRITE and a READ with the data checked. The
// NICs run in realtime in the other process, so completions are polled for, with a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "spec/rnic.h"

extern char** environ;

namespace pollux::rdma {
namespace {

std::string g_binary;

struct Host {
  env::MemoryRegistry registry;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  uint8_t* at(std::size_t off) const { return static_cast<uint8_t*>(buf->data()) + off; }
  uint64_t addr(std::size_t off) const { return reinterpret_cast<uintptr_t>(at(off)); }
};

class PolluxRnicProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pollux-rnic.XXXXXX";  // socket paths must be short
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string dir_arg = dir_;
    char* argv[] = {g_binary.data(),
                    const_cast<char*>("--dir"),
                    const_cast<char*>(dir_arg.c_str()),
                    const_cast<char*>("--nics"),
                    const_cast<char*>("2"),
                    const_cast<char*>("--quiet"),
                    nullptr};
    ASSERT_EQ(::posix_spawn(&pid_, g_binary.c_str(), nullptr, nullptr, argv, environ), 0);
    // Start-up: both sockets exist (bounded; not a race fix — connect needs the listener).
    for (int i = 0; i < 500 && !(exists(0) && exists(1)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(exists(0) && exists(1)) << "pollux-rnic did not create its sockets";
  }
  // The hosts go first, while the NICs still answer their DESTROY commands and DMA_UNMAPs.
  void TearDown() override {
    for (Host* h : {&a_, &b_}) {
      h->mr.reset();
      h->qp.reset();
      h->cq.reset();
      h->pd.reset();
      h->buf.reset();
      h->ctx.reset();
    }
  }
  ~PolluxRnicProcess() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    for (int i = 0; i < 2; ++i) ::unlink(sock(i).c_str());
    ::rmdir(dir_.c_str());
  }
  std::string sock(int i) const { return dir_ + "/rnic" + std::to_string(i) + ".sock"; }
  bool exists(int i) const {
    struct stat st;
    return ::stat(sock(i).c_str(), &st) == 0;
  }

  void open(Host& h, int nic, bool push = false) {
    auto pci = env::VfioUserDevice::connect("vfio-user:" + sock(nic), h.registry);
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    if (push) {  // the window is shared memory across the process boundary, as the doorbells
      ASSERT_NE(pci.value()->bar_map(0, spec::rnic::reg::kPushBase, spec::rnic::reg::kPushSize),
                nullptr);
    }
    auto ctx = open_rnic(std::move(pci).value(), h.registry, RnicOptions{push});
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    h.ctx = std::move(ctx).value();
    auto buf = env::DmaRegion::create(h.registry, 1 << 20, env::DmaOptions{false});
    ASSERT_TRUE(buf.ok());
    h.buf = std::move(buf).value();
    h.pd = std::move(h.ctx->alloc_pd()).value();
    h.cq = std::move(h.ctx->create_cq(64)).value();
    auto mr = h.ctx->reg_mr(*h.pd, h.buf->data(), 1 << 20,
                            access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
    ASSERT_TRUE(mr.ok());
    h.mr = std::move(mr).value();
    QpInitAttr init;
    init.send_cq = init.recv_cq = h.cq.get();
    auto qp = h.ctx->create_qp(*h.pd, init);
    ASSERT_TRUE(qp.ok());
    h.qp = std::move(qp).value();
  }
  static void connect(Qp& qp, const Host& peer) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort |
                               qp_attr::kAccessFlags),
              0);
    a.qp_state = QpState::kRtr;
    a.dest_address = peer.ctx->port_address();
    a.dest_qp_num = peer.qp->qp_num();
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                               qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer),
              0);
    a.qp_state = QpState::kRts;
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout |
                               qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic),
              0);
  }
  // Polls until one completion arrives (the NIC works in the other process), 10 s at most.
  static WorkCompletion wait_one(Cq& cq) {
    WorkCompletion wc;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (cq.poll(&wc, 1) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "no completion within 10 s";
        wc.status = WcStatus::kGeneralErr;
        break;
      }
    }
    return wc;
  }

  std::string dir_;
  pid_t pid_ = -1;
  Host a_, b_;
};

TEST_F(PolluxRnicProcess, SendWriteReadAcrossTheProcessBoundary) {
  open(a_, 0);
  open(b_, 1);
  connect(*a_.qp, b_);
  connect(*b_.qp, a_);
  for (int i = 0; i < 20000; ++i) a_.at(0)[i] = static_cast<uint8_t>(i * 7 + 1);
  Sge rs{b_.addr(0), 8192, b_.mr->lkey()};
  RecvWr r;
  r.sg_list = &rs;
  r.num_sge = 1;
  ASSERT_EQ(b_.qp->post_recv(r, nullptr), 0);
  Sge ss{a_.addr(0), 5000, a_.mr->lkey()};
  SendWr s;
  s.sg_list = &ss;
  s.num_sge = 1;
  s.send_flags = send_flag::kSignaled;
  ASSERT_EQ(a_.qp->post_send(s, nullptr), 0);
  WorkCompletion rx = wait_one(*b_.cq);
  EXPECT_EQ(rx.status, WcStatus::kSuccess);
  EXPECT_EQ(rx.byte_len, 5000u);
  EXPECT_EQ(wait_one(*a_.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 5000), 0);
  // WRITE 20,000 bytes to B at 100,000, then READ them back into A at 200,000.
  Sge ws{a_.addr(0), 20000, a_.mr->lkey()};
  SendWr w = s;
  w.sg_list = &ws;
  w.opcode = WrOpcode::kRdmaWrite;
  w.remote_addr = b_.addr(100000);
  w.rkey = b_.mr->rkey();
  ASSERT_EQ(a_.qp->post_send(w, nullptr), 0);
  EXPECT_EQ(wait_one(*a_.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(100000), 20000), 0);
  Sge rd{a_.addr(200000), 20000, a_.mr->lkey()};
  SendWr rr = w;
  rr.sg_list = &rd;
  rr.opcode = WrOpcode::kRdmaRead;
  ASSERT_EQ(a_.qp->post_send(rr, nullptr), 0);
  EXPECT_EQ(wait_one(*a_.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), a_.at(200000), 20000), 0);
}

// The push window across the process boundary: the NIC process reads a slot while this one
// may already be filling it again (two slots alternate; each round posts 16 lone SENDs
// without waiting, over a 64-entry queue). Every message arrives whole, in order, and once.
TEST_F(PolluxRnicProcess, PushedSendsArriveWholeAndInOrder) {
  open(a_, 0, true);
  open(b_, 1);
  connect(*a_.qp, b_);
  connect(*b_.qp, a_);
  constexpr int kRounds = 100, kBatch = 16, kBytes = 48;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kBatch; ++i) {
      Sge rs{b_.addr(65536 + i * 64), 64, b_.mr->lkey()};
      RecvWr r;
      r.wr_id = static_cast<uint64_t>(round * kBatch + i);
      r.sg_list = &rs;
      r.num_sge = 1;
      ASSERT_EQ(b_.qp->post_recv(r, nullptr), 0);
    }
    for (int i = 0; i < kBatch; ++i) {
      const int m = round * kBatch + i;
      for (int k = 0; k < kBytes; ++k) a_.at(i * 64)[k] = static_cast<uint8_t>(m * 31 + k);
      Sge ss{a_.addr(i * 64), kBytes, a_.mr->lkey()};
      SendWr s;
      s.wr_id = static_cast<uint64_t>(m);
      s.sg_list = &ss;
      s.num_sge = 1;
      s.send_flags = send_flag::kSignaled;
      ASSERT_EQ(a_.qp->post_send(s, nullptr), 0);
    }
    for (int i = 0; i < kBatch; ++i) {
      const int m = round * kBatch + i;
      const WorkCompletion rx = wait_one(*b_.cq);
      ASSERT_EQ(rx.status, WcStatus::kSuccess) << m;
      ASSERT_EQ(rx.wr_id, static_cast<uint64_t>(m));
      ASSERT_EQ(rx.byte_len, static_cast<uint32_t>(kBytes));
      const uint8_t* got = b_.at(65536 + i * 64);
      for (int k = 0; k < kBytes; ++k) ASSERT_EQ(got[k], static_cast<uint8_t>(m * 31 + k)) << m;
    }
    for (int i = 0; i < kBatch; ++i) {
      const WorkCompletion tx = wait_one(*a_.cq);
      ASSERT_EQ(tx.status, WcStatus::kSuccess);
      ASSERT_EQ(tx.wr_id, static_cast<uint64_t>(round * kBatch + i));
    }
  }
}

// The NIC process dies: the driver finds out, posts and polls say -ENODEV, nothing hangs
// or crashes, and every object can still be destroyed.
TEST_F(PolluxRnicProcess, ADeadNicIsReportedAsGone) {
  open(a_, 0);
  open(b_, 1);
  connect(*a_.qp, b_);
  connect(*b_.qp, a_);
  EXPECT_FALSE(a_.ctx->probe_removed());
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid_, &status, 0), pid_);
  pid_ = -1;
  EXPECT_TRUE(a_.ctx->probe_removed());
  Sge sg{a_.addr(0), 64, a_.mr->lkey()};
  SendWr s;
  s.sg_list = &sg;
  s.num_sge = 1;
  const SendWr* bad = nullptr;
  EXPECT_EQ(a_.qp->post_send(s, &bad), -ENODEV);
  EXPECT_EQ(bad, &s);
  WorkCompletion wc;
  EXPECT_EQ(a_.cq->poll(&wc, 1), -ENODEV);
  QpAttr q;
  EXPECT_EQ(a_.qp->query(&q), -ENODEV);
  EXPECT_FALSE(a_.ctx->alloc_pd().ok());
  const auto t0 = std::chrono::steady_clock::now();
  TearDown();  // destroys everything against the dead device
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

}  // namespace
}  // namespace pollux::rdma

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: process_test PATH/TO/pollux-rnic\n");
    return 2;
  }
  pollux::rdma::g_binary = argv[1];
  return RUN_ALL_TESTS();
}
