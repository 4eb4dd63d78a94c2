// In the QEMU guest, on soft-RoCE (guest/rxe.sh: rxe0, RXE_ADDR): driver/rdma's libibverbs
// provider and fabric/rdma's rdma_cm connection manager against a real verbs stack — two QPs of
// the one device connected through librdmacm in this process, then the verbs' semantics as
// rxe gives them: SEND/RECV with immediate data, RDMA WRITE (with immediate), RDMA READ, a READ
// beyond the remote MR ending in a remote access error that moves the QP to ERR and flushes
// what follows, the CM's private data both ways, a reject with private data, an address nobody
// listens on, a disconnect seen by the peer, and calls the provider refuses.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driver/env/memory_registry.h"
#include "driver/rdma/ibverbs_provider.h"
#include "fabric/rdma/device.h"
#include "fabric/rdma/rdma_cm.h"

namespace pollux::fabric::rdma {
namespace {

namespace v = pollux::rdma;

std::string rxe_addr() {
  const char* a = std::getenv("RXE_ADDR");
  return a != nullptr && *a != '\0' ? a : "10.99.0.1";
}

// Polls `cq` until one completion arrives (5 s at most).
bool wait_wc(v::Cq& cq, v::WorkCompletion* wc) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    const int n = cq.poll(wc, 1);
    if (n < 0) return false;
    if (n == 1) return true;
  }
  return false;
}

// Polls `id` (and the listener, for the passive side's new id) until an event (5 s at most).
CmEvent next_event(CmId& id) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    CmEvent e = id.poll();
    if (e.type != CmEventType::kNone) return e;
    id.wait(std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count() +
            10'000'000);
  }
  return CmEvent{};
}

class Ibverbs : public ::testing::Test {
 protected:
  static constexpr std::size_t kBuf = 64 * 1024;

  void SetUp() override {
    auto ctx = open_rdma_device("ibverbs:rxe0", registry_);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    ctx_ = std::move(ctx).value();
    ASSERT_NE(v::ibverbs_context(*ctx_), nullptr);
    auto cm = make_rdma_cm(*ctx_, timing_);
    ASSERT_TRUE(cm.ok()) << cm.error().message;
    cm_ = std::move(cm).value();
    EXPECT_STREQ(cm_->kind(), "rdma_cm");
    pd_ = ctx_->alloc_pd().value();
    for (int i = 0; i < 2; ++i) {
      auto cq = ctx_->create_cq(256);
      ASSERT_TRUE(cq.ok()) << cq.error().message;
      cq_[i] = std::move(cq).value();
      EXPECT_GE(cq_[i]->capacity(), 256u);
      v::QpInitAttr init;
      init.send_cq = init.recv_cq = cq_[i].get();
      init.cap = v::QpCap{64, 64, 2, 2};
      auto qp = ctx_->create_qp(*pd_, init);
      ASSERT_TRUE(qp.ok()) << qp.error().message;
      qp_[i] = std::move(qp).value();
      buf_[i].assign(kBuf, static_cast<uint8_t>(0xa0 + i));
      auto mr =
          ctx_->reg_mr(*pd_, buf_[i].data(), kBuf,
                       v::access::kLocalWrite | v::access::kRemoteWrite | v::access::kRemoteRead);
      ASSERT_TRUE(mr.ok()) << mr.error().message;
      mr_[i] = std::move(mr).value();
    }
    auto l = cm_->listen("ipv4", rxe_addr(), "0");  // an ephemeral port
    ASSERT_TRUE(l.ok()) << l.error().message;
    listener_ = std::move(l).value();
    ASSERT_NE(listener_->port(), 0);
  }

  void TearDown() override {
    active_.reset();
    passive_.reset();
    listener_.reset();
    for (int i = 0; i < 2; ++i) {
      qp_[i].reset();
      mr_[i].reset();
      cq_[i].reset();
    }
    pd_.reset();
    cm_.reset();
    ctx_.reset();
  }

  // REQ from QP 0 (active) with `req`, the passive side's request read; QP 1 not moved yet.
  CmEvent request(const std::string& req) {
    auto a = cm_->connect(rxe_addr(), std::to_string(listener_->port()),
                          CmQpInfo{qp_[0]->qp_num(), 0, 0}, req.data(), req.size());
    EXPECT_TRUE(a.ok()) << a.error().message;
    if (!a.ok()) return CmEvent{};
    active_ = std::move(a).value();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!passive_ && std::chrono::steady_clock::now() < end) {
      EXPECT_EQ(active_->poll().type, CmEventType::kNone);  // resolving, then the REQ
      passive_ = listener_->get_request();
    }
    EXPECT_NE(passive_, nullptr) << "no connect request reached the listener";
    return passive_ ? next_event(*passive_) : CmEvent{};
  }

  // The whole exchange: request, accept with `rep`, established both sides.
  void connect(const std::string& req = "hello", const std::string& rep = "world") {
    const CmEvent r = request(req);
    ASSERT_EQ(r.type, CmEventType::kConnectRequest);
    ASSERT_GE(r.private_data_len, req.size());
    EXPECT_EQ(std::memcmp(r.private_data, req.data(), req.size()), 0);
    EXPECT_EQ(r.peer.qp_num, qp_[0]->qp_num());
    ASSERT_EQ(passive_->ready_qp(*qp_[1], r, 0, timing_), 0);
    ASSERT_EQ(passive_->accept(CmQpInfo{qp_[1]->qp_num(), 0, 0}, rep.data(), rep.size()), 0);
    const CmEvent a = next_event(*active_);
    ASSERT_EQ(a.type, CmEventType::kConnectResponse)
        << to_string(a.type) << " " << active_->reason();
    ASSERT_GE(a.private_data_len, rep.size());
    EXPECT_EQ(std::memcmp(a.private_data, rep.data(), rep.size()), 0);
    EXPECT_EQ(a.peer.qp_num, qp_[1]->qp_num());
    ASSERT_EQ(active_->ready_qp(*qp_[0], a, 0, timing_), 0);
    ASSERT_EQ(active_->establish(), 0);
    EXPECT_EQ(next_event(*passive_).type, CmEventType::kEstablished);
  }

  v::Sge sge(int i, std::size_t off, uint32_t len) {
    return v::Sge{reinterpret_cast<uintptr_t>(buf_[i].data() + off), len, mr_[i]->lkey()};
  }
  uint64_t remote(int i, std::size_t off) {
    return reinterpret_cast<uintptr_t>(buf_[i].data() + off);
  }
  int post(int i, v::SendWr wr) {
    const v::SendWr* bad = nullptr;
    return qp_[i]->post_send(wr, &bad);
  }
  int recv(int i, v::Sge* s, uint64_t id) {
    v::RecvWr wr;
    wr.wr_id = id;
    wr.sg_list = s;
    wr.num_sge = s != nullptr ? 1 : 0;
    const v::RecvWr* bad = nullptr;
    return qp_[i]->post_recv(wr, &bad);
  }

  env::MemoryRegistry registry_;
  QpTiming timing_;
  std::unique_ptr<v::Context> ctx_;
  std::unique_ptr<ConnectionManager> cm_;
  std::unique_ptr<v::Pd> pd_;
  std::unique_ptr<v::Cq> cq_[2];
  std::unique_ptr<v::Qp> qp_[2];
  std::vector<uint8_t> buf_[2];
  std::unique_ptr<v::Mr> mr_[2];
  std::unique_ptr<CmListener> listener_;
  std::unique_ptr<CmId> active_, passive_;
};

TEST_F(Ibverbs, RdmaCmConnectsTwoQpsWithPrivateDataBothWays) {
  connect();
  for (int i = 0; i < 2; ++i) {
    v::QpAttr a;
    ASSERT_EQ(qp_[i]->query(&a), 0);
    EXPECT_EQ(a.qp_state, v::QpState::kRts) << "QP " << i;
    EXPECT_EQ(a.dest_qp_num, qp_[1 - i]->qp_num());
    EXPECT_GE(a.max_rd_atomic, 1) << "rdma_cm granted RDMA READs";
  }
  std::printf("rdma_cm: QPs %u <-> %u on %s, listener port %u, path MTU %u\n", qp_[0]->qp_num(),
              qp_[1]->qp_num(), rxe_addr().c_str(), listener_->port(),
              128u << static_cast<unsigned>(ctx_->attr().max_mtu));
}

TEST_F(Ibverbs, SendWithImmediateArrivesWithItsLengthAndImmediate) {
  connect();
  v::Sge rs = sge(1, 0, 4096);
  ASSERT_EQ(recv(1, &rs, 77), 0);
  std::memset(buf_[0].data(), 0x5c, 1000);
  v::Sge ss = sge(0, 0, 1000);
  v::SendWr w;
  w.wr_id = 11;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.opcode = v::WrOpcode::kSendWithImm;
  w.send_flags = v::send_flag::kSignaled;
  w.imm_data = 0x12345678;
  ASSERT_EQ(post(0, w), 0);
  v::WorkCompletion wc;
  ASSERT_TRUE(wait_wc(*cq_[1], &wc));
  EXPECT_EQ(wc.status, v::WcStatus::kSuccess) << v::to_string(wc.status);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.opcode, v::WcOpcode::kRecv);
  EXPECT_EQ(wc.byte_len, 1000u);
  EXPECT_TRUE(wc.wc_flags & v::wc_flag::kWithImm);
  EXPECT_EQ(wc.imm_data, 0x12345678u);
  EXPECT_EQ(wc.qp_num, qp_[1]->qp_num());
  EXPECT_EQ(buf_[1][999], 0x5c);
  ASSERT_TRUE(wait_wc(*cq_[0], &wc));
  EXPECT_EQ(wc.status, v::WcStatus::kSuccess);
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_EQ(wc.opcode, v::WcOpcode::kSend);
}

TEST_F(Ibverbs, WriteThenReadMoveDataByRemoteKey) {
  connect();
  for (std::size_t i = 0; i < 8192; ++i) buf_[0][i] = static_cast<uint8_t>(i * 7);
  // A chain of two: a WRITE of 8 KiB into QP 1's buffer, then a READ of it back (fenced).
  v::Sge ws = sge(0, 0, 8192), rs = sge(0, 16384, 8192);
  v::SendWr read;
  read.wr_id = 2;
  read.sg_list = &rs;
  read.num_sge = 1;
  read.opcode = v::WrOpcode::kRdmaRead;
  read.send_flags = v::send_flag::kSignaled | v::send_flag::kFence;
  read.remote_addr = remote(1, 4096);
  read.rkey = mr_[1]->rkey();
  v::SendWr write;
  write.wr_id = 1;
  write.next = &read;
  write.sg_list = &ws;
  write.num_sge = 1;
  write.opcode = v::WrOpcode::kRdmaWrite;
  write.send_flags = v::send_flag::kSignaled;
  write.remote_addr = remote(1, 4096);
  write.rkey = mr_[1]->rkey();
  ASSERT_EQ(post(0, write), 0);
  v::WorkCompletion wc[2];
  ASSERT_TRUE(wait_wc(*cq_[0], &wc[0]));
  ASSERT_TRUE(wait_wc(*cq_[0], &wc[1]));
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].opcode, v::WcOpcode::kRdmaWrite);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].opcode, v::WcOpcode::kRdmaRead);
  EXPECT_EQ(wc[1].status, v::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 4096, buf_[0].data(), 8192), 0) << "the WRITE landed";
  EXPECT_EQ(std::memcmp(buf_[0].data() + 16384, buf_[0].data(), 8192), 0) << "the READ came back";
}

TEST_F(Ibverbs, WriteWithImmediateConsumesAReceiveWithoutData) {
  connect();
  ASSERT_EQ(recv(1, nullptr, 5), 0);
  v::Sge ws = sge(0, 0, 512);
  v::SendWr w;
  w.sg_list = &ws;
  w.num_sge = 1;
  w.opcode = v::WrOpcode::kRdmaWriteWithImm;
  w.imm_data = 99;
  w.remote_addr = remote(1, 0);
  w.rkey = mr_[1]->rkey();
  ASSERT_EQ(post(0, w), 0);  // unsignaled: no completion on QP 0's side
  v::WorkCompletion wc;
  ASSERT_TRUE(wait_wc(*cq_[1], &wc));
  EXPECT_EQ(wc.status, v::WcStatus::kSuccess);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, v::WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(wc.imm_data, 99u);
  EXPECT_EQ(wc.byte_len, 512u);
  EXPECT_EQ(cq_[0]->poll(&wc, 1), 0);
}

TEST_F(Ibverbs, AReadBeyondTheRemoteMrIsARemoteAccessErrorAndTheQpFlushesTheRest) {
  connect();
  v::Sge rs = sge(0, 0, 4096);
  v::SendWr r;
  r.wr_id = 40;
  r.sg_list = &rs;
  r.num_sge = 1;
  r.opcode = v::WrOpcode::kRdmaRead;
  r.send_flags = v::send_flag::kSignaled;
  r.remote_addr = remote(1, kBuf - 1024);  // 3 KiB past the MR's end
  r.rkey = mr_[1]->rkey();
  ASSERT_EQ(post(0, r), 0);
  v::WorkCompletion wc;
  ASSERT_TRUE(wait_wc(*cq_[0], &wc));
  EXPECT_EQ(wc.wr_id, 40u);
  EXPECT_EQ(wc.status, v::WcStatus::kRemAccessErr) << v::to_string(wc.status);
  v::QpAttr a;
  ASSERT_EQ(qp_[0]->query(&a), 0);
  EXPECT_EQ(a.qp_state, v::QpState::kErr);
  // What is posted in ERR completes with a flush error (and nothing reaches the peer).
  v::Sge ws = sge(0, 0, 64);
  v::SendWr w;
  w.wr_id = 41;
  w.sg_list = &ws;
  w.num_sge = 1;
  w.opcode = v::WrOpcode::kRdmaWrite;
  w.send_flags = v::send_flag::kSignaled;
  w.remote_addr = remote(1, 0);
  w.rkey = mr_[1]->rkey();
  ASSERT_EQ(post(0, w), 0);
  ASSERT_TRUE(wait_wc(*cq_[0], &wc));
  EXPECT_EQ(wc.wr_id, 41u);
  EXPECT_EQ(wc.status, v::WcStatus::kWrFlushErr) << v::to_string(wc.status);
}

TEST_F(Ibverbs, ARejectCarriesItsPrivateData) {
  const CmEvent r = request("may I?");
  ASSERT_EQ(r.type, CmEventType::kConnectRequest);
  const uint8_t no[4] = {0, 0, 6, 0};  // an NVMe/RDMA REJECT: RECFMT 0, STS 6 (no resources)
  ASSERT_EQ(passive_->reject(no, sizeof no), 0);
  const CmEvent e = next_event(*active_);
  ASSERT_EQ(e.type, CmEventType::kRejected) << to_string(e.type) << " " << active_->reason();
  ASSERT_GE(e.private_data_len, sizeof no);
  EXPECT_EQ(std::memcmp(e.private_data, no, sizeof no), 0);
}

TEST_F(Ibverbs, AnAddressNobodyListensOnIsUnreachable) {
  const uint16_t port = static_cast<uint16_t>(listener_->port() + 1);
  auto a =
      cm_->connect(rxe_addr(), std::to_string(port), CmQpInfo{qp_[0]->qp_num(), 0, 0}, nullptr, 0);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const CmEvent e = next_event(*a.value());
  EXPECT_EQ(e.type, CmEventType::kUnreachable) << to_string(e.type);
  EXPECT_NE(a.value()->reason(), "") << "the reason is kept for messages";
  std::printf("no listener on port %u: %s\n", port, a.value()->reason().c_str());
}

TEST_F(Ibverbs, ADisconnectIsSeenByThePeer) {
  connect();
  active_->disconnect();
  EXPECT_EQ(next_event(*passive_).type, CmEventType::kDisconnected);
  EXPECT_EQ(passive_->state(), CmId::State::kClosed);
}

TEST_F(Ibverbs, TheProviderRefusesWhatVerbsRefuse) {
  // A 64-bit port address is no RoCE path: QPs here are moved by rdma_cm.
  v::QpAttr a;
  a.qp_state = v::QpState::kInit;
  EXPECT_EQ(qp_[0]->modify(a, v::qp_attr::kState | v::qp_attr::kAv), -EINVAL);
  // A QP still in RESET takes no send (libibverbs' rxe provider says why, as an errno).
  v::Sge ss = sge(0, 0, 64);
  v::SendWr w;
  w.sg_list = &ss;
  w.num_sge = 1;
  const int rc = post(0, w);
  EXPECT_LT(rc, 0);
  std::printf("post_send in RESET: %d (%s)\n", rc, std::strerror(-rc));
  // CQ sizes outside what the device allows.
  EXPECT_FALSE(ctx_->create_cq(ctx_->attr().max_cqe + 1).ok());
  EXPECT_FALSE(ctx_->create_cq(0).ok());
}

}  // namespace
}  // namespace pollux::fabric::rdma
