// TimeoutAction::kAbort against the timed p4800x model (virtual time): a timed-out command gets
// an Abort; whatever the device does with it, the command ends — by the Abort, or by a reset
// the driver escalates to when the Abort fails (an error status) or does not end the command
// within one more timeout (the device answered "not aborted": it already fetched it).
#include <gtest/gtest.h>

#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/status.h"
#include "emulator/nvme/faults.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/rig.h"
#include "tests/recovery/rig_queue.h"

namespace pollux::sim {
namespace {

namespace sn = spec::nvme;
namespace en = emu::nvme;

constexpr uint64_t kTimeoutUs = 200;

struct Io {
  int calls = 0;
  uint16_t status = 0;
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* io = static_cast<Io*>(ctx);
    ++io->calls;
    io->status = c.status & 0xfffe;
  }
};

struct Fixture : testing::RigQueue {
  Fixture() : RigQueue("p4800x", 21, kTimeoutUs, 16) {
    EXPECT_EQ(ctrl->timeout_action(), nvme::TimeoutAction::kAbort) << "the driver's default";
  }
  en::Controller& device() { return rig->device(0).controller(); }
  void add(en::FaultRule r) { ASSERT_TRUE(device().faults().add(r).ok()); }
  // Steps (the admin poll sends Aborts and runs a requested reset) until every I/O has ended,
  // or `virtual_ns` have passed.
  bool run(std::vector<Io>& ios, uint64_t virtual_ns = 50'000'000) {
    qp->flush_doorbell();
    const uint64_t until = rig->lockstep().now_ns() + virtual_ns;
    while (rig->lockstep().now_ns() < until) {
      bool all = true;
      for (const Io& io : ios) all &= io.calls > 0;
      if (all) return true;
      step();
    }
    return false;
  }
  static en::FaultRule hold_reads(uint64_t count) {
    en::FaultRule r;
    r.action = en::FaultAction::kNeverComplete;
    r.opcode = sn::nvm::kRead;
    r.count = count;
    return r;
  }
};

void expect_retriable(const Io& io) {
  EXPECT_EQ(io.calls, 1);
  EXPECT_EQ(sn::status::sc(io.status), sn::sc::kAbortedSqDeletion);
  EXPECT_FALSE(sn::status::dnr(io.status)) << "a reset ends it retriable";
}

// The device holds a read it fetched: the Abort is answered "not aborted" (CDW0 bit 0), and
// one timeout later the read is overdue: a reset ends it (before: it stayed outstanding).
TEST(AbortEscalation, NotAbortedCommandIsEndedByAResetOneTimeoutLater) {
  Fixture f;
  f.add(Fixture::hold_reads(1));
  std::vector<Io> io(1);
  ASSERT_EQ(f.qp->read(*f.ns, f.buf(0), 0, 8, Io::cb, &io[0]), 0);
  ASSERT_TRUE(f.run(io)) << "the held read never ended";
  expect_retriable(io[0]);
  const nvme::ControllerStats& s = f.ctrl->stats();
  EXPECT_EQ(s.io_timeouts.load(), 1u);
  EXPECT_EQ(s.aborts_sent.load(), 1u);
  EXPECT_EQ(s.aborts_not_aborted.load(), 1u);
  EXPECT_EQ(s.aborts_failed.load(), 0u);
  EXPECT_EQ(s.io_overdue.load(), 1u);
  EXPECT_EQ(s.resets.load(), 1u);
  EXPECT_EQ(f.qp->stats().overdue, 1u);
  // The device works again.
  std::vector<Io> again(1);
  ASSERT_EQ(f.qp->read(*f.ns, f.buf(1), 0, 8, Io::cb, &again[0]), 0);
  ASSERT_TRUE(f.run(again));
  EXPECT_EQ(again[0].status, 0);
}

// An Abort that fails (here: the device answers it Internal Error) escalates at once: the reset
// comes before the command is overdue.
TEST(AbortEscalation, FailedAbortResetsAtOnce) {
  Fixture f;
  f.add(Fixture::hold_reads(1));
  en::FaultRule fail_abort;
  fail_abort.admin = true;
  fail_abort.opcode = sn::admin::kAbort;
  fail_abort.status = sn::status::make(sn::sct::kGeneric, sn::sc::kInternalError);
  fail_abort.count = 1;
  f.add(fail_abort);
  std::vector<Io> io(1);
  ASSERT_EQ(f.qp->read(*f.ns, f.buf(0), 0, 8, Io::cb, &io[0]), 0);
  ASSERT_TRUE(f.run(io));
  expect_retriable(io[0]);
  const nvme::ControllerStats& s = f.ctrl->stats();
  EXPECT_EQ(s.aborts_sent.load(), 1u);
  EXPECT_EQ(s.aborts_failed.load(), 1u);
  EXPECT_EQ(s.io_overdue.load(), 0u) << "escalated before the second timeout";
  EXPECT_EQ(s.resets.load(), 1u);
}

// A completion the host never sees (written with a stale phase tag): the device no longer
// holds the command, so it is not aborted either; the overdue check ends it.
TEST(AbortEscalation, StalePhaseCompletionIsRecovered) {
  Fixture f;
  en::FaultRule r;
  r.action = en::FaultAction::kStalePhase;
  r.opcode = sn::nvm::kRead;
  r.count = 1;
  f.add(r);
  std::vector<Io> io(4);
  for (uint32_t i = 0; i < io.size(); ++i)
    ASSERT_EQ(f.qp->read(*f.ns, f.buf(i), uint64_t{i} * 8, 8, Io::cb, &io[i]), 0);
  ASSERT_TRUE(f.run(io));
  for (const Io& x : io) EXPECT_EQ(x.calls, 1);
  EXPECT_GE(f.ctrl->stats().resets.load(), 1u);
  EXPECT_EQ(f.ctrl->stats().aborts_failed.load(), 0u);
}

// The controller takes at most ACL + 1 Aborts at once (Identify ACL; the emulator reports 3):
// with eight reads held and their Aborts held too, only four are sent; the overdue reads then
// bring the reset, which ends the held Aborts (not counted as failures) and drops the queued
// ones (they would name CIDs the reset ends).
TEST(AbortEscalation, AbortsInFlightStayWithinTheAbortCommandLimit) {
  Fixture f;
  ASSERT_EQ(f.ctrl->identify().acl, 3);
  f.add(Fixture::hold_reads(8));
  en::FaultRule hold_aborts;
  hold_aborts.admin = true;
  hold_aborts.opcode = sn::admin::kAbort;
  hold_aborts.action = en::FaultAction::kNeverComplete;
  f.add(hold_aborts);
  std::vector<Io> io(8);
  for (uint32_t i = 0; i < io.size(); ++i)
    ASSERT_EQ(f.qp->read(*f.ns, f.buf(i), uint64_t{i} * 8, 8, Io::cb, &io[i]), 0);
  ASSERT_TRUE(f.run(io));
  for (const Io& x : io) expect_retriable(x);
  const nvme::ControllerStats& s = f.ctrl->stats();
  EXPECT_EQ(s.io_timeouts.load(), 8u);
  EXPECT_EQ(s.aborts_sent.load(), 4u) << "ACL + 1";
  EXPECT_EQ(s.aborts_failed.load(), 0u) << "the reset ended them: no second escalation";
  EXPECT_EQ(s.resets.load(), 1u);
  EXPECT_TRUE(f.ctrl->healthy());
}

// Report only: nothing escalates, the command stays with the device.
TEST(AbortEscalation, NoneOnlyReports) {
  Fixture f;
  f.ctrl->set_timeout_action(nvme::TimeoutAction::kNone);
  f.add(Fixture::hold_reads(1));
  std::vector<Io> io(1);
  ASSERT_EQ(f.qp->read(*f.ns, f.buf(0), 0, 8, Io::cb, &io[0]), 0);
  EXPECT_FALSE(f.run(io, 20 * kTimeoutUs * 1000));
  EXPECT_EQ(f.ctrl->stats().io_timeouts.load(), 1u);
  EXPECT_EQ(f.ctrl->stats().io_overdue.load(), 1u);
  EXPECT_EQ(f.ctrl->stats().aborts_sent.load(), 0u);
  EXPECT_EQ(f.ctrl->stats().resets.load(), 0u);
  ASSERT_EQ(f.ctrl->reset(), 0);
  expect_retriable(io[0]);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
