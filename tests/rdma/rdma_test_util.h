// Two (or more) hosts, each with its own memory registry, each driving an emulated Pollux
// RNIC through driver/rdma over an in-process vfio-user connection; the NICs share a Cluster
// (wire + virtual clock). Tests post and poll on the host side and advance the cluster.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/cluster.h"

namespace pollux::rdma::testing {

inline constexpr std::size_t kBufBytes = 1 << 20;

struct Host {
  env::MemoryRegistry registry;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;  // the whole buffer, every access

  uint8_t* at(std::size_t off) const { return static_cast<uint8_t*>(buf->data()) + off; }
  uint64_t addr(std::size_t off) const { return reinterpret_cast<uintptr_t>(at(off)); }
  Sge sge(std::size_t off, uint32_t len) const { return Sge{addr(off), len, mr->lkey()}; }
  emu::rnic::RnicDevice* device = nullptr;
};

struct QpOptions {
  Mtu mtu = Mtu::k1024;
  uint8_t timeout = 10;  // 4.2 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t max_rd_atomic = 4;
  uint8_t max_dest_rd_atomic = 4;
  uint32_t access = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
  uint32_t cq_entries = 256;
  QpCap cap{256, 256, 6, 6};
};

class RdmaTest : public ::testing::Test {
 protected:
  explicit RdmaTest(uint64_t seed = 1, emu::rnic::WireFaults faults = {})
      : cluster_(seed, faults) {}
  // Timed NICs and network (emulator/rnic/nic_profile.h).
  RdmaTest(uint64_t seed, const emu::rnic::NicProfile& profile, emu::rnic::WireFaults faults = {})
      : cluster_(seed, profile, faults) {}

  // A host with its own NIC on `cluster` (the fixture's by default).
  void open(Host& h, const QpOptions& o = {}, emu::rnic::Cluster* cluster = nullptr) {
    h.device = (cluster != nullptr ? cluster : &cluster_)->add_nic();
    ASSERT_NE(h.device, nullptr);
    auto pci = env::VfioUserDevice::attach(h.device->connect(), h.registry);
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    auto ctx = open_rnic(std::move(pci).value(), h.registry, rnic_options_);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    h.ctx = std::move(ctx).value();
    auto buf = env::DmaRegion::create(h.registry, kBufBytes, env::DmaOptions{false});
    ASSERT_TRUE(buf.ok()) << buf.error().message;
    h.buf = std::move(buf).value();
    auto pd = h.ctx->alloc_pd();
    ASSERT_TRUE(pd.ok());
    h.pd = std::move(pd).value();
    auto cq = h.ctx->create_cq(o.cq_entries);
    ASSERT_TRUE(cq.ok()) << cq.error().message;
    h.cq = std::move(cq).value();
    auto mr = h.ctx->reg_mr(*h.pd, h.buf->data(), kBufBytes,
                            access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    h.mr = std::move(mr).value();
    h.qp = make_qp(h, o);
  }

  std::unique_ptr<Qp> make_qp(Host& h, const QpOptions& o, Srq* srq = nullptr) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = h.cq.get();
    init.srq = srq;
    init.cap = o.cap;
    auto qp = h.ctx->create_qp(*h.pd, init);
    EXPECT_TRUE(qp.ok()) << qp.error().message;
    return qp.ok() ? std::move(qp).value() : nullptr;
  }

  // RESET -> INIT -> RTR -> RTS against the peer's QP.
  static void connect(Host& /*h*/, Qp& qp, const Host& peer, const Qp& peer_qp,
                      const QpOptions& o) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = o.access;
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort |
                               qp_attr::kAccessFlags),
              0);
    a.qp_state = QpState::kRtr;
    a.dest_address = peer.ctx->port_address();
    a.dest_qp_num = peer_qp.qp_num();
    a.path_mtu = o.mtu;
    a.rq_psn = 1000 + peer_qp.qp_num();
    a.max_dest_rd_atomic = o.max_dest_rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                               qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer),
              0);
    a.qp_state = QpState::kRts;
    a.sq_psn = 1000 + qp.qp_num();
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.max_rd_atomic;
    ASSERT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout |
                               qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic),
              0);
  }

  void open_pair(const QpOptions& o = {}) {
    open(a_, o);
    open(b_, o);
    connect(a_, *a_.qp, b_, *b_.qp, o);
    connect(b_, *b_.qp, a_, *a_.qp, o);
  }

  // Runs the cluster until it is idle, then polls up to `want` completions (more calls if the
  // CQ holds more than fit). Virtual time only: a long RNR or ACK timeout costs nothing.
  std::vector<WorkCompletion> drain(Host& h, std::size_t want = 64) {
    cluster_.run_until_idle(600'000'000'000ull);
    std::vector<WorkCompletion> out;
    WorkCompletion wc[16];
    while (out.size() < want) {
      const int n = h.cq->poll(wc, 16);
      EXPECT_GE(n, 0);
      if (n <= 0) break;
      out.insert(out.end(), wc, wc + n);
    }
    return out;
  }

  int post_send(Qp& qp, WrOpcode op, std::vector<Sge> sges, uint64_t wr_id, uint64_t raddr = 0,
                uint32_t rkey = 0, uint32_t imm = 0, uint32_t flags = send_flag::kSignaled) {
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    wr.send_flags = flags;
    wr.imm_data = imm;
    wr.remote_addr = raddr;
    wr.rkey = rkey;
    const SendWr* bad = nullptr;
    return qp.post_send(wr, &bad);
  }
  int post_recv(Qp& qp, std::vector<Sge> sges, uint64_t wr_id) {
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    const RecvWr* bad = nullptr;
    return qp.post_recv(wr, &bad);
  }

  static void fill(uint8_t* p, std::size_t n, uint32_t seed) {
    for (std::size_t i = 0; i < n; ++i)
      p[i] = static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 8)) ^ seed);
  }

  emu::rnic::Cluster cluster_;
  RnicOptions rnic_options_;  // for the hosts opened from now on
  Host a_, b_;
};

}  // namespace pollux::rdma::testing
