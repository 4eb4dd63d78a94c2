// Recovery pieces of the queue pair against a scripted device (the test plays the controller):
// error injection, surprise removal, misbehaving completions.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/scripted_device.h"
#include "driver/nvme/status.h"

namespace pollux::nvme {
namespace {

namespace sn = spec::nvme;

using testing::Done;
using testing::Harness;
using testing::ScriptedDevice;

// Records every callback; a callback for a request after it was ended would show as a
// second call on the same Io.
struct Io {
  int calls = 0;
  sn::CompletionEntry last{};
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* io = static_cast<Io*>(ctx);
    ++io->calls;
    io->last = c;
  }
  uint8_t sct() const { return sn::status::sct(last.status); }
  uint8_t sc() const { return sn::status::sc(last.status); }
  bool dnr() const { return sn::status::dnr(last.status); }
};

// The device side: answer every SQE the driver rang for with success.
struct Device {
  Harness& h;
  std::vector<sn::SubmissionEntry> seen;
  void answer_all(uint16_t status = 0) {
    while (h.dev_sq_head != h.sq_doorbell()) {
      const auto e = h.fetch();
      seen.push_back(e);
      h.post(e.cid, status);
    }
  }
};

// ------------------------------------------------------------------ error injection ---

TEST_F(Harness, InjectionByOpcodeHitsCountCommandsThenDisarms) {
  auto qp = make();
  ErrorInjection rule;
  rule.opcode = sn::nvm::kRead;
  rule.sct = sn::sct::kMediaError;
  rule.sc = sn::sc_media::kUnrecoveredReadError;
  rule.count = 2;
  rule.do_not_submit = true;
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  Io w, r[3];
  ASSERT_EQ(qp->write(ns, buf(), 0, 1, Io::cb, &w), 0);  // other opcode: untouched
  for (int i = 0; i < 3; ++i) ASSERT_EQ(qp->read(ns, buf(), i, 1, Io::cb, &r[i]), 0);
  EXPECT_EQ(qp->error_injections_armed(), 0u) << "used up after two hits";
  // Nothing is delivered inline from submit.
  EXPECT_EQ(r[0].calls + r[1].calls, 0);
  qp->flush_doorbell();
  Device d{*this, {}};
  d.answer_all();
  ASSERT_EQ(d.seen.size(), 2u) << "the write and the third read reach the device";
  EXPECT_EQ(d.seen[0].opcode, sn::nvm::kWrite);
  EXPECT_EQ(d.seen[1].opcode, sn::nvm::kRead);
  EXPECT_EQ(d.seen[1].cdw10, 2u);
  EXPECT_EQ(qp->process_completions(), 4);
  EXPECT_EQ(w.calls, 1);
  EXPECT_FALSE(cpl_is_error(w.last));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].calls, 1);
    EXPECT_EQ(r[i].sct(), sn::sct::kMediaError);
    EXPECT_EQ(r[i].sc(), sn::sc_media::kUnrecoveredReadError);
  }
  EXPECT_EQ(r[2].calls, 1);
  EXPECT_FALSE(cpl_is_error(r[2].last));
  EXPECT_EQ(qp->stats().injected, 2u);
  EXPECT_EQ(qp->stats().errors, 2u);
  EXPECT_EQ(qp->stats().completed, 4u);
  EXPECT_EQ(qp->outstanding(), 0u);
}

TEST_F(Harness, OverrideSubmitsAndReplacesTheDevicesStatus) {
  auto qp = make();
  ErrorInjection rule;
  rule.any_opcode = true;
  rule.sct = sn::sct::kGeneric;
  rule.sc = sn::sc::kDataTransferError;
  rule.dnr = true;
  rule.count = 1;
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  Io a, b;
  ASSERT_EQ(qp->write(ns, buf(), 7, 1, Io::cb, &a), 0);
  ASSERT_EQ(qp->write(ns, buf(), 8, 1, Io::cb, &b), 0);
  qp->flush_doorbell();
  EXPECT_EQ(qp->process_completions(), 0) << "sent to the device: nothing until it answers";
  Device d{*this, {}};
  d.answer_all();
  ASSERT_EQ(d.seen.size(), 2u) << "override mode still submits";
  EXPECT_EQ(qp->process_completions(), 2);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.sc(), sn::sc::kDataTransferError);
  EXPECT_TRUE(a.dnr());
  EXPECT_EQ(a.last.status & 1, 1) << "the phase tag is the device's";
  EXPECT_EQ(b.calls, 1);
  EXPECT_FALSE(cpl_is_error(b.last));
  EXPECT_EQ(qp->stats().injected, 1u);
}

TEST_F(Harness, InjectionByLbaRangeMatchesOverlapsOnly) {
  auto qp = make();
  ErrorInjection rule;
  rule.any_opcode = true;
  rule.match_lba = true;
  rule.lba_lo = 100;
  rule.lba_hi = 199;
  rule.count = 0;  // unlimited
  rule.do_not_submit = true;
  rule.sc = sn::sc::kLbaOutOfRange;
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  struct Case { uint64_t lba; uint32_t nlb; bool hit; };
  const Case cases[] = {{0, 8, false},   {92, 8, false}, {92, 9, true},  {100, 1, true},
                        {150, 64, true}, {199, 1, true}, {200, 8, false}, {1ull << 33, 8, false}};
  std::vector<Io> io(std::size(cases) + 2);
  for (std::size_t i = 0; i < std::size(cases); ++i)
    ASSERT_EQ(qp->read(ns, buf(), cases[i].lba, cases[i].nlb, Io::cb, &io[i]), 0);
  // Write Zeroes is an LBA command too; Flush is not, and never matches an LBA rule.
  ASSERT_EQ(qp->write_zeroes(ns, 120, 4, Io::cb, &io[std::size(cases)]), 0);
  ASSERT_EQ(qp->flush(ns, Io::cb, &io[std::size(cases) + 1]), 0);
  qp->flush_doorbell();
  Device d{*this, {}};
  d.answer_all();
  qp->process_completions();
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    ASSERT_EQ(io[i].calls, 1) << i;
    EXPECT_EQ(cpl_is_error(io[i].last), cases[i].hit) << "lba " << cases[i].lba;
  }
  EXPECT_TRUE(cpl_is_error(io[std::size(cases)].last));
  EXPECT_FALSE(cpl_is_error(io[std::size(cases) + 1].last));
  EXPECT_EQ(qp->stats().injected, 5u);
  EXPECT_EQ(d.seen.size(), std::size(cases) + 2 - 5);
  EXPECT_EQ(qp->error_injections_armed(), 1u) << "unlimited stays armed";
  qp->clear_error_injections();
  Io after;
  ASSERT_EQ(qp->read(ns, buf(), 150, 1, Io::cb, &after), 0);
  qp->flush_doorbell();
  d.answer_all();
  qp->process_completions();
  EXPECT_FALSE(cpl_is_error(after.last));
}

TEST_F(Harness, InjectionTimeWindowOnTheQpairClock) {
  auto qp = make();
  const uint64_t t0 = clock.now();
  ErrorInjection rule;
  rule.opcode = sn::nvm::kWrite;
  rule.count = 0;
  rule.do_not_submit = true;
  rule.sc = sn::sc::kInternalError;
  rule.start_tick = t0 + clock.us_to_ticks(10);
  rule.end_tick = t0 + clock.us_to_ticks(20);
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  Device d{*this, {}};
  auto one = [&](uint64_t at_us) {
    clock.advance(t0 + clock.us_to_ticks(at_us) - clock.now());
    Io io;
    EXPECT_EQ(qp->write(ns, buf(), 0, 1, Io::cb, &io), 0);
    qp->flush_doorbell();
    d.answer_all();
    qp->process_completions();
    EXPECT_EQ(io.calls, 1);
    return cpl_is_error(io.last);
  };
  EXPECT_FALSE(one(0));
  EXPECT_FALSE(one(9));
  EXPECT_TRUE(one(10));
  EXPECT_TRUE(one(19));
  EXPECT_FALSE(one(20));
  EXPECT_EQ(qp->stats().injected, 2u);
  ErrorInjection bad = rule;
  bad.end_tick = bad.start_tick;
  EXPECT_EQ(qp->add_error_injection(bad), -EINVAL);
  bad = rule;
  bad.match_lba = true;
  bad.lba_lo = 5;
  bad.lba_hi = 4;
  EXPECT_EQ(qp->add_error_injection(bad), -EINVAL);
}

TEST_F(Harness, InjectionRulesInOrderFirstMatchWinsAndTableIsBounded) {
  auto qp = make();
  ErrorInjection a;
  a.opcode = sn::nvm::kRead;
  a.sc = sn::sc::kInvalidField;
  a.do_not_submit = true;
  a.count = 1;
  ErrorInjection b = a;
  b.any_opcode = true;
  b.sc = sn::sc::kInternalError;
  ASSERT_EQ(qp->add_error_injection(a), 0);
  ASSERT_EQ(qp->add_error_injection(b), 0);
  Io r1, r2;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &r1), 0);
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &r2), 0);
  qp->process_completions();
  EXPECT_EQ(r1.sc(), sn::sc::kInvalidField);
  EXPECT_EQ(r2.sc(), sn::sc::kInternalError);
  for (uint32_t i = 0; i < Qpair::kMaxErrorInjections; ++i) ASSERT_EQ(qp->add_error_injection(a), 0);
  EXPECT_EQ(qp->add_error_injection(a), -ENOSPC);
}

// An unlimited do-not-submit rule and a callback that resubmits: each poll delivers what was
// queued before it, so the poll returns instead of spinning.
TEST_F(Harness, ResubmittingCallbackDoesNotLoopInOnePoll) {
  auto qp = make();
  ErrorInjection rule;
  rule.any_opcode = true;
  rule.count = 0;
  rule.do_not_submit = true;
  rule.sc = sn::sc::kInternalError;
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  struct Retry {
    Harness* h;
    Qpair* qp;
    int calls = 0;
    static void cb(void* ctx, const sn::CompletionEntry&) {
      auto* r = static_cast<Retry*>(ctx);
      ++r->calls;
      EXPECT_EQ(r->qp->read(r->h->ns, r->h->buf(), 0, 1, cb, r), 0);
    }
  } retry{this, qp.get()};
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Retry::cb, &retry), 0);
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(retry.calls, 2);
  EXPECT_EQ(qp->outstanding(), 1u);
  qp->clear_error_injections();
  EXPECT_EQ(qp->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion, true)), 1u);
}

// ----------------------------------------------------------------- surprise removal ---

TEST_F(Harness, RemovalFailsEverythingOnceWithDnrAndRefusesNewWork) {
  QpairOptions o;
  o.queue_size = 4;  // 3 slots: the rest waits in software
  o.num_requests = 16;
  auto qp = make(o);
  std::vector<Io> io(8);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(qp->read(ns, buf(), i, 1, Io::cb, &io[i]), 0);
  ErrorInjection rule;
  rule.any_opcode = true;
  rule.do_not_submit = true;
  rule.sc = sn::sc::kInternalError;
  ASSERT_EQ(qp->add_error_injection(rule), 0);
  ASSERT_EQ(qp->read(ns, buf(), 6, 1, Io::cb, &io[6]), 0);  // an injected one, not yet delivered
  qp->flush_doorbell();
  // The device completes the first, then vanishes; its CQE for the second is already written.
  const auto e0 = fetch();
  post(e0.cid);
  ASSERT_EQ(qp->process_completions(), 2);  // e0 and the injected one
  const auto e1 = fetch();
  post(e1.cid);
  EXPECT_EQ(io[0].calls, 1);
  EXPECT_EQ(io[6].calls, 1);
  ASSERT_EQ(qp->read(ns, buf(), 7, 1, Io::cb, &io[7]), 0);  // injected again? no: rule used up
  dev.unplug();
  EXPECT_EQ(qp->process_completions(), -ENODEV);
  EXPECT_EQ(qp->stats().failed_on_removal, 6u);
  EXPECT_EQ(qp->outstanding(), 0u);
  for (int i = 1; i < 8; ++i) {
    if (i == 6) continue;
    EXPECT_EQ(io[i].calls, 1) << i;
    EXPECT_EQ(io[i].sct(), sn::sct::kPath) << i;
    EXPECT_EQ(io[i].sc(), kScHostPathingError) << i;
    EXPECT_TRUE(io[i].dnr()) << i;
  }
  // Again: nothing twice, the CQE the device left behind is never delivered.
  EXPECT_EQ(qp->process_completions(), -ENODEV);
  EXPECT_EQ(qp->stats().failed_on_removal, 6u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(io[i].calls, 1) << i;
  Io late;
  EXPECT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &late), -ENODEV);
  EXPECT_EQ(qp->write(ns, buf(), 0, 1, Io::cb, &late), -ENODEV);
  EXPECT_EQ(qp->flush(ns, Io::cb, &late), -ENODEV);
  EXPECT_EQ(qp->write_zeroes(ns, 0, 1, Io::cb, &late), -ENODEV);
  sn::SubmissionEntry raw{};
  raw.opcode = sn::nvm::kFlush;
  EXPECT_EQ(qp->submit_raw(raw, nullptr, 0, Io::cb, &late), -ENODEV);
  EXPECT_EQ(late.calls, 0);
  EXPECT_EQ(qp->fail_all(0x10), 0u) << "nothing left to fail";
}

// A callback run by the removal path that polls again and submits again must neither
// recurse into a second round nor get a request in.
TEST_F(Harness, RemovalCallbacksThatPollAndSubmitAreSafe) {
  auto qp = make();
  struct Reentrant {
    Harness* h;
    Qpair* qp;
    int calls = 0;
    int poll_rc = 0, submit_rc = 0;
    static void cb(void* ctx, const sn::CompletionEntry&) {
      auto* r = static_cast<Reentrant*>(ctx);
      ++r->calls;
      r->poll_rc = r->qp->process_completions();
      r->submit_rc = r->qp->read(r->h->ns, r->h->buf(), 0, 1, Io::cb, nullptr);
    }
  };
  std::vector<Reentrant> rs(4, Reentrant{this, qp.get()});
  for (auto& r : rs) ASSERT_EQ(qp->read(ns, buf(), 0, 1, Reentrant::cb, &r), 0);
  qp->flush_doorbell();
  dev.unplug();
  EXPECT_EQ(qp->process_completions(), -ENODEV);
  for (auto& r : rs) {
    EXPECT_EQ(r.calls, 1);
    EXPECT_EQ(r.poll_rc, -ENODEV);
    EXPECT_EQ(r.submit_rc, -ENODEV);
  }
  EXPECT_EQ(qp->outstanding(), 0u);
  EXPECT_EQ(qp->stats().failed_on_removal, 4u);
}

// -------------------------------------------------------- misbehaving device ---

TEST_F(Harness, DuplicateCompletionAfterTheCidWasReusedIsIgnored) {
  auto qp = make();
  Io first, second;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &first), 0);
  qp->flush_doorbell();
  const auto e = fetch();
  post(e.cid);
  ASSERT_EQ(qp->process_completions(), 1);
  // The request is reused at once (LIFO free list): same slot, a new generation in its CID.
  ASSERT_EQ(qp->read(ns, buf(), 1, 1, Io::cb, &second), 0);
  qp->flush_doorbell();
  const auto e2 = fetch();
  EXPECT_NE(e2.cid, e.cid);
  post(e.cid);  // the device repeats the old completion
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(second.calls, 0) << "a stale CID must not complete the request that reuses its slot";
  EXPECT_EQ(qp->stats().bad_completions, 1u);
  post(e2.cid);
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(second.calls, 1);
}

TEST_F(Harness, UnknownCidsWrongSqidAndNotOutstandingAreCountedNotDelivered) {
  auto qp = make();
  Io io;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &io), 0);
  qp->flush_doorbell();
  const auto e = fetch();
  post(0xffff);                               // beyond every request
  post(static_cast<uint16_t>(e.cid ^ 1));     // a neighbour never submitted
  // Right CID, another queue's SQID.
  sn::CompletionEntry c{};
  c.cid = e.cid;
  c.sqid = 2;
  c.sqhd = 1;
  c.status = dev_phase;
  cq[dev_cq_tail++] = c;
  EXPECT_EQ(qp->process_completions(), 3);
  EXPECT_EQ(io.calls, 0);
  EXPECT_EQ(qp->stats().bad_completions, 3u);
  EXPECT_EQ(qp->outstanding(), 1u);
  post(e.cid);
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(io.calls, 1);
  post(e.cid);  // duplicate, slot not reused
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(io.calls, 1);
  EXPECT_EQ(qp->stats().bad_completions, 4u);
  EXPECT_EQ(qp->stats().completed, 1u);
}

TEST_F(Harness, WrongPhaseEntriesAreNotConsumed) {
  QpairOptions o;
  o.queue_size = 8;
  auto qp = make(o);
  Io io;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Io::cb, &io), 0);
  qp->flush_doorbell();
  const auto e = fetch();
  sn::CompletionEntry c{};
  c.cid = e.cid;
  c.sqid = 1;
  c.sqhd = 1;
  c.status = static_cast<uint16_t>(dev_phase ^ 1);  // stale phase: not new
  cq[dev_cq_tail] = c;
  EXPECT_EQ(qp->process_completions(), 0);
  EXPECT_EQ(io.calls, 0);
  EXPECT_EQ(cq_doorbell(), 0u) << "the head does not move over an old entry";
  post(e.cid);  // the same slot, right phase
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(io.calls, 1);
}

TEST_F(Harness, SqHeadBeyondTheTailIsIgnored) {
  QpairOptions o;
  o.queue_size = 4;
  o.num_requests = 8;
  auto qp = make(o);
  std::vector<Io> io(5);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(qp->read(ns, buf(), i, 1, Io::cb, &io[i]), 0);
  qp->flush_doorbell();  // 3 in the SQ, 2 waiting
  const auto e = fetch();
  sn::CompletionEntry c{};
  c.cid = e.cid;
  c.sqid = 1;
  c.sqhd = 3;  // claims every slot was fetched... but only one was
  c.status = dev_phase;
  cq[dev_cq_tail++] = c;
  // Plausible in range (3 <= tail): accepted, so this one can't be told from a real one;
  // what matters is a head past the tail.
  ASSERT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(qp->stats().bad_sq_heads, 0u);
  // Head 3, and the two waiting requests went in: tail 1. Valid heads: 3, 0, 1.
  for (uint16_t bad : {uint16_t{2}, uint16_t{77}}) {
    sn::CompletionEntry d{};
    d.cid = fetch().cid;
    d.sqid = 1;
    d.sqhd = bad;
    d.status = dev_phase;
    cq[dev_cq_tail++] = d;
    ASSERT_EQ(qp->process_completions(), 1);
  }
  EXPECT_EQ(qp->stats().bad_sq_heads, 2u);
  EXPECT_EQ(io[1].calls, 1) << "the completion itself is good and delivered";
  EXPECT_EQ(io[2].calls, 1);
  EXPECT_EQ(qp->stats().bad_completions, 0u);
}

}  // namespace
}  // namespace pollux::nvme
