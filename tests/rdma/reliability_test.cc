// RC reliability and error semantics over the emulated Pollux RNIC: RNR NAK and retry (then
// success, or exhaustion), loss on the wire and go-back-N retransmission (seeded, replayable),
// retry exhaustion, remote access errors (bad rkey, READ beyond the MR, no remote-read right)
// with the QP moved to Error and outstanding work flushed on both sides, local protection and
// length errors, and CQ overflow reported as an asynchronous error.
#include <cstdlib>
#include <random>

#include "tests/rdma/rdma_test_util.h"

namespace pollux::rdma::testing {
namespace {

class Reliability : public RdmaTest {};

QpState state_of(Qp& qp) {
  QpAttr q;
  EXPECT_EQ(qp.query(&q), 0);
  return q.qp_state;
}

TEST_F(Reliability, RnrNakIsRetriedUntilAReceiveIsPosted) {
  QpOptions o;
  o.min_rnr_timer = 14;  // 1.28 ms between tries
  open_pair(o);
  fill(a_.at(0), 512, 9);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 512)}, 1), 0);
  cluster_.run_for(5'000'000);  // 5 ms: about four RNR NAKs, no receive yet
  const uint64_t naks = b_.device->nic().counters().rnr_naks_sent;
  EXPECT_GE(naks, 3u);
  EXPECT_LE(naks, 5u);
  EXPECT_EQ(a_.device->nic().counters().rnr_naks_received, naks);
  WorkCompletion wc;
  EXPECT_EQ(a_.cq->poll(&wc, 1), 0);  // still waiting
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 512)}, 5), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 512), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
}

TEST_F(Reliability, RnrRetryExhaustionFailsTheSendAndFlushesTheRest) {
  QpOptions o;
  o.rnr_retry = 2;
  open_pair(o);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 2, 0, 0, 0, 0), 0);  // unsignaled
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  EXPECT_EQ(tx[0].wr_id, 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kRnrRetryExcErr) << to_string(tx[0].status);
  EXPECT_EQ(tx[1].wr_id, 2u);  // errors complete even unsignaled WRs
  EXPECT_EQ(tx[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(b_.device->nic().counters().rnr_naks_sent, 3u);  // the first try and two retries
  EXPECT_EQ(state_of(*a_.qp), QpState::kErr);
  EXPECT_EQ(state_of(*b_.qp), QpState::kRts);  // the responder did nothing wrong
  // Work posted in Error completes at once, flushed.
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 3), 0);
  tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kWrFlushErr);
}

TEST_F(Reliability, ADroppedPacketIsRetransmittedAfterTheTimeout) {
  QpOptions o;
  o.mtu = Mtu::k256;
  open_pair(o);
  fill(a_.at(0), 2048, 10);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  cluster_.wire().drop_packet(cluster_.wire().stats().sent + 3);  // the 4th of 8 data packets
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 2048)}, 1), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rx[0].byte_len, 2048u);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 2048), 0);
  // The gap was NAKed once (PSN sequence error) and the requester went back to it.
  EXPECT_EQ(b_.device->nic().counters().seq_naks_sent, 1u);
  EXPECT_GE(a_.device->nic().counters().retransmitted_packets, 5u);
  ASSERT_EQ(drain(a_).size(), 1u);
}

TEST_F(Reliability, ALostAckIsRecoveredByTimeoutAndDuplicateDetection) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 64)}, 1), 0);
  cluster_.wire().drop_packet(cluster_.wire().stats().sent + 1);  // the ACK
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 1), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 1u);
  EXPECT_EQ(b_.device->nic().counters().duplicate_requests, 1u);
  EXPECT_EQ(drain(b_).size(), 1u);  // delivered once, not twice
}

// Several SENDs in flight meet an empty receive queue: the first is RNR NAKed, the ones
// behind it are dropped quietly (no PSN-sequence NAK), so not even a retry count of zero is
// touched; all complete once receives are posted.
TEST_F(Reliability, RnrWithPipelinedSendsCostsNoTransportRetries) {
  QpOptions o;
  o.retry_cnt = 0;
  open_pair(o);
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(i * 100, 100)}, i), 0);
  cluster_.run_for(100'000);  // several RNR rounds (10 us timer)
  EXPECT_GE(b_.device->nic().counters().rnr_naks_sent, 2u);
  EXPECT_EQ(b_.device->nic().counters().seq_naks_sent, 0u);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(i * 128, 128)}, 10 + i), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 4u);
  for (auto& w : tx) EXPECT_EQ(w.status, WcStatus::kSuccess) << to_string(w.status);
  EXPECT_EQ(drain(b_).size(), 4u);
}

// The middle response of a 3-packet READ is lost: the later one is ignored, the timeout
// re-issues the READ from the missing PSN (with the VA moved on), the data is whole.
TEST_F(Reliability, ALostReadResponseIsRequestedAgainFromWhereItWasMissing) {
  QpOptions o;
  o.mtu = Mtu::k1024;
  open_pair(o);
  fill(b_.at(0), 3000, 11);
  cluster_.wire().record_trace(true);
  // Packets: request (0), responses first (1), middle (2), last (3).
  cluster_.wire().drop_packet(cluster_.wire().stats().sent + 2);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 3000)}, 1, b_.addr(0), b_.mr->rkey()),
            0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 3000), 0);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 1u);
  // The second request names the second packet's PSN; its responses are First, Last.
  const auto& t = cluster_.wire().trace();
  ASSERT_GE(t.size(), 7u);
  EXPECT_NE(t[4].find("1->2 op=0x0c psn=" + std::to_string(1000 + a_.qp->qp_num() + 1)),
            std::string::npos)
      << t[4];
  EXPECT_NE(t[5].find("2->1 op=0x0d"), std::string::npos) << t[5];
  EXPECT_NE(t[6].find("2->1 op=0x0f"), std::string::npos) << t[6];
}

// A fenced SEND waits until the READ before it has completed.
TEST_F(Reliability, AFencedSendWaitsForTheReadBeforeIt) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(8192, 64)}, 1), 0);
  cluster_.wire().record_trace(true);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 64)}, 1, b_.addr(0), b_.mr->rkey()),
            0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 2, 0, 0, 0,
                      send_flag::kSignaled | send_flag::kFence),
            0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  const auto& t = cluster_.wire().trace();
  ASSERT_EQ(t.size(), 4u);  // READ request, READ response, SEND, ACK
  EXPECT_NE(t[0].find("op=0x0c"), std::string::npos);
  EXPECT_NE(t[1].find("op=0x10"), std::string::npos);
  EXPECT_NE(t[2].find("op=0x04"), std::string::npos);
}

TEST_F(Reliability, RetryExhaustionOnADeadLink) {
  QpOptions o;
  o.retry_cnt = 3;
  open_pair(o);
  cluster_.wire().set_faults({1.0, 0, 0, 0, 0});
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, 64)}, 1, b_.addr(0), b_.mr->rkey()),
            0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kRetryExcErr) << to_string(tx[0].status);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 4u);  // the first try and three retries
  EXPECT_EQ(state_of(*a_.qp), QpState::kErr);
}

// A link flap shorter than the retries last is ridden out by retransmission; one longer
// than timeout x (retry_cnt + 1) fails the QP with RETRY_EXC_ERR.
TEST_F(Reliability, ALinkFlapIsRiddenOutOrFailsTheQpByItsLength) {
  QpOptions o;
  o.timeout = 10;  // 4.19 ms
  o.retry_cnt = 3;
  open_pair(o);
  fill(a_.at(0), 4096, 15);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  cluster_.wire().set_link_up(b_.ctx->port_address(), false);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 4096)}, 1), 0);
  cluster_.run_for(10'000'000);  // 10 ms down: timeouts at 4.2 and 8.4 ms retransmit into it
  cluster_.wire().set_link_up(b_.ctx->port_address(), true);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 3u);  // the third (12.6 ms) gets through
  ASSERT_EQ(drain(b_).size(), 1u);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 4096), 0);
  // Down for good: 4 timeouts (the first try and 3 retries), then the QP fails.
  cluster_.wire().set_link_up(b_.ctx->port_address(), false);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, 64)}, 2, b_.addr(0), b_.mr->rkey()),
            0);
  tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 3u + 4u);
  EXPECT_GE(cluster_.now_ns(), 10'000'000u + 4 * (4096ull << 10));
}

TEST_F(Reliability, BadRkeyIsARemoteAccessErrorAndBothSidesFlush) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 64)}, 50), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, 64)}, 1, b_.addr(0),
                      b_.mr->rkey() ^ 0x100),
            0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 2), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  EXPECT_EQ(tx[0].status, WcStatus::kRemAccessErr) << to_string(tx[0].status);
  EXPECT_EQ(tx[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(state_of(*a_.qp), QpState::kErr);
  // The responder moved to Error too, flushed its receive and said why.
  EXPECT_EQ(state_of(*b_.qp), QpState::kErr);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].wr_id, 50u);
  EXPECT_EQ(rx[0].status, WcStatus::kWrFlushErr);
  AsyncEvent ev;
  ASSERT_TRUE(b_.ctx->get_async_event(&ev));
  EXPECT_EQ(ev.type, EventType::kQpAccessErr);
  EXPECT_EQ(ev.resource, b_.qp->qp_num());
  EXPECT_FALSE(b_.ctx->get_async_event(&ev));
}

TEST_F(Reliability, ReadBeyondTheMrIsARemoteAccessError) {
  open_pair();
  auto small = b_.ctx->reg_mr(*b_.pd, b_.at(4096), 4096, access::kLocalWrite | access::kRemoteRead);
  ASSERT_TRUE(small.ok());
  const uint32_t rkey = small.value()->rkey();
  // Inside: fine. One byte past the end: remote access error.
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 4096)}, 1, b_.addr(4096), rkey), 0);
  ASSERT_EQ(drain(a_)[0].status, WcStatus::kSuccess);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 4096)}, 2, b_.addr(4097), rkey), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 8)}, 3, b_.addr(4096), rkey), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  EXPECT_EQ(tx[0].wr_id, 2u);
  EXPECT_EQ(tx[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(tx[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(state_of(*b_.qp), QpState::kErr);
  small.value().reset();
}

TEST_F(Reliability, ReadWithoutRemoteReadRightIsRefused) {
  open_pair();
  auto wo = b_.ctx->reg_mr(*b_.pd, b_.at(0), 4096, access::kLocalWrite | access::kRemoteWrite);
  ASSERT_TRUE(wo.ok());
  ASSERT_EQ(
      post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 64)}, 1, b_.addr(0), wo.value()->rkey()),
      0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kRemAccessErr);
  wo.value().reset();
}

TEST_F(Reliability, BadLkeyIsALocalProtectionError) {
  open_pair();
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {Sge{a_.addr(0), 64, a_.mr->lkey() + 0x100}}, 1), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(state_of(*a_.qp), QpState::kErr);
  EXPECT_EQ(cluster_.wire().stats().sent, 0u);  // nothing left the NIC
}

TEST_F(Reliability, ReceiveTooSmallIsALengthErrorOnBothSides) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 100)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 101)}, 1), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].status, WcStatus::kLocLenErr);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kRemInvReqErr);
}

TEST_F(Reliability, CqOverflowIsAnAsyncErrorAndTheQpFails) {
  QpOptions o;
  o.cq_entries = 2;
  open_pair(o);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(i * 64, 64)}, i), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, i), 0);
  cluster_.run_until_idle();
  AsyncEvent ev;
  ASSERT_TRUE(a_.ctx->get_async_event(&ev));
  EXPECT_EQ(ev.type, EventType::kCqErr);
  EXPECT_EQ(ev.resource, a_.cq->handle());
  ASSERT_TRUE(a_.ctx->get_async_event(&ev));
  EXPECT_EQ(ev.type, EventType::kQpFatal);
  EXPECT_EQ(ev.resource, a_.qp->qp_num());
  EXPECT_EQ(a_.device->nic().counters().cq_overflows, 1u);
  EXPECT_EQ(state_of(*a_.qp), QpState::kErr);
  // The two entries that fitted are intact.
  WorkCompletion wc[4];
  ASSERT_EQ(a_.cq->poll(wc, 4), 2);
  EXPECT_EQ(wc[0].wr_id, 0u);
  EXPECT_EQ(wc[1].wr_id, 1u);
}

// ------------------------------------------------------------------- seeded loss ---
// Of the trace lines (not the bytes: buffer addresses in RETHs differ from run to run).
uint64_t fnv(const std::vector<std::string>& lines) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string& l : lines)
    for (char c : l + "\n") h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

struct LossyRun {
  uint64_t retransmitted = 0;
  std::vector<std::string> trace;  // time, ports, opcode, PSN, length and fate of every packet
};

class LossyWire : public RdmaTest {
 protected:
  static constexpr uint64_t kSeed = 0x19;
  LossyWire() : RdmaTest(seed(), emu::rnic::WireFaults{0.05, 0.02, 0.02, 0.05, 3000}) {}
  static uint64_t seed() {
    const char* env = std::getenv("POLLUX_SEED");
    return env != nullptr ? std::strtoull(env, nullptr, 0) : kSeed;
  }

  // 300 random SENDs, WRITEs and READs over a wire that drops, corrupts, duplicates and
  // reorders packets: every one completes successfully with its data intact.
  LossyRun run_lossy(emu::rnic::Cluster& cluster, Host& a, Host& b, uint64_t seed) {
    std::mt19937_64 rng(seed);
    cluster.wire().record_trace(true);
    LossyRun r;
    for (int i = 0; i < 300; ++i) {
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % 9000);
      const int kind = static_cast<int>(rng() % 3);
      const std::size_t src = 0, dst = 200000;
      for (uint32_t k = 0; k < len; ++k) a.at(src)[k] = static_cast<uint8_t>(rng());
      for (uint32_t k = 0; k < len; ++k) b.at(400000)[k] = static_cast<uint8_t>(rng());
      if (kind == 0) {
        EXPECT_EQ(post_recv(*b.qp, {b.sge(dst, len + 10)}, i), 0);
        EXPECT_EQ(post_send(*a.qp, WrOpcode::kSend, {a.sge(src, len)}, i), 0);
      } else if (kind == 1) {
        EXPECT_EQ(
            post_send(*a.qp, WrOpcode::kRdmaWrite, {a.sge(src, len)}, i, b.addr(dst), b.mr->rkey()),
            0);
      } else {
        EXPECT_EQ(post_send(*a.qp, WrOpcode::kRdmaRead, {a.sge(src, len)}, i, b.addr(400000),
                            b.mr->rkey()),
                  0);
      }
      cluster.run_until_idle(60'000'000'000ull);
      WorkCompletion wc[4];
      const int n = a.cq->poll(wc, 4);
      EXPECT_EQ(n, 1) << "op " << i;
      if (n != 1) return r;
      EXPECT_EQ(wc[0].status, WcStatus::kSuccess) << "op " << i << ": " << to_string(wc[0].status);
      if (kind == 0) {
        WorkCompletion rwc[4];
        EXPECT_EQ(b.cq->poll(rwc, 4), 1);
        EXPECT_EQ(rwc[0].byte_len, len);
      }
      const uint8_t* want = kind == 2 ? b.at(400000) : a.at(src);
      const uint8_t* got = kind == 2 ? a.at(src) : b.at(dst);
      EXPECT_EQ(std::memcmp(want, got, len), 0) << "op " << i << " kind " << kind << " len " << len;
    }
    r.retransmitted = a.device->nic().counters().retransmitted_packets;
    r.trace = cluster.wire().trace();
    return r;
  }
};

TEST_F(LossyWire, EveryOperationCompletesWithItsDataIntact) {
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed()));
  QpOptions o;
  o.timeout = 8;  // 1 ms
  o.mtu = Mtu::k1024;
  open_pair(o);
  const LossyRun r = run_lossy(cluster_, a_, b_, seed());
  const auto& w = cluster_.wire().stats();
  std::printf(
      "wire: sent %llu dropped %llu corrupted %llu duplicated %llu reordered %llu; "
      "retransmitted %llu; trace of %zu packets, FNV %016llx\n",
      (unsigned long long)w.sent, (unsigned long long)w.dropped, (unsigned long long)w.corrupted,
      (unsigned long long)w.duplicated, (unsigned long long)w.reordered,
      (unsigned long long)r.retransmitted, r.trace.size(), (unsigned long long)fnv(r.trace));
  EXPECT_GT(w.dropped, 0u);
  EXPECT_GT(w.corrupted, 0u);
  EXPECT_GT(r.retransmitted, 0u);
  EXPECT_GT(b_.device->nic().counters().icrc_errors + a_.device->nic().counters().icrc_errors, 0u);
}

// Sixteen operations in flight per QP on two QP pairs running in opposite directions over
// the faulty wire: coalesced ACKs, NAKs and timeouts with many messages outstanding, READs
// re-issued from the middle. Every operation succeeds and every byte arrives.
TEST_F(LossyWire, PipelinedOperationsInBothDirections) {
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed()));
  QpOptions o;
  o.timeout = 8;
  o.mtu = Mtu::k1024;
  o.max_rd_atomic = o.max_dest_rd_atomic = 4;
  open_pair(o);
  auto b2 = make_qp(b_, o);
  auto a2 = make_qp(a_, o);
  connect(b_, *b2, a_, *a2, o);
  connect(a_, *a2, b_, *b2, o);
  std::mt19937_64 rng(seed() * 31 + 7);
  constexpr int kDepth = 16;
  constexpr std::size_t kSlot = 12288;
  struct Op {
    int kind;
    uint32_t len;
  };
  for (int round = 0; round < 20; ++round) {
    // Direction 0: A's QP to B (src A at i*slot, dst B at 300000+i*slot); direction 1: B's
    // second QP to A (src B at 600000+i*slot, dst A at 800000+i*slot).
    Op ops[2][kDepth];
    for (int dir = 0; dir < 2; ++dir) {
      Host& req = dir == 0 ? a_ : b_;
      Host& rsp = dir == 0 ? b_ : a_;
      Qp& rq_qp = dir == 0 ? *a_.qp : *b2;
      Qp& rsp_qp = dir == 0 ? *b_.qp : *a2;
      const std::size_t src0 = dir == 0 ? 0 : 600000, dst0 = dir == 0 ? 300000 : 800000;
      for (int i = 0; i < kDepth; ++i) {
        Op& op = ops[dir][i];
        op.kind = static_cast<int>(rng() % 3);
        op.len = 1 + static_cast<uint32_t>(rng() % (kSlot - 16));
        const std::size_t src = src0 + i * kSlot, dst = dst0 + i * kSlot;
        fill(req.at(src), op.len, static_cast<uint32_t>(rng()));
        fill(rsp.at(dst), op.len, static_cast<uint32_t>(rng()));
        const uint64_t id = static_cast<uint64_t>(dir) << 32 | static_cast<uint64_t>(i);
        if (op.kind == 0) {
          ASSERT_EQ(post_recv(rsp_qp, {rsp.sge(dst, op.len)}, id), 0);
          ASSERT_EQ(post_send(rq_qp, WrOpcode::kSend, {req.sge(src, op.len)}, id), 0);
        } else if (op.kind == 1) {
          ASSERT_EQ(post_send(rq_qp, WrOpcode::kRdmaWrite, {req.sge(src, op.len)}, id,
                              rsp.addr(dst), rsp.mr->rkey()),
                    0);
        } else {
          ASSERT_EQ(post_send(rq_qp, WrOpcode::kRdmaRead, {req.sge(src, op.len)}, id, rsp.addr(dst),
                              rsp.mr->rkey()),
                    0);
        }
      }
    }
    cluster_.run_until_idle(600'000'000'000ull);
    for (Host* h : {&a_, &b_}) {
      WorkCompletion wc[64];
      int seen = 0;
      for (int n; (n = h->cq->poll(wc, 64)) > 0;) {
        for (int k = 0; k < n; ++k) {
          ASSERT_EQ(wc[k].status, WcStatus::kSuccess)
              << "round " << round << " wr " << std::hex << wc[k].wr_id << ": "
              << to_string(wc[k].status);
        }
        seen += n;
      }
      // Each host requested 16 and received the other direction's SENDs.
      int sends_in = 0;
      for (const Op& op : ops[h == &a_ ? 1 : 0]) sends_in += op.kind == 0;
      EXPECT_EQ(seen, kDepth + sends_in) << "round " << round;
    }
    for (int dir = 0; dir < 2; ++dir) {
      const Host& req = dir == 0 ? a_ : b_;
      const Host& rsp = dir == 0 ? b_ : a_;
      const std::size_t src0 = dir == 0 ? 0 : 600000, dst0 = dir == 0 ? 300000 : 800000;
      for (int i = 0; i < kDepth; ++i) {
        const std::size_t src = src0 + i * kSlot, dst = dst0 + i * kSlot;
        ASSERT_EQ(std::memcmp(req.at(src), rsp.at(dst), ops[dir][i].len), 0)
            << "round " << round << " dir " << dir << " op " << i << " kind " << ops[dir][i].kind;
      }
    }
  }
  std::printf("retransmitted %llu + %llu packets, %llu timeouts\n",
              (unsigned long long)a_.device->nic().counters().retransmitted_packets,
              (unsigned long long)b_.device->nic().counters().retransmitted_packets,
              (unsigned long long)(a_.device->nic().counters().timeouts +
                                   b_.device->nic().counters().timeouts));
  EXPECT_GT(a_.device->nic().counters().retransmitted_packets, 0u);
  a2.reset();
  b2.reset();
}

// SENDs in flight over the faulty wire meet a receive queue that runs dry and is refilled
// later: RNR NAKs, losses and retransmissions interleave; every message arrives once, in order.
TEST_F(LossyWire, PipelinedSendsWithLateReceives) {
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed()));
  QpOptions o;
  o.timeout = 8;
  o.min_rnr_timer = 1;
  open_pair(o);
  std::mt19937_64 rng(seed() * 17 + 3);
  constexpr int kDepth = 16;
  constexpr std::size_t kSlot = 8192;
  uint64_t next = 0;
  for (int round = 0; round < 10; ++round) {
    uint32_t len[kDepth];
    const int early = static_cast<int>(rng() % (kDepth + 1));
    for (int i = 0; i < kDepth; ++i) {
      len[i] = static_cast<uint32_t>(rng() % kSlot);
      fill(a_.at(i * kSlot), len[i], static_cast<uint32_t>(rng()));
      if (i < early) {
        ASSERT_EQ(post_recv(*b_.qp, {b_.sge(300000 + i * kSlot, kSlot)}, next + i), 0);
      }
      ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(i * kSlot, len[i])}, next + i), 0);
    }
    cluster_.run_for(static_cast<uint64_t>(rng() % 200'000));
    for (int i = early; i < kDepth; ++i)
      ASSERT_EQ(post_recv(*b_.qp, {b_.sge(300000 + i * kSlot, kSlot)}, next + i), 0);
    auto tx = drain(a_, kDepth + 1);
    auto rx = drain(b_, kDepth + 1);
    ASSERT_EQ(tx.size(), static_cast<std::size_t>(kDepth)) << "round " << round;
    ASSERT_EQ(rx.size(), static_cast<std::size_t>(kDepth)) << "round " << round;
    for (int i = 0; i < kDepth; ++i) {
      ASSERT_EQ(tx[i].status, WcStatus::kSuccess)
          << "round " << round << ": " << to_string(tx[i].status);
      ASSERT_EQ(rx[i].status, WcStatus::kSuccess)
          << "round " << round << ": " << to_string(rx[i].status);
      ASSERT_EQ(rx[i].wr_id, next + i);
      ASSERT_EQ(rx[i].byte_len, len[i]);
      ASSERT_EQ(std::memcmp(a_.at(i * kSlot), b_.at(300000 + i * kSlot), len[i]), 0)
          << "round " << round;
    }
    next += kDepth;
  }
  std::printf("RNR NAKs %llu, retransmitted %llu\n",
              (unsigned long long)b_.device->nic().counters().rnr_naks_sent,
              (unsigned long long)a_.device->nic().counters().retransmitted_packets);
  EXPECT_GT(b_.device->nic().counters().rnr_naks_sent, 0u);
}

// The same seed gives the same packet trace: every packet at the same virtual time with the
// same fate. (Not the same bytes: the second pair's buffers, named in RETHs, lie elsewhere.)
TEST_F(LossyWire, TheSameSeedReplaysTheSameTrace) {
  QpOptions o;
  o.timeout = 8;
  open_pair(o);
  const LossyRun first = run_lossy(cluster_, a_, b_, seed());
  // A second, independent pair of hosts on a fresh cluster with the same seed.
  emu::rnic::Cluster again(seed(), emu::rnic::WireFaults{0.05, 0.02, 0.02, 0.05, 3000});
  Host a2, b2;
  open(a2, o, &again);
  open(b2, o, &again);
  connect(a2, *a2.qp, b2, *b2.qp, o);
  connect(b2, *b2.qp, a2, *a2.qp, o);
  const LossyRun second = run_lossy(again, a2, b2, seed());
  EXPECT_GT(first.trace.size(), 1000u);
  EXPECT_EQ(first.trace, second.trace);
  EXPECT_EQ(first.retransmitted, second.retransmitted);
}

}  // namespace
}  // namespace pollux::rdma::testing
