// Connect: admin queues create controllers, I/O queues join them; each refusal with the status
// (and IPO/IATTR) the specification names for it.
#include <gtest/gtest.h>

#include "fabric/target/test_rig.h"

namespace pollux::fabric::target::testing {
namespace {

constexpr uint8_t kSctSpecific = sn::sct::kCommandSpecific;

void expect_invalid_param(const sn::CompletionEntry& c, std::size_t offset, bool in_data) {
  EXPECT_EQ(sct_of(c), kSctSpecific);
  EXPECT_EQ(sc_of(c), nf::sc::kConnectInvalidParameters);
  EXPECT_EQ(nf::connect::ipo(c.dw0), offset);
  EXPECT_EQ(nf::connect::iattr(c.dw0), in_data ? 1 : 0);
}

TEST(Connect, AdminQueueCreatesAControllerWithItsCntlid) {
  Rig rig;
  FakeQpair& a = rig.new_qpair();
  auto& s = rig.connect(a, 0);
  ASSERT_EQ(s.cqe.status, 0);
  EXPECT_EQ(nf::connect::cntlid(s.cqe.dw0), 1);
  EXPECT_EQ(a.state, Qpair::State::kActive);
  FakeQpair& b = rig.new_qpair();
  EXPECT_EQ(nf::connect::cntlid(rig.connect(b, 0).cqe.dw0), 2);  // a second association
  EXPECT_EQ(rig.tgt->find(kNqn)->controllers().size(), 2u);
}

TEST(Connect, UnknownSubsystemIsAnInvalidParameterInTheData) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  auto& s = rig.connect(q, 0, "nqn.2026-11.io.pollux:nope");
  expect_invalid_param(s.cqe, offsetof(nf::ConnectData, subnqn), true);
  EXPECT_EQ(q.state, Qpair::State::kAwaitingConnect);
}

TEST(Connect, HostNotAllowedIsRefused) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  auto& s = rig.connect(q, 0, kNqn, "nqn.2026-11.io.pollux:stranger");
  EXPECT_EQ(sct_of(s.cqe), kSctSpecific);
  EXPECT_EQ(sc_of(s.cqe), nf::sc::kConnectInvalidHost);
  // allow_any_host lets it in.
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->set_allow_any_host(kNqn, true).ok()); });
  EXPECT_EQ(rig.connect(q, 0, kNqn, "nqn.2026-11.io.pollux:stranger").cqe.status, 0);
}

TEST(Connect, ListenerNotOfTheSubsystemIsRefused) {
  Rig rig;
  FakeQpair& q = rig.new_qpair(0, ListenAddress{"TCP", "IPv4", "127.0.0.1", "4421"});
  EXPECT_EQ(sc_of(rig.connect(q, 0).cqe), nf::sc::kConnectInvalidHost);
  // The discovery subsystem answers on every listener.
  EXPECT_EQ(rig.connect(q, 0, nf::kDiscoveryNqn).cqe.status, 0);
}

TEST(Connect, AdminQueueMustAskForADynamicController) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  expect_invalid_param(rig.connect(q, 0, kNqn, kHost, 0x1234).cqe,
                       offsetof(nf::ConnectData, cntlid), true);
}

TEST(Connect, QueueSizeIsChecked) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  expect_invalid_param(rig.connect(q, 0, kNqn, kHost, 0xffff, 0).cqe,
                       offsetof(nf::ConnectCommand, sqsize), false);
  expect_invalid_param(rig.connect(q, 0, kNqn, kHost, 0xffff, 128).cqe,  // 129 entries
                       offsetof(nf::ConnectCommand, sqsize), false);
  EXPECT_EQ(rig.connect(q, 0, kNqn, kHost, 0xffff, 127).cqe.status, 0);
}

TEST(Connect, UnknownRecordFormatIsIncompatible) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  sn::SubmissionEntry c = connect_cmd(0, 31);
  c.cdw10 = 1;  // RECFMT
  const nf::ConnectData d = connect_data(kNqn, kHost);
  auto& s = rig.run(q, c, &d, sizeof d);
  EXPECT_EQ(sct_of(s.cqe), kSctSpecific);
  EXPECT_EQ(sc_of(s.cqe), nf::sc::kConnectIncompatibleFormat);
}

TEST(Connect, ConnectDataMustBeWhole) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  const nf::ConnectData d = connect_data(kNqn, kHost);
  auto& s = rig.run(q, connect_cmd(0, 31), &d, 512);
  EXPECT_EQ(sct_of(s.cqe), sn::sct::kGeneric);
  EXPECT_EQ(sc_of(s.cqe), sn::sc::kInvalidField);
}

TEST(Connect, CommandsBeforeConnectAreOutOfSequence) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  auto& s = rig.run(q, admin(sn::admin::kIdentify, 0, sn::cns::kController), nullptr, 0);
  EXPECT_EQ(sc_of(s.cqe), sn::sc::kCommandSequenceError);
  // Connecting twice is out of sequence too.
  ASSERT_EQ(rig.connect(q, 0).cqe.status, 0);
  EXPECT_EQ(sc_of(rig.connect(q, 0).cqe), sn::sc::kCommandSequenceError);
}

TEST(Connect, IoQueueJoinsItsController) {
  Rig rig("0x3");  // two poll groups: the I/O queue on the other one
  FakeQpair& a = rig.new_qpair(0);
  const uint16_t cntlid = rig.connect_enabled(a);
  FakeQpair& io = rig.new_qpair(1);
  auto& s = rig.connect(io, 1, kNqn, kHost, cntlid, 127);
  ASSERT_EQ(s.cqe.status, 0) << std::hex << s.cqe.dw0;
  EXPECT_EQ(nf::connect::cntlid(s.cqe.dw0), cntlid);
  EXPECT_EQ(io.state, Qpair::State::kActive);
  Controller* c = rig.on_group([&] { return a.ctrlr; });
  EXPECT_EQ(c->io_queue_count(), 1u);
  // The same QID twice: refused.
  FakeQpair& dup = rig.new_qpair(1);
  auto& d = rig.connect(dup, 1, kNqn, kHost, cntlid, 127);
  EXPECT_EQ(sct_of(d.cqe), kSctSpecific);
  EXPECT_EQ(sc_of(d.cqe), sn::sc_cmd::kInvalidQueueIdentifier);
}

TEST(Connect, IoQueueRefusals) {
  Rig rig;
  FakeQpair& a = rig.new_qpair();
  ASSERT_EQ(rig.connect(a, 0).cqe.status, 0);
  const uint16_t cntlid = 1;
  FakeQpair& io = rig.new_qpair();
  // Before CC.EN: the controller takes no I/O queue.
  expect_invalid_param(rig.connect(io, 1, kNqn, kHost, cntlid, 31).cqe,
                       offsetof(nf::ConnectCommand, qid), false);
  ASSERT_EQ(rig.run(a, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
  // A CNTLID nobody has.
  expect_invalid_param(rig.connect(io, 1, kNqn, kHost, 77, 31).cqe,
                       offsetof(nf::ConnectData, cntlid), true);
  // Another host's controller.
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->add_host(kNqn, "nqn.2026-11.io.pollux:h2").ok()); });
  expect_invalid_param(rig.connect(io, 1, kNqn, "nqn.2026-11.io.pollux:h2", cntlid, 31).cqe,
                       offsetof(nf::ConnectData, hostnqn), true);
  // The same host NQN from another host identifier.
  expect_invalid_param(rig.connect(io, 1, kNqn, kHost, cntlid, 31, 0, 0x22).cqe,
                       offsetof(nf::ConnectData, hostid), true);
  // A QID beyond the Number of Queues granted.
  sn::SubmissionEntry noq =
      admin(sn::admin::kSetFeatures, 0, sn::feature::kNumberOfQueues, 0x00010001);
  ASSERT_EQ(rig.run(a, noq).cqe.status, 0);  // two I/O queues
  auto& s = rig.connect(io, 3, kNqn, kHost, cntlid, 31);
  EXPECT_EQ(sc_of(s.cqe), sn::sc_cmd::kInvalidQueueIdentifier);
  EXPECT_EQ(rig.connect(io, 2, kNqn, kHost, cntlid, 31).cqe.status, 0);
  // Number of Queues is fixed once I/O queues exist.
  EXPECT_EQ(sc_of(rig.run(a, noq).cqe), sn::sc::kCommandSequenceError);
}

TEST(Connect, DiscoveryControllerTakesNoIoQueue) {
  Rig rig;
  FakeQpair& d = rig.new_qpair();
  auto& s = rig.connect(d, 0, nf::kDiscoveryNqn, "nqn.2026-11.io.pollux:anyone");
  ASSERT_EQ(s.cqe.status, 0);
  FakeQpair& io = rig.new_qpair();
  expect_invalid_param(
      rig.connect(io, 1, nf::kDiscoveryNqn, "nqn.2026-11.io.pollux:anyone", 1, 31).cqe,
      offsetof(nf::ConnectCommand, qid), false);
}

TEST(Connect, AssociationEndsWithItsAdminQueue) {
  Rig rig("0x3");
  FakeQpair& a = rig.new_qpair(0);
  const uint16_t cntlid = rig.connect_enabled(a);
  FakeQpair& io = rig.new_qpair(1);
  ASSERT_EQ(rig.connect(io, 1, kNqn, kHost, cntlid, 31).cqe.status, 0);
  rig.on_group([&] { a.disconnect(); });
  rig.settle();
  EXPECT_TRUE(a.closed);
  EXPECT_TRUE(io.closed);  // its I/O queue was disconnected by a message
  EXPECT_EQ(rig.tgt->find(kNqn)->controllers().size(), 0u);  // the CNTLID is free again
  EXPECT_EQ(rig.group(0).controller_count(), 0u);
}

}  // namespace
}  // namespace pollux::fabric::target::testing
