// The NIC at its device boundary, driven by a raw test host (no driver): registers, the
// command mailbox and its errors, resource lifetimes, doorbells and rings written by hand, a
// host that claims more WQEs than its ring holds, and packets that are corrupted, misaddressed
// or malformed (random headers with a valid ICRC must never crash the NIC).
#include "emulator/rnic/rnic.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace pollux::emu::rnic {
namespace {

namespace roce = spec::roce;
using St = sr::CmdStatus;

// Page-aligned memory the identity-mapped NIC reaches by address.
struct Buffer {
  explicit Buffer(std::size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, n))), size(n) {
    std::memset(p, 0, n);
  }
  ~Buffer() { std::free(p); }
  uint64_t iova() const { return reinterpret_cast<uintptr_t>(p); }
  uint8_t* p;
  std::size_t size;
};

struct RawHost {
  IdentityHostMemory mem;
  Buffer doorbells{4096};
  Buffer mailbox{4096};
  Buffer push{sr::reg::kPushSize};
  Rnic nic{mem, doorbells.p, 1, {}, push.p};
  sr::CommandMailbox& mb() { return *reinterpret_cast<sr::CommandMailbox*>(mailbox.p); }

  RawHost() {
    nic.write64(sr::reg::kCmdAddr, mailbox.iova());
    nic.write32(sr::reg::kControl, sr::control::kEnable);
  }
  template <typename In>
  St cmd(sr::CmdOpcode op, const In& in, void* out = nullptr, std::size_t out_len = 0) {
    std::memset(&mb(), 0, sizeof(sr::CommandMailbox));
    mb().opcode = static_cast<uint8_t>(op);
    std::memcpy(mb().in, &in, sizeof in);
    mb().owner = sr::kOwnerDevice;
    nic.write32(sr::reg::kCmdDoorbell, 1);
    EXPECT_EQ(mb().owner, sr::kOwnerHost);
    if (out != nullptr) std::memcpy(out, mb().out, out_len);
    return static_cast<St>(mb().status);
  }
  uint32_t handle_of(sr::CmdOpcode op, const auto& in) {
    sr::HandleOut o{};
    EXPECT_EQ(cmd(op, in, &o, sizeof o), St::kOk);
    return o.handle;
  }
  void ring(uint32_t offset, uint32_t v) {
    std::memcpy(doorbells.p + offset - sr::reg::kDoorbellBase, &v, 4);
  }
};

// The far end of the wire, counting what arrives.
struct CountingPort : WirePort {
  int packets = 0;
  void receive(uint64_t, const uint8_t*, std::size_t) override { ++packets; }
};

// A bit-at-a-time CRC-32 with the ICRC's mask, to check the table-driven one against.
uint32_t reference_icrc(const uint8_t* p, std::size_t n, bool mask = true) {
  uint32_t c = ~0u;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= (mask && i == 4) ? 0xffu : p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

TEST(Rnic, IcrcIsCrc32WithTheBthByte4Masked) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(reference_icrc(check, 9, false), 0xcbf43926u);  // CRC-32's check value
  std::mt19937_64 rng(3);
  for (std::size_t n = 0; n < 300; ++n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    ASSERT_EQ(packet_icrc(b.data(), n), reference_icrc(b.data(), n)) << n;
    if (n > 4) {  // byte 4 (FECN/BECN) does not matter
      const uint32_t before = packet_icrc(b.data(), n);
      b[4] ^= 0xc0;
      EXPECT_EQ(packet_icrc(b.data(), n), before);
    }
  }
}

TEST(Rnic, RegistersIdentifyAndEnable) {
  IdentityHostMemory mem;
  Buffer db(4096);
  Rnic nic(mem, db.p, 0x1234567890ull);
  EXPECT_EQ(nic.read32(sr::reg::kId), sr::reg::kIdValue);
  EXPECT_EQ(nic.read32(sr::reg::kVersion), sr::reg::kVersionValue);
  EXPECT_EQ(nic.read64(sr::reg::kPortAddress), 0x1234567890ull);
  EXPECT_EQ(nic.read32(sr::reg::kStatus), 0u);
  // A command before enable is answered, refused.
  Buffer mb(4096);
  nic.write64(sr::reg::kCmdAddr, mb.iova());
  EXPECT_EQ(nic.read64(sr::reg::kCmdAddr), mb.iova());
  auto& m = *reinterpret_cast<sr::CommandMailbox*>(mb.p);
  m.opcode = static_cast<uint8_t>(sr::CmdOpcode::kAllocPd);
  m.owner = sr::kOwnerDevice;
  nic.write32(sr::reg::kCmdDoorbell, 1);
  EXPECT_EQ(m.owner, sr::kOwnerHost);
  EXPECT_EQ(m.status, static_cast<uint8_t>(St::kNotEnabled));
  nic.write32(sr::reg::kControl, sr::control::kEnable);
  EXPECT_EQ(nic.read32(sr::reg::kStatus), sr::status::kReady);
  // A mailbox that is not 64-byte aligned is never answered (the host times out).
  nic.write64(sr::reg::kCmdAddr, mb.iova() + 8);
  m.owner = sr::kOwnerDevice;
  nic.write32(sr::reg::kCmdDoorbell, 1);
  EXPECT_EQ(m.owner, sr::kOwnerDevice);
  EXPECT_EQ(nic.counters().dma_faults, 1u);
}

TEST(Rnic, CommandErrorsAndResourceLifetimes) {
  RawHost h;
  EXPECT_EQ(h.cmd(static_cast<sr::CmdOpcode>(0x77), sr::HandleIn{0}), St::kBadOpcode);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDeallocPd, sr::HandleIn{5}), St::kBadResource);
  const uint32_t pd = h.handle_of(sr::CmdOpcode::kAllocPd, sr::HandleIn{0});
  Buffer data(65536);
  // Remote write without local write, zero length, unknown access bits, unmapped IOVA.
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kRegMr,
                  sr::RegMrIn{pd, sr::access::kRemoteWrite, data.iova(), 4096, data.iova()}),
            St::kBadParam);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kRegMr, sr::RegMrIn{pd, 0, data.iova(), 0, data.iova()}),
            St::kBadParam);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kRegMr, sr::RegMrIn{pd, 0x100, data.iova(), 4096, data.iova()}),
            St::kBadParam);
  sr::RegMrOut mr{};
  ASSERT_EQ(
      h.cmd(sr::CmdOpcode::kRegMr,
            sr::RegMrIn{pd, sr::access::kAll, data.iova(), 4096, data.iova()}, &mr, sizeof mr),
      St::kOk);
  EXPECT_NE(mr.lkey, 0u);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDeallocPd, sr::HandleIn{pd}), St::kBusy);  // the MR holds it
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kDeregMr, sr::HandleIn{mr.lkey}), St::kOk);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDeregMr, sr::HandleIn{mr.lkey}), St::kBadResource);
  // The slot is reused with a new tag: the old key stays dead.
  sr::RegMrOut mr2{};
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kRegMr, sr::RegMrIn{pd, 0, data.iova(), 4096, data.iova()}, &mr2,
                  sizeof mr2),
            St::kOk);
  EXPECT_EQ(mr2.lkey >> 8, mr.lkey >> 8);
  EXPECT_NE(mr2.lkey, mr.lkey);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDeregMr, sr::HandleIn{mr.lkey}), St::kBadResource);
  // Queues: bad sizes, a CQ held by a QP.
  Buffer ring(1 << 16);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{ring.iova(), 0}), St::kBadParam);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{ring.iova(), 16}), St::kBadParam);
  const uint32_t cq = h.handle_of(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{ring.iova(), 4});
  sr::CreateQpIn qin{ring.iova() + 4096, ring.iova() + 8192, pd, cq, cq, sr::kNone, 2, 2, {}};
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kCreateQp,
                  sr::CreateQpIn{qin.sq_iova, qin.rq_iova, pd, cq + 1, cq, sr::kNone, 2, 2, {}}),
            St::kBadResource);
  const uint32_t qpn = h.handle_of(sr::CmdOpcode::kCreateQp, qin);
  EXPECT_GE(qpn, sr::kFirstQpn);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDestroyCq, sr::HandleIn{cq}), St::kBusy);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDestroyQp, sr::HandleIn{qpn}), St::kOk);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDestroyCq, sr::HandleIn{cq}), St::kOk);
  // A reset forgets everything.
  h.nic.write32(sr::reg::kControl, 0);
  h.nic.write32(sr::reg::kControl, sr::control::kEnable);
  EXPECT_EQ(h.cmd(sr::CmdOpcode::kDeregMr, sr::HandleIn{mr2.lkey}), St::kBadResource);
}

// A CQ made in the slot of one the host had consumed 3,211 entries of starts with a consumer
// count of 0 — all four bytes of its doorbell, not just the low one (which left 3,072 and a
// new CQ "overflowed" at its first entry: found by a host reconnecting after a QP error).
TEST(Rnic, ACqInAReusedSlotStartsWithAZeroConsumerCount) {
  RawHost h;
  Buffer ring(1 << 16);
  const uint32_t cq = h.handle_of(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{ring.iova(), 4});
  h.ring(sr::reg::cq_doorbell(cq), 3211);
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kDestroyCq, sr::HandleIn{cq}), St::kOk);
  ASSERT_EQ(h.handle_of(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{ring.iova(), 4}), cq);
  uint32_t db = 0xffffffff;
  std::memcpy(&db, h.doorbells.p + sr::reg::cq_doorbell(cq) - sr::reg::kDoorbellBase, 4);
  EXPECT_EQ(db, 0u);
}

// A QP brought to RTS by hand, and the rings it uses.
struct RawQp {
  RawHost& h;
  Buffer rings{1 << 16};
  uint32_t pd, cq, qpn;
  uint64_t peer;
  uint32_t peer_qpn;
  explicit RawQp(RawHost& host, uint64_t peer_address = 2, uint32_t peer_qp = 2)
      : h(host), peer(peer_address), peer_qpn(peer_qp) {
    pd = h.handle_of(sr::CmdOpcode::kAllocPd, sr::HandleIn{0});
    cq = h.handle_of(sr::CmdOpcode::kCreateCq, sr::CreateCqIn{rings.iova(), 4});  // 16 CQEs
    qpn = h.handle_of(
        sr::CmdOpcode::kCreateQp,
        sr::CreateQpIn{rings.iova() + 4096, rings.iova() + 8192, pd, cq, cq, sr::kNone, 2, 2, {}});
    bring_up();
  }
  // (-> RESET) -> INIT -> RTR -> RTS.
  void bring_up() {
    sr::QpAttrs a{};
    a.qpn = qpn;
    a.state = static_cast<uint8_t>(sr::QpState::kReset);
    a.attr_mask = sr::attr::kState;
    EXPECT_EQ(h.cmd(sr::CmdOpcode::kModifyQp, a), St::kOk);
    a.state = static_cast<uint8_t>(sr::QpState::kInit);
    a.attr_mask =
        sr::attr::kState | sr::attr::kPkeyIndex | sr::attr::kPort | sr::attr::kAccessFlags;
    a.access_flags = sr::access::kAll;
    EXPECT_EQ(h.cmd(sr::CmdOpcode::kModifyQp, a), St::kOk);
    a.state = static_cast<uint8_t>(sr::QpState::kRtr);
    a.attr_mask = sr::attr::kState | sr::attr::kAv | sr::attr::kPathMtu | sr::attr::kDestQpn |
                  sr::attr::kRqPsn | sr::attr::kMaxDestRdAtomic | sr::attr::kMinRnrTimer;
    a.dest_address = peer;
    a.dest_qpn = peer_qpn;
    a.path_mtu = static_cast<uint8_t>(roce::Mtu::k1024);
    a.max_dest_rd_atomic = 1;
    EXPECT_EQ(h.cmd(sr::CmdOpcode::kModifyQp, a), St::kOk);
    a.state = static_cast<uint8_t>(sr::QpState::kRts);
    a.attr_mask = sr::attr::kState | sr::attr::kSqPsn | sr::attr::kTimeout | sr::attr::kRetryCnt |
                  sr::attr::kRnrRetry | sr::attr::kMaxQpRdAtomic;
    a.timeout = 10;
    a.retry_cnt = 1;
    a.max_rd_atomic = 1;
    EXPECT_EQ(h.cmd(sr::CmdOpcode::kModifyQp, a), St::kOk);
  }
  sr::Cqe* cqe(uint32_t i) { return reinterpret_cast<sr::Cqe*>(rings.p) + (i & 15); }
};

TEST(Rnic, ADoorbellBeyondTheRingIsAFatalQpErrorNotACrash) {
  RawHost h;
  Buffer eq(4096);
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kCreateEq, sr::CreateEqIn{eq.iova(), 4}), St::kOk);
  RawQp q(h);
  h.ring(sr::reg::sq_doorbell(q.qpn), 9);  // the SQ holds 4
  h.nic.process(0);
  EXPECT_EQ(h.nic.qp_state(q.qpn), sr::QpState::kErr);
  const auto* ev = reinterpret_cast<const sr::EventEntry*>(eq.p);
  EXPECT_EQ(ev->owner, 1);
  EXPECT_EQ(ev->type, static_cast<uint8_t>(sr::EventType::kQpFatal));
  EXPECT_EQ(ev->resource, q.qpn);
  // Everything the ring can hold is flushed, each once, with the phase of the first pass.
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(q.cqe(i)->owner, 1) << i;
    EXPECT_EQ(q.cqe(i)->status, static_cast<uint8_t>(sr::WcStatus::kWrFlushErr));
    EXPECT_EQ(q.cqe(i)->wqe_counter, 5 + i);
  }
  EXPECT_EQ(q.cqe(4)->owner, 0);
}

TEST(Rnic, WqesWrittenByHandAreSentWithPsnsFromSqPsn) {
  RawHost h;
  RawQp q(h);
  Wire wire(1, {}, 0);
  struct Capture : WirePort {
    std::vector<std::vector<uint8_t>> got;
    void receive(uint64_t, const uint8_t* p, std::size_t n) override { got.emplace_back(p, p + n); }
  } peer;
  wire.attach(2, &peer);
  h.nic.connect(&wire);
  Buffer data(8192);
  sr::RegMrOut mr{};
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kRegMr, sr::RegMrIn{q.pd, 0, data.iova(), 8192, data.iova()}, &mr,
                  sizeof mr),
            St::kOk);
  auto* wqe = reinterpret_cast<sr::SendWqe*>(q.rings.p + 4096);
  wqe->opcode = static_cast<uint8_t>(sr::WrOpcode::kSendWithImm);
  wqe->flags = sr::wqe_flag::kSignaled;
  wqe->num_sge = 1;
  wqe->imm_data = 0x01020304;
  wqe->sge[0] = sr::Sge{data.iova(), 2500, mr.lkey};
  h.ring(sr::reg::sq_doorbell(q.qpn), 1);
  h.nic.process(0);
  wire.deliver_until(0);
  ASSERT_EQ(peer.got.size(), 3u);  // 1024 + 1024 + 452 bytes
  const auto* b0 = reinterpret_cast<const roce::Bth*>(peer.got[0].data());
  const auto* b2 = reinterpret_cast<const roce::Bth*>(peer.got[2].data());
  EXPECT_EQ(b0->opcode(), roce::opcode::kSendFirst);
  EXPECT_EQ(b0->psn(), 0u);
  EXPECT_FALSE(b0->ack_req());
  EXPECT_EQ(b2->opcode(), roce::opcode::kSendLastWithImmediate);
  EXPECT_EQ(b2->psn(), 2u);
  EXPECT_TRUE(b2->ack_req());
  EXPECT_EQ(b2->dest_qp(), 2u);
  EXPECT_EQ(b2->pad_count(), 0);  // 452 is a multiple of 4
  EXPECT_EQ(peer.got[0].size(), 12u + 1024 + 4);
  EXPECT_EQ(peer.got[2].size(), 12u + 4 + 452 + 4);
  EXPECT_EQ(roce::load_be32(peer.got[2].data() + 12), 0x01020304u);  // ImmDt
  EXPECT_EQ(packet_icrc(peer.got[2].data(), peer.got[2].size() - 4),
            roce::load_be32(peer.got[2].data() + peer.got[2].size() - 4));
}

// The push window: a WQE the host also wrote into its QP's slot, with the count it brings the
// SQ to, is taken from there (no DMA read of the ring); a slot with another count (stale, or
// half rewritten) is not, and neither is one left from before the QP went back to Reset.
TEST(Rnic, APushedWqeIsTakenFromItsSlotAndAStaleOneIsNot) {
  RawHost h;
  RawQp q(h);
  Wire wire(1, {}, 0);
  CountingPort peer;
  wire.attach(2, &peer);
  h.nic.connect(&wire);
  auto* ring = reinterpret_cast<sr::SendWqe*>(q.rings.p + 4096);
  auto slot = [&](uint32_t count) {
    return reinterpret_cast<sr::SendWqe*>(h.push.p + sr::reg::push_slot(q.qpn, count) -
                                          sr::reg::kPushBase);
  };
  sr::SendWqe send{};
  send.opcode = static_cast<uint8_t>(sr::WrOpcode::kSend);
  send.flags = sr::wqe_flag::kSignaled;
  // WQE 0: only the slot holds a valid SEND; the ring's copy has a bad opcode.
  ring[0].opcode = 0xee;
  *slot(1) = send;
  slot(1)->push_count = 1;
  h.ring(sr::reg::sq_doorbell(q.qpn), 1);
  h.nic.process(0);
  wire.deliver_until(0);
  EXPECT_EQ(h.nic.counters().pushed_wqes, 1u);
  EXPECT_EQ(peer.packets, 1);
  EXPECT_EQ(h.nic.qp_state(q.qpn), sr::QpState::kRts);
  // WQE 1: its slot carries count 4 (a later post's, or garbage): the ring's bad WQE is read.
  ring[1].opcode = 0xee;
  *slot(2) = send;
  slot(2)->push_count = 4;
  h.ring(sr::reg::sq_doorbell(q.qpn), 2);
  h.nic.process(0);
  EXPECT_EQ(h.nic.counters().pushed_wqes, 1u);
  EXPECT_EQ(h.nic.qp_state(q.qpn), sr::QpState::kErr) << "the ring's WQE was used";
  // Back to Reset and up again: the counts start over, the slots are cleared.
  *slot(1) = send;
  slot(1)->push_count = 1;
  q.bring_up();
  EXPECT_EQ(slot(1)->push_count, 0u);
  EXPECT_EQ(slot(2)->push_count, 0u);
  ring[0] = send;
  h.ring(sr::reg::sq_doorbell(q.qpn), 1);
  h.nic.process(0);
  EXPECT_EQ(h.nic.counters().pushed_wqes, 1u);
  EXPECT_EQ(h.nic.qp_state(q.qpn), sr::QpState::kRts);
}

// Per-QP counters (what metrics export): a SEND's packets, its ACK and the latency from fetch
// to completion, a retransmission after the ACK timeout; and the fault hook that fails a QP as
// an internal error would: QP_FATAL, the Error state, its outstanding work flushed.
TEST(Rnic, PerQpCountersAndAForcedQpError) {
  RawHost h;
  Buffer eq(4096);
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kCreateEq, sr::CreateEqIn{eq.iova(), 4}), St::kOk);
  RawQp q(h);
  Wire wire(1, {}, 0);
  CountingPort peer;
  wire.attach(2, &peer);
  h.nic.connect(&wire);
  Buffer data(4096);
  sr::RegMrOut mr{};
  ASSERT_EQ(h.cmd(sr::CmdOpcode::kRegMr, sr::RegMrIn{q.pd, 0, data.iova(), 4096, data.iova()}, &mr,
                  sizeof mr),
            St::kOk);
  auto post_send = [&](uint32_t count) {
    auto* w = reinterpret_cast<sr::SendWqe*>(q.rings.p + 4096) + ((count - 1) & 3);
    std::memset(w, 0, sizeof *w);
    w->opcode = static_cast<uint8_t>(sr::WrOpcode::kSend);
    w->flags = sr::wqe_flag::kSignaled;
    w->num_sge = 1;
    w->wr_id = count;
    w->sge[0] = sr::Sge{data.iova(), 100, mr.lkey};
    h.ring(sr::reg::sq_doorbell(q.qpn), count);
  };
  auto ack = [&](uint32_t psn, uint64_t at) {
    std::vector<uint8_t> p(sizeof(roce::Bth) + sizeof(roce::Aeth) + roce::kIcrcBytes);
    roce::Bth bth{};
    bth.set_opcode(roce::opcode::kAcknowledge);
    bth.set_pkey(roce::kDefaultPkey);
    bth.set_dest_qp(q.qpn);
    bth.set_psn(psn);
    roce::Aeth aeth{};
    aeth.set(roce::syndrome::kTypeAck | roce::syndrome::kCreditsUnlimited, 1);
    std::memcpy(p.data(), bth.b, sizeof bth.b);
    std::memcpy(p.data() + sizeof bth.b, aeth.b, sizeof aeth.b);
    roce::store_be32(p.data() + p.size() - 4, packet_icrc(p.data(), p.size() - 4));
    h.nic.receive(2, p.data(), p.size());
    h.nic.process(at);
  };
  post_send(1);
  h.nic.process(1000);
  ack(0, 6000);
  ASSERT_EQ(q.cqe(0)->owner, 1);
  EXPECT_EQ(q.cqe(0)->status, static_cast<uint8_t>(sr::WcStatus::kSuccess));
  // A second SEND is never acknowledged: the ACK timeout (4.096 us * 2^10) sends it again.
  post_send(2);
  h.nic.process(7000);
  h.nic.process(7000 + roce::local_ack_timeout_ns(10));
  int seen = 0;
  h.nic.for_each_qp([&](uint32_t qpn, sr::QpState st, const QpCounters& c) {
    ++seen;
    EXPECT_EQ(qpn, q.qpn);
    EXPECT_EQ(st, sr::QpState::kRts);
    EXPECT_EQ(c.tx_packets, 3u);  // two SENDs, one of them twice
    EXPECT_EQ(c.rx_packets, 1u);  // the ACK
    EXPECT_EQ(c.tx_bytes, h.nic.counters().tx_bytes);
    EXPECT_EQ(c.retransmitted_packets, 1u);
    EXPECT_EQ(c.timeouts, 1u);
    EXPECT_EQ(c.messages, 1u);
    EXPECT_EQ(c.latency_ns_sum, 5000u);  // fetched at 1 us, acknowledged at 6 us
    EXPECT_EQ(c.latency_ns_max, 5000u);
    EXPECT_EQ(c.errors, 0u);
  });
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(peer.packets, 0) << "nothing was delivered yet: the wire was not stepped";
  // The fault: the outstanding SEND is flushed, the QP is in Error, the driver hears QP_FATAL.
  EXPECT_TRUE(h.nic.force_qp_error(q.qpn));
  EXPECT_FALSE(h.nic.force_qp_error(q.qpn)) << "in Error already";
  EXPECT_FALSE(h.nic.force_qp_error(q.qpn + 1)) << "no such QP";
  EXPECT_EQ(h.nic.qp_state(q.qpn), sr::QpState::kErr);
  ASSERT_EQ(q.cqe(1)->owner, 1);
  EXPECT_EQ(q.cqe(1)->status, static_cast<uint8_t>(sr::WcStatus::kWrFlushErr));
  const auto* ev = reinterpret_cast<const sr::EventEntry*>(eq.p);
  EXPECT_EQ(ev->type, static_cast<uint8_t>(sr::EventType::kQpFatal));
  EXPECT_EQ(ev->resource, q.qpn);
  h.nic.for_each_qp([&](uint32_t, sr::QpState st, const QpCounters& c) {
    EXPECT_EQ(st, sr::QpState::kErr);
    EXPECT_EQ(c.errors, 1u);
    EXPECT_GE(c.error_completions, 1u);
  });
}

// Random packets with a valid ICRC, addressed to a live QP from its peer: whatever the
// headers say, the NIC drops, NAKs or errors the QP, and never crashes (run under ASan too).
TEST(Rnic, RandomPacketsNeverCrashTheNic) {
  const char* env = std::getenv("POLLUX_SEED");
  const uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 0) : 0x5eed;
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  RawHost h;
  Wire wire(seed, {}, 0);
  h.nic.connect(&wire);
  auto q = std::make_unique<RawQp>(h);
  Buffer data(65536);
  sr::RegMrOut mr{};
  ASSERT_EQ(
      h.cmd(sr::CmdOpcode::kRegMr,
            sr::RegMrIn{q->pd, sr::access::kAll, data.iova(), 65536, data.iova()}, &mr, sizeof mr),
      St::kOk);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> p(12 + rng() % 1200);
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    p[0] = static_cast<uint8_t>(rng() % 0x14);  // mostly RC opcodes
    p[1] &= 0xf0;                               // TVer 0
    roce::store_be24(p.data() + 5, rng() % 8 == 0 ? static_cast<uint32_t>(rng()) : q->qpn);
    if (rng() % 2) roce::store_be24(p.data() + 9, static_cast<uint32_t>(rng() % 4));  // near ePSN
    if (p.size() >= 28 && rng() % 2) {  // a RETH naming the MR, sometimes
      roce::store_be64(p.data() + 12, data.iova() + rng() % 70000);
      roce::store_be32(p.data() + 20, mr.rkey);
      roce::store_be32(p.data() + 24, static_cast<uint32_t>(rng() % 5000));
    }
    if (rng() % 4 == 0) h.ring(sr::reg::rq_doorbell(q->qpn), static_cast<uint32_t>(rng() % 3));
    p.resize(p.size() + 4);
    roce::store_be32(p.data() + p.size() - 4, packet_icrc(p.data(), p.size() - 4));
    h.nic.receive(2, p.data(), p.size());
    h.nic.process(static_cast<uint64_t>(i) * 1000);
    if (h.nic.qp_state(q->qpn) == sr::QpState::kErr) q->bring_up();  // start over
  }
  const RnicCounters& c = h.nic.counters();
  std::printf("rx %llu, dropped %llu, tx %llu\n", (unsigned long long)c.rx_packets,
              (unsigned long long)c.dropped_packets, (unsigned long long)c.tx_packets);
  EXPECT_EQ(c.rx_packets, 20000u);
  EXPECT_GT(c.dropped_packets, 0u);
  EXPECT_GT(c.tx_packets, 0u);  // some were answered (ACK/NAK/RNR/read responses)
}

}  // namespace
}  // namespace pollux::emu::rnic
