// driver/rdma over the emulated Pollux RNIC, happy paths and the QP state machine: device
// bring-up, SEND/RECV with and without immediate, RDMA WRITE (with immediate), RDMA READ,
// segmentation across the path MTU, ring wrap-around (CQ phase, SQ slots freed by later
// completions), the outstanding-READ limit and shared receive queues.
#include "tests/rdma/rdma_test_util.h"

namespace pollux::rdma::testing {
namespace {

class Verbs : public RdmaTest {};

TEST_F(Verbs, OpenQueriesTheDeviceAndEnablesTheFunction) {
  open(a_);
  const DeviceAttr& d = a_.ctx->attr();
  EXPECT_EQ(d.max_qp, spec::rnic::kMaxQp - spec::rnic::kFirstQpn);
  EXPECT_EQ(d.max_sge, spec::rnic::kMaxSge);
  EXPECT_EQ(d.max_mtu, Mtu::k4096);
  EXPECT_EQ(d.port_address, 1u);
  EXPECT_TRUE(a_.device->config_space().bus_master());
  EXPECT_GE(a_.qp->qp_num(), spec::rnic::kFirstQpn);
  QpAttr q;
  ASSERT_EQ(a_.qp->query(&q), 0);
  EXPECT_EQ(q.qp_state, QpState::kReset);
}

TEST_F(Verbs, StateMachineRefusesCallsInTheWrongState) {
  open(a_);
  open(b_);
  Qp& qp = *a_.qp;
  QpAttr a;
  // RESET: no sends, no receives, only RESET->INIT (with all it requires).
  EXPECT_EQ(post_send(qp, WrOpcode::kSend, {a_.sge(0, 8)}, 1), -EINVAL);
  EXPECT_EQ(post_recv(qp, {a_.sge(0, 8)}, 1), -EINVAL);
  a.qp_state = QpState::kRtr;
  EXPECT_EQ(qp.modify(a, qp_attr::kState), -EINVAL);
  a.qp_state = QpState::kRts;
  EXPECT_EQ(qp.modify(a, qp_attr::kState), -EINVAL);
  a.qp_state = QpState::kInit;
  EXPECT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort),
            -EINVAL);  // no access
  EXPECT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort |
                             qp_attr::kAccessFlags | qp_attr::kSqPsn),
            -EINVAL);  // an attribute this transition does not take
  a.port_num = 2;
  EXPECT_EQ(
      qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags),
      -EINVAL);
  a.port_num = 1;
  ASSERT_EQ(
      qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags),
      0);
  // INIT: receives yes, sends no; INIT->RTS skips RTR.
  EXPECT_EQ(post_recv(qp, {a_.sge(0, 8)}, 1), 0);
  EXPECT_EQ(post_send(qp, WrOpcode::kSend, {a_.sge(0, 8)}, 1), -EINVAL);
  a.qp_state = QpState::kRts;
  EXPECT_EQ(qp.modify(a, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout |
                             qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic),
            -EINVAL);
  // INIT->RTR: a required attribute missing, then values out of range.
  a.qp_state = QpState::kRtr;
  a.dest_address = b_.ctx->port_address();
  a.dest_qp_num = b_.qp->qp_num();
  const uint32_t rtr = qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                       qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
  EXPECT_EQ(qp.modify(a, rtr & ~qp_attr::kRqPsn), -EINVAL);
  a.path_mtu = static_cast<Mtu>(6);
  EXPECT_EQ(qp.modify(a, rtr), -EINVAL);
  a.path_mtu = Mtu::k1024;
  a.rq_psn = 1u << 24;  // PSNs are 24-bit
  EXPECT_EQ(qp.modify(a, rtr), -EINVAL);
  a.rq_psn = 5;
  a.max_dest_rd_atomic = 200;
  EXPECT_EQ(qp.modify(a, rtr), -EINVAL);
  a.max_dest_rd_atomic = 1;
  ASSERT_EQ(qp.modify(a, rtr), 0);
  EXPECT_EQ(post_send(qp, WrOpcode::kSend, {a_.sge(0, 8)}, 1), -EINVAL);  // RTR cannot send
  // RTR->RTS: retry counts are 3 bits.
  a.qp_state = QpState::kRts;
  const uint32_t rts = qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout | qp_attr::kRetryCnt |
                       qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  a.retry_cnt = 8;
  EXPECT_EQ(qp.modify(a, rts), -EINVAL);
  a.retry_cnt = 7;
  // A wrong current state in the request is refused.
  a.cur_qp_state = QpState::kInit;
  EXPECT_EQ(qp.modify(a, rts | qp_attr::kCurState), -EINVAL);
  ASSERT_EQ(qp.modify(a, rts), 0);
  QpAttr q;
  ASSERT_EQ(qp.query(&q), 0);
  EXPECT_EQ(q.qp_state, QpState::kRts);
  EXPECT_EQ(q.dest_qp_num, b_.qp->qp_num());
  EXPECT_EQ(q.rq_psn, 5u);
  // RTS->RTR is not a transition; any state -> ERR and -> RESET are.
  a.qp_state = QpState::kRtr;
  EXPECT_EQ(qp.modify(a, qp_attr::kState), -EINVAL);
  a.qp_state = QpState::kErr;
  ASSERT_EQ(qp.modify(a, qp_attr::kState), 0);
  // The receive posted in INIT is flushed.
  auto wc = drain(a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kWrFlushErr);
  a.qp_state = QpState::kReset;
  ASSERT_EQ(qp.modify(a, qp_attr::kState), 0);
  ASSERT_EQ(qp.query(&q), 0);
  EXPECT_EQ(q.qp_state, QpState::kReset);
  EXPECT_EQ(post_send(qp, WrOpcode::kSend, {a_.sge(0, 8)}, 1), -EINVAL);
}

TEST_F(Verbs, SendRecvWithAndWithoutImmediate) {
  open_pair();
  fill(a_.at(0), 100, 1);
  fill(a_.at(4096), 3000, 2);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 11), 0);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(8192, 4096)}, 12), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 100)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSendWithImm, {a_.sge(4096, 3000)}, 2, 0, 0, 0xc0ffee), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 2u);
  EXPECT_EQ(rx[0].wr_id, 11u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rx[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(rx[0].byte_len, 100u);
  EXPECT_EQ(rx[0].wc_flags & wc_flag::kWithImm, 0u);
  EXPECT_EQ(rx[0].qp_num, b_.qp->qp_num());
  EXPECT_EQ(rx[1].wr_id, 12u);
  EXPECT_EQ(rx[1].byte_len, 3000u);
  EXPECT_EQ(rx[1].wc_flags & wc_flag::kWithImm, wc_flag::kWithImm);
  EXPECT_EQ(rx[1].imm_data, 0xc0ffeeu);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 100), 0);
  EXPECT_EQ(std::memcmp(a_.at(4096), b_.at(8192), 3000), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  EXPECT_EQ(tx[0].wr_id, 1u);
  EXPECT_EQ(tx[0].opcode, WcOpcode::kSend);
  EXPECT_EQ(tx[1].status, WcStatus::kSuccess);
}

// A lone work request goes to the NIC through the push window too (its WQE comes with the
// doorbell, as mlx5's BlueFlame); a chain of two is read from the ring, as BlueFlame is used
// only for one. Either way the messages arrive whole and in order.
TEST_F(Verbs, LoneWorkRequestsArePushedAndChainsAreNot) {
  rnic_options_.push_wqes = true;
  open_pair();
  fill(a_.at(0), 300, 5);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(i * 4096, 4096)}, i), 0);
  const uint64_t before = a_.device->nic().counters().pushed_wqes;
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 100)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(100, 100)}, 2), 0);
  Sge s3 = a_.sge(200, 50), s4 = a_.sge(250, 50);
  SendWr second;
  second.wr_id = 4;
  second.opcode = WrOpcode::kSend;
  second.sg_list = &s4;
  second.num_sge = 1;
  second.send_flags = send_flag::kSignaled;
  SendWr first = second;
  first.wr_id = 3;
  first.sg_list = &s3;
  first.next = &second;
  const SendWr* bad = nullptr;
  ASSERT_EQ(a_.qp->post_send(first, &bad), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 4u);
  const std::size_t offset[] = {0, 100, 200, 250}, length[] = {100, 100, 50, 50};
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rx[i].status, WcStatus::kSuccess);
    EXPECT_EQ(rx[i].wr_id, i);
    EXPECT_EQ(rx[i].byte_len, length[i]);
    EXPECT_EQ(std::memcmp(a_.at(offset[i]), b_.at(i * 4096), length[i]), 0) << i;
  }
  EXPECT_EQ(drain(a_).size(), 4u);
  EXPECT_EQ(a_.device->nic().counters().pushed_wqes - before, 2u);
}

TEST_F(Verbs, WithoutPushEveryWqeIsReadFromTheRing) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 100)}, 1), 0);
  ASSERT_EQ(drain(b_).size(), 1u);
  EXPECT_EQ(a_.device->nic().counters().pushed_wqes, 0u);
}

// 10,000 bytes at a 256-byte path MTU: 40 packets, gathered from three SGEs and scattered into
// three others of different sizes.
TEST_F(Verbs, SendSegmentsAcrossTheMtuWithScatterGather) {
  QpOptions o;
  o.mtu = Mtu::k256;
  open_pair(o);
  fill(a_.at(0), 10000, 3);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(100000, 1), b_.sge(200000, 4999), b_.sge(300000, 6000)}, 7),
            0);
  const uint64_t sent_before = cluster_.wire().stats().sent;
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend,
                      {a_.sge(0, 3333), a_.sge(3333, 3333), a_.sge(6666, 3334)}, 8),
            0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rx[0].byte_len, 10000u);
  EXPECT_EQ(b_.at(100000)[0], a_.at(0)[0]);
  EXPECT_EQ(std::memcmp(b_.at(200000), a_.at(1), 4999), 0);
  EXPECT_EQ(std::memcmp(b_.at(300000), a_.at(5000), 5000), 0);
  // 40 data packets and one ACK for the message's last packet.
  EXPECT_EQ(cluster_.wire().stats().sent - sent_before, 41u);
  EXPECT_EQ(drain(a_).size(), 1u);
}

TEST_F(Verbs, RdmaWriteAndWriteWithImmediate) {
  open_pair();
  fill(a_.at(0), 50000, 4);
  ASSERT_EQ(
      post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, 50000)}, 1, b_.addr(65536), b_.mr->rkey()),
      0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(tx[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(65536), 50000), 0);
  EXPECT_TRUE(drain(b_).empty());  // a plain WRITE is invisible to the responder's CQ
  // With immediate: consumes a receive, reports the written length and the immediate.
  ASSERT_EQ(post_recv(*b_.qp, {}, 99), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaWriteWithImm, {a_.sge(100, 5000)}, 2, b_.addr(0),
                      b_.mr->rkey(), 77),
            0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].wr_id, 99u);
  EXPECT_EQ(rx[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(rx[0].byte_len, 5000u);
  EXPECT_EQ(rx[0].imm_data, 77u);
  EXPECT_EQ(std::memcmp(a_.at(100), b_.at(0), 5000), 0);
}

// A message of 4,096 packets (1 MiB at MTU 256) is far larger than the window of
// unacknowledged packets: ACKs requested within it keep the window moving, no timeouts.
TEST_F(Verbs, MessagesLargerThanTheWindowFlowWithoutTimeouts) {
  QpOptions o;
  o.mtu = Mtu::k256;
  open_pair(o);
  fill(a_.at(0), kBufBytes, 12);
  ASSERT_EQ(
      post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, kBufBytes)}, 1, b_.addr(0), b_.mr->rkey()),
      0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess) << to_string(tx[0].status);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), kBufBytes), 0);
  EXPECT_EQ(a_.device->nic().counters().timeouts, 0u);
  EXPECT_EQ(a_.device->nic().counters().retransmitted_packets, 0u);
  // And back with a READ of the same size (responses are not windowed).
  fill(b_.at(0), kBufBytes, 13);
  ASSERT_EQ(
      post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, kBufBytes)}, 2, b_.addr(0), b_.mr->rkey()),
      0);
  tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), kBufBytes), 0);
}

TEST_F(Verbs, RdmaReadSegmentedAndZeroLength) {
  QpOptions o;
  o.mtu = Mtu::k512;
  open_pair(o);
  fill(b_.at(300000), 70000, 5);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 30000), a_.sge(500000, 40000)}, 1,
                      b_.addr(300000), b_.mr->rkey()),
            0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {}, 2, b_.addr(0), b_.mr->rkey()), 0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  EXPECT_EQ(tx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(tx[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(tx[0].byte_len, 70000u);
  EXPECT_EQ(tx[1].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(300000), 30000), 0);
  EXPECT_EQ(std::memcmp(a_.at(500000), b_.at(330000), 40000), 0);
}

// With max_rd_atomic = 2, eight READs posted at once never have more than two requests
// outstanding on the wire.
TEST_F(Verbs, OutstandingReadLimitHolds) {
  QpOptions o;
  o.max_rd_atomic = 2;
  open_pair(o);
  fill(b_.at(0), 8 * 4096, 6);
  cluster_.wire().record_trace(true);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(i * 4096, 4096)}, i, b_.addr(i * 4096),
                        b_.mr->rkey()),
              0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 8u);
  for (auto& w : tx) EXPECT_EQ(w.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 8 * 4096), 0);
  int outstanding = 0, peak = 0;
  for (const std::string& line : cluster_.wire().trace()) {
    if (line.find("1->2 op=0x0c") != std::string::npos) peak = std::max(peak, ++outstanding);
    if (line.find("2->1 op=0x0f") != std::string::npos ||
        line.find("2->1 op=0x10") != std::string::npos)
      --outstanding;
  }
  EXPECT_EQ(peak, 2);
}

// A 4-entry send queue and a 4-entry CQ, 100 messages: the CQ's phase flips 25 times, and
// unsignaled sends free their slots only when a later signaled one completes.
TEST_F(Verbs, RingsWrapAndUnsignaledSlotsAreFreedByLaterCompletions) {
  QpOptions o;
  o.cap = QpCap{4, 4, 1, 1};
  o.cq_entries = 4;
  open_pair(o);
  // Three unsignaled + one signaled fill the SQ; a fifth post finds it full.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(i * 64, 64)}, i), 0);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 8)}, i, 0, 0, 0, 0), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 8)}, 3), 0);
  EXPECT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 8)}, 4), -ENOMEM);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].wr_id, 3u);
  EXPECT_EQ(drain(b_).size(), 4u);
  for (int round = 0; round < 100; ++round) {
    fill(a_.at(0), 64, round);
    ASSERT_EQ(post_recv(*b_.qp, {b_.sge(4096, 64)}, 1000 + round), 0);
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, round), 0) << round;
    auto rx = drain(b_);
    ASSERT_EQ(rx.size(), 1u) << round;
    EXPECT_EQ(rx[0].wr_id, 1000u + round);
    ASSERT_EQ(std::memcmp(a_.at(0), b_.at(4096), 64), 0);
    ASSERT_EQ(drain(a_).size(), 1u);
  }
  EXPECT_EQ(a_.device->nic().counters().cq_overflows, 0u);
}

TEST_F(Verbs, ZeroLengthMessages) {
  open_pair();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 64)}, 1), 0);
  ASSERT_EQ(post_recv(*b_.qp, {}, 2), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {}, 10), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaWriteWithImm, {}, 11, b_.addr(0), b_.mr->rkey(), 5),
            0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 2u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rx[0].byte_len, 0u);
  EXPECT_EQ(rx[1].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(rx[1].byte_len, 0u);
  EXPECT_EQ(rx[1].imm_data, 5u);
  EXPECT_EQ(drain(a_).size(), 2u);
}

// Three NICs on one wire: A talks to B and to C on two QPs at once; an RC QP accepts packets
// only from the peer it was connected to.
TEST_F(Verbs, ThreeNicsOnOneWire) {
  QpOptions o;
  Host c;
  open(a_, o);
  open(b_, o);
  open(c, o);
  auto a2 = make_qp(a_, o);
  connect(a_, *a_.qp, b_, *b_.qp, o);
  connect(b_, *b_.qp, a_, *a_.qp, o);
  connect(a_, *a2, c, *c.qp, o);
  connect(c, *c.qp, a_, *a2, o);
  fill(a_.at(0), 8192, 8);
  ASSERT_EQ(
      post_send(*a_.qp, WrOpcode::kRdmaWrite, {a_.sge(0, 4096)}, 1, b_.addr(0), b_.mr->rkey()), 0);
  ASSERT_EQ(post_send(*a2, WrOpcode::kRdmaWrite, {a_.sge(4096, 4096)}, 2, c.addr(0), c.mr->rkey()),
            0);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 2u);
  for (auto& w : tx) EXPECT_EQ(w.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b_.at(0), a_.at(0), 4096), 0);
  EXPECT_EQ(std::memcmp(c.at(0), a_.at(4096), 4096), 0);
  // C's QP, aimed by hand at A's first QP (connected to B), is ignored there.
  QpAttr r;
  r.qp_state = QpState::kReset;
  ASSERT_EQ(c.qp->modify(r, qp_attr::kState), 0);
  connect(c, *c.qp, a_, *a_.qp, o);
  const uint64_t dropped = a_.device->nic().counters().dropped_packets;
  ASSERT_EQ(post_send(*c.qp, WrOpcode::kRdmaWrite, {c.sge(0, 64)}, 3, a_.addr(0), a_.mr->rkey()),
            0);
  cluster_.run_for(1'000'000);
  EXPECT_GT(a_.device->nic().counters().dropped_packets, dropped);
  a2.reset();
  c.qp.reset();
}

// The device boundary: with bus mastering off the NIC reaches no host memory at all.
TEST_F(Verbs, NoDmaWithoutBusMastering) {
  open_pair();
  uint16_t cmd = 0;
  ASSERT_EQ(a_.device->region_read(spec::vfio_user::region::kConfig, spec::pci::kCommand, &cmd, 2),
            0);
  cmd &= static_cast<uint16_t>(~spec::pci::command::kBusMaster);  // as the host would write it
  ASSERT_EQ(a_.device->region_write(spec::vfio_user::region::kConfig, spec::pci::kCommand, &cmd, 2),
            0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 1), 0);
  cluster_.run_until_idle();
  EXPECT_GT(a_.device->dma_refused_no_bus_master(), 0u);
  EXPECT_EQ(cluster_.wire().stats().sent, 0u);
  WorkCompletion wc;
  EXPECT_EQ(a_.cq->poll(&wc, 1), 0);  // not even a completion could be written
  // Back on, or tearing down would wait out every mailbox command (the mailbox is DMA too).
  cmd |= spec::pci::command::kBusMaster;
  ASSERT_EQ(a_.device->region_write(spec::vfio_user::region::kConfig, spec::pci::kCommand, &cmd, 2),
            0);
}

// The seam for the lockstep engine: an outside clock moves the cluster with step_at() to
// each instant next_event_ns() names, as Lockstep's add_world / add_event_source would.
TEST_F(Verbs, DrivenByAnExternalClock) {
  open_pair();
  fill(a_.at(0), 3000, 14);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 3000)}, 2), 0);
  uint64_t clock = 500;  // the engine's own time
  int jumps = 0;
  EXPECT_TRUE(cluster_.step_at(clock));  // the doorbell is seen now: packets leave
  for (uint64_t t; (t = cluster_.next_event_ns()) != UINT64_MAX && jumps < 100; ++jumps) {
    ASSERT_GE(t, clock);
    clock = t;
    cluster_.step_at(clock);
  }
  EXPECT_EQ(cluster_.now_ns(), clock);
  EXPECT_EQ(clock, 500u + 2 * 1000);  // three packets out, one ACK back: two wire latencies
  WorkCompletion wc[2];
  ASSERT_EQ(b_.cq->poll(wc, 2), 1);
  EXPECT_EQ(wc[0].byte_len, 3000u);
  ASSERT_EQ(a_.cq->poll(wc, 2), 1);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 3000), 0);
}

// A 4-entry SRQ shared by two QPs carries 40 messages: its slots are freed as completions
// come back (in any order across the QPs), so posting never runs out.
TEST_F(Verbs, SharedReceiveQueueSlotsAreReused) {
  QpOptions o;
  open(a_, o);
  open(b_, o);
  auto srq = b_.ctx->create_srq(*b_.pd, 4, 1);
  ASSERT_TRUE(srq.ok());
  auto a2 = make_qp(a_, o);
  auto b1 = make_qp(b_, o, srq.value().get());
  auto b2 = make_qp(b_, o, srq.value().get());
  connect(a_, *a_.qp, b_, *b1, o);
  connect(b_, *b1, a_, *a_.qp, o);
  connect(a_, *a2, b_, *b2, o);
  connect(b_, *b2, a_, *a2, o);
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 4; ++i) {
      Sge s = b_.sge(i * 4096, 4096);
      RecvWr wr;
      wr.wr_id = round * 4 + i;
      wr.sg_list = &s;
      wr.num_sge = 1;
      ASSERT_EQ(srq.value()->post_recv(wr, nullptr), 0) << "round " << round << " recv " << i;
    }
    // A long message on one QP and short ones on the other: completions cross.
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 4000)}, 1), 0);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(post_send(*a2, WrOpcode::kSend, {a_.sge(0, 8)}, 2), 0);
    auto rx = drain(b_);
    ASSERT_EQ(rx.size(), 4u) << "round " << round;
    for (auto& w : rx) EXPECT_EQ(w.status, WcStatus::kSuccess);
    drain(a_);
  }
  b1.reset();
  b2.reset();
  a2.reset();
}

// Completions a QP left in its CQ go when it is reset (as verbs providers clean the CQ):
// they are not returned, and their WQE counters do not retire slots of the fresh queues.
TEST_F(Verbs, ResetDiscardsTheQpsCompletionsLeftInTheCq) {
  QpOptions o;
  o.cap = QpCap{4, 4, 1, 1};
  open_pair(o);
  auto other = make_qp(a_, o);  // shares A's CQ; its entries stay
  QpAttr e;
  e.qp_state = QpState::kErr;
  ASSERT_EQ(other->modify(e, qp_attr::kState), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 64)}, i), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, i), 0);
  ASSERT_EQ(post_send(*other, WrOpcode::kSend, {a_.sge(0, 8)}, 99), 0);  // flushed
  cluster_.run_until_idle();
  QpAttr r;
  r.qp_state = QpState::kReset;
  ASSERT_EQ(a_.qp->modify(r, qp_attr::kState), 0);
  ASSERT_EQ(b_.qp->modify(r, qp_attr::kState), 0);
  WorkCompletion wc[8];
  ASSERT_EQ(a_.cq->poll(wc, 8), 1);  // only the other QP's flush
  EXPECT_EQ(wc[0].wr_id, 99u);
  EXPECT_EQ(b_.cq->poll(wc, 8), 0);
  connect(a_, *a_.qp, b_, *b_.qp, o);
  connect(b_, *b_.qp, a_, *a_.qp, o);
  // A full send queue's worth, and one more is -ENOMEM: the slot accounting starts over.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 64)}, 10 + i), 0);
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 10 + i), 0);
  EXPECT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 64)}, 20), -ENOMEM);
  auto tx = drain(a_);
  ASSERT_EQ(tx.size(), 4u);
  EXPECT_EQ(tx[0].wr_id, 10u);
  EXPECT_EQ(drain(b_).size(), 4u);
  other.reset();
}

TEST_F(Verbs, SharedReceiveQueueFeedsTwoQps) {
  QpOptions o;
  open(a_, o);
  open(b_, o);
  auto srq = b_.ctx->create_srq(*b_.pd, 16, 2);
  ASSERT_TRUE(srq.ok()) << srq.error().message;
  auto a2 = make_qp(a_, o);
  auto b1 = make_qp(b_, o, srq.value().get());
  auto b2 = make_qp(b_, o, srq.value().get());
  connect(a_, *a_.qp, b_, *b1, o);
  connect(b_, *b1, a_, *a_.qp, o);
  connect(a_, *a2, b_, *b2, o);
  connect(b_, *b2, a_, *a2, o);
  EXPECT_EQ(post_recv(*b1, {b_.sge(0, 8)}, 1), -EINVAL);  // receives go to the SRQ
  for (int i = 0; i < 4; ++i) {
    Sge s = b_.sge(i * 1024, 1024);
    RecvWr wr;
    wr.wr_id = 100 + i;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ASSERT_EQ(srq.value()->post_recv(wr, nullptr), 0);
  }
  fill(a_.at(0), 2048, 7);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 1000)}, 1), 0);
  ASSERT_EQ(post_send(*a2, WrOpcode::kSend, {a_.sge(1000, 1000)}, 2), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 2u);
  EXPECT_EQ(rx[0].qp_num, b1->qp_num());
  EXPECT_EQ(rx[0].wr_id, 100u);
  EXPECT_EQ(rx[1].qp_num, b2->qp_num());
  EXPECT_EQ(rx[1].wr_id, 101u);
  EXPECT_EQ(std::memcmp(b_.at(0), a_.at(0), 1000), 0);
  EXPECT_EQ(std::memcmp(b_.at(1024), a_.at(1000), 1000), 0);
  b1.reset();
  b2.reset();
  a2.reset();
}

// A function-level reset of the NIC (as after a firmware fault): the provider finds the
// device failed, every object made before is dead (posts, polls and set-up calls on it fail,
// its destruction sends nothing — its number may be a new object's), recover() brings the
// device up again and new objects work, also after the old ones are destroyed.
TEST_F(Verbs, ADeviceResetKillsEveryObjectAndRecoverBringsTheDeviceBack) {
  open_pair();
  fill(a_.at(0), 512, 3);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 512)}, 1), 0);
  ASSERT_EQ(drain(b_).size(), 1u);
  ASSERT_EQ(drain(a_).size(), 1u);
  EXPECT_FALSE(a_.ctx->probe_fatal());
  EXPECT_EQ(a_.ctx->recover(), 0) << "nothing failed: nothing to do";
  const uint32_t gen = a_.ctx->generation();

  a_.device->on_reset();
  auto refused = a_.ctx->alloc_pd();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, -EIO) << "a command finds the reset at once";
  EXPECT_TRUE(a_.ctx->probe_fatal());
  EXPECT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 8)}, 2), -EIO);
  WorkCompletion wc[4];
  EXPECT_EQ(a_.cq->poll(wc, 4), -EIO);

  ASSERT_EQ(a_.ctx->recover(), 0);
  EXPECT_EQ(a_.ctx->generation(), gen + 1);
  EXPECT_FALSE(a_.ctx->probe_fatal());
  EXPECT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 8)}, 2), -EIO) << "an old QP stays dead";
  EXPECT_EQ(a_.cq->poll(wc, 4), -EIO);
  QpAttr attr;
  EXPECT_EQ(a_.qp->query(&attr), -EIO);
  auto old_pd_mr = a_.ctx->reg_mr(*a_.pd, a_.buf->data(), 4096, access::kLocalWrite);
  ASSERT_FALSE(old_pd_mr.ok());
  EXPECT_EQ(old_pd_mr.error().code, -EIO);

  // New objects on the recovered device, a new peer QP, and traffic again.
  auto pd = a_.ctx->alloc_pd();
  ASSERT_TRUE(pd.ok()) << pd.error().message;
  auto cq = a_.ctx->create_cq(64);
  ASSERT_TRUE(cq.ok());
  auto mr = a_.ctx->reg_mr(*pd.value(), a_.buf->data(), kBufBytes,
                           access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
  ASSERT_TRUE(mr.ok());
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq.value().get();
  init.cap = QpCap{64, 64, 1, 1};
  auto qp = a_.ctx->create_qp(*pd.value(), init);
  ASSERT_TRUE(qp.ok());
  EXPECT_EQ(qp.value()->qp_num(), a_.qp->qp_num()) << "the reset freed the number";
  auto b2 = make_qp(b_, {});
  ASSERT_NE(b2, nullptr);
  connect(a_, *qp.value(), b_, *b2, {});
  connect(b_, *b2, a_, *qp.value(), {});
  // The old objects go; nothing of the new ones with the same numbers goes with them.
  a_.qp.reset();
  a_.mr.reset();
  a_.cq.reset();
  a_.pd.reset();
  for (uint32_t round = 0; round < 2; ++round) {
    ASSERT_EQ(post_recv(*b2, {b_.sge(8192, 4096)}, 10 + round), 0);
    fill(a_.at(0), 1000, 9 + round);
    ASSERT_EQ(post_send(*qp.value(), WrOpcode::kSend, {Sge{a_.addr(0), 1000, mr.value()->lkey()}},
                        20 + round),
              0);
    cluster_.run_until_idle(1'000'000'000ull);
    ASSERT_EQ(cq.value()->poll(wc, 4), 1) << "round " << round;
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wc[0].wr_id, 20u + round);
    EXPECT_EQ(std::memcmp(a_.at(0), b_.at(8192), 1000), 0);
    std::vector<WorkCompletion> rx = drain(b_);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 10u + round);
  }
  qp.value().reset();
  b2.reset();
}

}  // namespace
}  // namespace pollux::rdma::testing
