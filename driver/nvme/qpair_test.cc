// Queue-pair behaviour against a scripted device: the test plays the controller, reading
// SQEs the driver wrote to DMA memory and posting CQEs (any CQE, including wrong ones).
#include "driver/nvme/qpair.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/pcie.h"
#include "driver/nvme/scripted_device.h"
#include "driver/nvme/status.h"

namespace pollux::nvme {
namespace {

using testing::Done;
using testing::Harness;
using testing::ScriptedDevice;

TEST_F(Harness, ReadBuildsTheCommandAndBatchesTheDoorbell) {
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0x123456789ull, 8, Done::cb, &d, spec::nvme::nvm::kCdw12Fua), 0);
  EXPECT_EQ(sq_doorbell(), 0u);  // batched: not rung yet
  qp->flush_doorbell();
  EXPECT_EQ(sq_doorbell(), 1u);
  const auto e = fetch();
  EXPECT_EQ(e.opcode, spec::nvme::nvm::kRead);
  EXPECT_EQ(e.nsid, 1u);
  EXPECT_EQ(e.cdw10, 0x23456789u);
  EXPECT_EQ(e.cdw11, 0x1u);
  EXPECT_EQ(e.cdw12, 7u | spec::nvme::nvm::kCdw12Fua);
  EXPECT_EQ(e.psdt(), spec::nvme::kPsdtPrp);
  EXPECT_EQ(e.dptr.prp.prp1, data->iova());
  EXPECT_EQ(e.dptr.prp.prp2, 0u);  // 4 KiB, page aligned: one page
  post(e.cid);
  EXPECT_EQ(qp->process_completions(), 1);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(cq_doorbell(), 1u);
  EXPECT_EQ(qp->outstanding(), 0u);
}

TEST_F(Harness, UnbatchedModeRingsOnEverySubmit) {
  QpairOptions o;
  o.batch_doorbells = false;
  auto qp = make(o);
  Done d;
  ASSERT_EQ(qp->write(ns, buf(), 0, 1, Done::cb, &d), 0);
  EXPECT_EQ(sq_doorbell(), 1u);
  ASSERT_EQ(qp->write(ns, buf(), 1, 1, Done::cb, &d), 0);
  EXPECT_EQ(sq_doorbell(), 2u);
  EXPECT_EQ(qp->stats().doorbells, 2u);
}

// Two queue pairs counting into one group (a simulator's CPU-time model reads the group):
// each poll, submission, doorbell and completion lands in the group too, until it leaves.
TEST_F(Harness, QueuePairsCountTheirWorkIntoAGroupUntilTheyLeave) {
  auto a = make();
  QpairWorkCounts group;
  Done d;
  ASSERT_EQ(a->read(ns, buf(), 0, 1, Done::cb, &d), 0);  // before joining: not counted
  a->count_work_into(&group);
  ASSERT_EQ(a->read(ns, buf(), 1, 1, Done::cb, &d), 0);
  a->flush_doorbell();
  EXPECT_EQ(group.submitted, 1u);
  EXPECT_EQ(group.doorbells, 1u);
  post(fetch().cid);
  post(fetch().cid);
  EXPECT_EQ(a->process_completions(), 2);
  EXPECT_EQ(group.polls, 1u);
  EXPECT_EQ(group.completed, 2u);
  EXPECT_EQ(a->stats().submitted, 2u);  // its own statistics count everything
  a->count_work_into(nullptr);
  EXPECT_EQ(a->process_completions(), 0);
  EXPECT_EQ(group.polls, 1u);
  EXPECT_EQ(a->stats().polls, 2u);
}

TEST_F(Harness, DoorbellsWithoutAMappingGoThroughBarWrites) {
  dev.mapped_doorbells = false;
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  qp->flush_doorbell();
  EXPECT_EQ(dev.slow_writes, 1);
  EXPECT_EQ(sq_doorbell(), 1u);
}

TEST_F(Harness, PrpListsForMultiPageAndUnalignedBuffers) {
  auto qp = make();
  Done d;
  // 8 KiB aligned: PRP2 is the second page itself.
  ASSERT_EQ(qp->read(ns, buf(), 0, 16, Done::cb, &d), 0);
  auto e = fetch();
  EXPECT_EQ(e.dptr.prp.prp2, data->iova() + 4096);
  // 12 KiB starting 512 bytes into a page: 4 pages → PRP1 + a list of 3.
  ASSERT_EQ(qp->read(ns, buf(512), 0, 24, Done::cb, &d), 0);
  e = fetch();
  EXPECT_EQ(e.dptr.prp.prp1, data->iova() + 512);
  const auto* list = reinterpret_cast<const uint64_t*>(e.dptr.prp.prp2);  // IOVA == vaddr
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(e.dptr.prp.prp2 % 4096, 0u);
  EXPECT_EQ(list[0], data->iova() + 4096);
  EXPECT_EQ(list[1], data->iova() + 8192);
  EXPECT_EQ(list[2], data->iova() + 12288);
  // Exactly one page but misaligned by 512: spans two pages.
  ASSERT_EQ(qp->read(ns, buf(512), 0, 8, Done::cb, &d), 0);
  e = fetch();
  EXPECT_EQ(e.dptr.prp.prp2, data->iova() + 4096);
}

TEST_F(Harness, VectoredPrpRulesAndSglFallback) {
  auto qp = make();
  Done d;
  iovec ok[2] = {{buf(0), 4096}, {buf(8192), 4096}};
  ASSERT_EQ(qp->readv(ns, ok, 2, 0, 16, Done::cb, &d), 0);
  auto e = fetch();
  EXPECT_EQ(e.dptr.prp.prp1, data->iova());
  EXPECT_EQ(e.dptr.prp.prp2, data->iova() + 8192);
  // A middle element not ending on a page boundary cannot be a PRP.
  iovec bad[2] = {{buf(0), 2048}, {buf(8192), 2048}};
  EXPECT_EQ(qp->readv(ns, bad, 2, 0, 8, Done::cb, &d), -EINVAL);
  // With SGL support the same layout is fine.
  ctx.sgl_supported = true;
  QpairOptions o;
  o.prefer_sgl = true;
  auto sglqp = make_pcie_qpair(ctx, 2, o);
  ASSERT_TRUE(sglqp.ok());
  ASSERT_EQ((*sglqp)->readv(ns, bad, 2, 0, 8, Done::cb, &d), 0);
  auto* sq2 = reinterpret_cast<spec::nvme::SubmissionEntry*>(pcie_queue(**sglqp).sq_iova());
  const auto& s = sq2[0];
  EXPECT_EQ(s.psdt(), spec::nvme::kPsdtSglMptrContiguous);
  EXPECT_EQ(s.dptr.sgl1.type(), spec::nvme::sgl::kTypeLastSegment);
  EXPECT_EQ(s.dptr.sgl1.length, 32u);
  const auto* descs = reinterpret_cast<const spec::nvme::SglDescriptor*>(s.dptr.sgl1.address);
  EXPECT_EQ(descs[0].address, data->iova());
  EXPECT_EQ(descs[0].length, 2048u);
  EXPECT_EQ(descs[1].address, data->iova() + 8192);
  EXPECT_EQ(descs[1].type(), spec::nvme::sgl::kTypeDataBlock);
}

TEST_F(Harness, RefusesBadBuffersAndOversizedTransfers) {
  auto qp = make();
  Done d;
  std::vector<uint8_t> heap(4096);  // not DMA memory
  EXPECT_EQ(qp->read(ns, heap.data(), 0, 8, Done::cb, &d), -EINVAL);
  EXPECT_EQ(qp->read(ns, buf(), 0, 0, Done::cb, &d), -EINVAL);
  EXPECT_EQ(qp->outstanding(), 0u);  // refused submissions left nothing behind
}

// Beyond MDTS a read is split as SPDK's driver splits it: commands of at most MDTS, in LBA
// order, each with its slice of the buffer; the caller hears once, when the last completes.
TEST_F(Harness, ReadsBeyondMdtsAreSplitAndCompleteOnce) {
  ctx.max_transfer = 128 * 1024;  // 256 blocks of 512 bytes
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 1000, 600, Done::cb, &d), 0);
  qp->flush_doorbell();
  EXPECT_EQ(qp->stats().split_ios, 1u);
  EXPECT_EQ(qp->stats().split_children, 3u);
  const uint32_t want_nlb[] = {256, 256, 88};
  uint16_t cids[3];
  for (int k = 0; k < 3; ++k) {
    const auto e = fetch();
    EXPECT_EQ(e.opcode, spec::nvme::nvm::kRead);
    EXPECT_EQ(e.cdw10, 1000u + 256u * k) << "command " << k;
    EXPECT_EQ((e.cdw12 & 0xffff) + 1, want_nlb[k]) << "command " << k;
    EXPECT_EQ(e.dptr.prp.prp1, registry.translate(buf(std::size_t{256} * 512 * k), 4096))
        << "command " << k << " starts at its slice";
    cids[k] = e.cid;
  }
  post(cids[1]);
  post(cids[0]);
  qp->process_completions();
  EXPECT_EQ(d.calls, 0) << "called before every part completed";
  post(cids[2]);
  qp->process_completions();
  EXPECT_EQ(d.calls, 1);
  EXPECT_FALSE(cpl_is_error(d.last));
  EXPECT_EQ(qp->outstanding(), 0u);
}

// A part that fails fails the whole I/O, once, after the others have completed.
TEST_F(Harness, ASplitIoFailsWithItsFirstErrorAfterAllParts) {
  ctx.max_transfer = 128 * 1024;
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->write(ns, buf(), 0, 512, Done::cb, &d), 0);
  qp->flush_doorbell();
  const auto a = fetch(), b = fetch();
  post(a.cid,
       spec::nvme::status::make(spec::nvme::sct::kMediaError, spec::nvme::sc_media::kWriteFault));
  qp->process_completions();
  EXPECT_EQ(d.calls, 0);
  post(b.cid);
  qp->process_completions();
  ASSERT_EQ(d.calls, 1);
  EXPECT_EQ(Status::from_cqe(d.last.status).sc, spec::nvme::sc_media::kWriteFault);
}

// Not enough free requests for every part (and the collector): refused whole, nothing sent.
TEST_F(Harness, ASplitThatCannotGetItsRequestsIsRefusedWhole) {
  ctx.max_transfer = 128 * 1024;
  QpairOptions o;
  o.queue_size = 8;
  o.num_requests = 3;  // a split into 3 needs 4
  auto qp = make(o);
  Done d;
  EXPECT_EQ(qp->read(ns, buf(), 0, 600, Done::cb, &d), -ENOMEM);
  EXPECT_EQ(qp->outstanding(), 0u);
  EXPECT_EQ(qp->stats().submitted, 0u);
  EXPECT_EQ(qp->read(ns, buf(), 0, 512, Done::cb, &d), 0);  // 2 parts + collector: fits
  EXPECT_EQ(qp->stats().split_children, 2u);
}

TEST_F(Harness, FullSubmissionQueueQueuesInOrderInsteadOfFailing) {
  QpairOptions o;
  o.queue_size = 4;  // 3 usable slots
  o.num_requests = 8;
  auto qp = make(o);
  std::vector<Done> d(8);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(qp->read(ns, buf(), i, 1, Done::cb, &d[i]), 0) << i;
  Done extra;
  EXPECT_EQ(qp->read(ns, buf(), 9, 1, Done::cb, &extra), -ENOMEM);  // requests exhausted
  qp->flush_doorbell();
  EXPECT_EQ(qp->stats().submitted, 3u);
  EXPECT_EQ(qp->stats().queued, 5u);
  std::vector<uint64_t> lbas;
  for (int round = 0; lbas.size() < 8 && round < 10; ++round) {
    while (dev_sq_head != sq_doorbell()) {
      const auto e = fetch();
      lbas.push_back(e.cdw10);
      post(e.cid);
    }
    qp->process_completions();
  }
  EXPECT_EQ(lbas, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (auto& x : d) EXPECT_EQ(x.calls, 1);
}

// cancel_waiting ends the requests that wait for an SQ slot, chosen by callback and context,
// and only those: what is in the SQ, and what waits for another owner, still goes out.
TEST_F(Harness, CancelWaitingEndsOnlyTheChosenRequestsThatNeverReachedTheSq) {
  QpairOptions o;
  o.queue_size = 2;  // 1 slot: the others wait in software
  o.num_requests = 8;
  auto qp = make(o);
  Done placed, keep, give_up;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &placed), 0);
  ASSERT_EQ(qp->read(ns, buf(), 1, 1, Done::cb, &give_up), 0);
  ASSERT_EQ(qp->read(ns, buf(), 2, 1, Done::cb, &keep), 0);
  ASSERT_EQ(qp->read(ns, buf(), 3, 1, Done::cb, &give_up), 0);
  qp->flush_doorbell();
  static Done* chosen;
  chosen = &give_up;
  const uint16_t st =
      spec::nvme::status::make(spec::nvme::sct::kGeneric, spec::nvme::sc::kAbortedByRequest);
  EXPECT_EQ(qp->cancel_waiting(Done::cb, [](void* ctx) { return ctx == chosen; }, st), 2u);
  EXPECT_EQ(give_up.calls, 2);
  EXPECT_EQ(Status::from_cqe(give_up.last.status).sc, spec::nvme::sc::kAbortedByRequest);
  EXPECT_EQ(qp->cancel_waiting(Done::cb, [](void* ctx) { return ctx == chosen; }, st), 0u);
  std::vector<uint64_t> lbas;
  for (int round = 0; lbas.size() < 2 && round < 10; ++round) {
    while (dev_sq_head != sq_doorbell()) {
      const auto e = fetch();
      lbas.push_back(e.cdw10);
      post(e.cid);
    }
    qp->process_completions();
  }
  EXPECT_EQ(lbas, (std::vector<uint64_t>{0, 2}));  // the given-up reads never went out
  EXPECT_EQ(placed.calls, 1);
  EXPECT_EQ(keep.calls, 1);
  EXPECT_EQ(give_up.calls, 2);
  EXPECT_EQ(qp->outstanding(), 0u);
}

TEST_F(Harness, PhaseTagWrapsAcrossManyPasses) {
  QpairOptions o;
  o.queue_size = 8;
  auto qp = make(o);
  Done d;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(qp->read(ns, buf(), i, 1, Done::cb, &d), 0);
    qp->flush_doorbell();
    post(fetch().cid);
    ASSERT_EQ(qp->process_completions(), 1) << i;
    ASSERT_EQ(qp->process_completions(), 0) << "stale entry seen as new at " << i;
  }
  EXPECT_EQ(d.calls, 100);
}

TEST_F(Harness, CompletionsForUnknownCommandsAreIgnoredSafely) {
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  qp->flush_doorbell();
  const auto e = fetch();
  post(static_cast<uint16_t>(e.cid + 1));  // never submitted
  post(60000);                             // out of range
  post(e.cid);
  post(e.cid);  // duplicate
  EXPECT_EQ(qp->process_completions(), 4);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(qp->stats().bad_completions, 3u);
}

TEST_F(Harness, ErrorStatusReachesTheCallback) {
  auto qp = make();
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  qp->flush_doorbell();
  post(fetch().cid, spec::nvme::status::make(spec::nvme::sct::kMediaError,
                                             spec::nvme::sc_media::kUnrecoveredReadError));
  qp->process_completions();
  ASSERT_EQ(d.calls, 1);
  EXPECT_TRUE(cpl_is_error(d.last));
  EXPECT_EQ(Status::from_cqe(d.last.status).sc, spec::nvme::sc_media::kUnrecoveredReadError);
  EXPECT_EQ(qp->stats().errors, 1u);
}

struct Timeouts {
  std::vector<uint16_t> cids;
  static void cb(void* ctx, Qpair&, uint16_t cid) {
    static_cast<Timeouts*>(ctx)->cids.push_back(cid);
  }
};

TEST_F(Harness, TimeoutsAreDetectedOnPollOncePerCommand) {
  Timeouts t;
  QpairOptions o;
  o.timeout_us = 100;
  o.timeout_cb = Timeouts::cb;
  o.timeout_ctx = &t;
  auto qp = make(o);
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  clock.advance_us(50);
  ASSERT_EQ(qp->read(ns, buf(), 1, 1, Done::cb, &d), 0);
  qp->process_completions();
  EXPECT_TRUE(t.cids.empty());
  clock.advance_us(60);  // first is 110 µs old, second 60
  qp->process_completions();
  ASSERT_EQ(t.cids.size(), 1u);
  qp->process_completions();
  EXPECT_EQ(t.cids.size(), 1u);  // reported once
  clock.advance_us(50);
  qp->process_completions();
  EXPECT_EQ(t.cids.size(), 2u);
  EXPECT_NE(t.cids[0], t.cids[1]);
  EXPECT_EQ(qp->stats().timeouts, 2u);
  // A late completion of a timed-out command is still delivered.
  const auto e = fetch();
  post(e.cid);
  qp->process_completions();
  EXPECT_EQ(d.calls, 1);
}

// A command that stays hung must not stop later timeouts from being seen.
TEST_F(Harness, OneHungCommandDoesNotHideLaterTimeouts) {
  Timeouts t;
  QpairOptions o;
  o.timeout_us = 100;
  o.timeout_cb = Timeouts::cb;
  o.timeout_ctx = &t;
  auto qp = make(o);
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);  // will hang forever
  clock.advance_us(200);
  qp->process_completions();
  ASSERT_EQ(t.cids.size(), 1u);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_EQ(qp->read(ns, buf(), i, 1, Done::cb, &d), 0);
    clock.advance_us(200);
    qp->process_completions();
    ASSERT_EQ(t.cids.size(), static_cast<std::size_t>(1 + i)) << "timeout " << i << " missed";
  }
  EXPECT_EQ(qp->fail_all(1 << 1), 4u);  // hung and late ones are all still owned
  EXPECT_EQ(d.calls, 4);
}

// Overdue: still outstanding one timeout after its timeout was reported — counted from the
// report, not the submission, so a poll that comes late reports the timeout and leaves time
// for what it sets in motion (an Abort). Once per command; a completion still finds it.
TEST_F(Harness, OverdueIsReportedOneTimeoutAfterTheTimeoutOnce) {
  struct Both {
    Timeouts timeouts, overdue;
  } b;
  QpairOptions o;
  o.timeout_us = 100;
  o.timeout_cb = [](void* ctx, Qpair& q, uint16_t cid) {
    Timeouts::cb(&static_cast<Both*>(ctx)->timeouts, q, cid);
  };
  o.overdue_cb = [](void* ctx, Qpair& q, uint16_t cid) {
    Timeouts::cb(&static_cast<Both*>(ctx)->overdue, q, cid);
  };
  o.timeout_ctx = &b;
  auto qp = make(o);
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  ASSERT_EQ(qp->read(ns, buf(), 1, 1, Done::cb, &d), 0);
  clock.advance_us(1000);  // a late poll: ten timeouts old
  qp->process_completions();
  EXPECT_EQ(b.timeouts.cids.size(), 2u);
  EXPECT_TRUE(b.overdue.cids.empty()) << "not in the scan that reported the timeout";
  clock.advance_us(60);
  qp->process_completions();
  EXPECT_TRUE(b.overdue.cids.empty());
  clock.advance_us(60);  // 120 us after the report
  qp->process_completions();
  ASSERT_EQ(b.overdue.cids.size(), 2u);
  EXPECT_EQ(b.overdue.cids, b.timeouts.cids);
  clock.advance_us(1000);
  qp->process_completions();
  EXPECT_EQ(b.overdue.cids.size(), 2u) << "once";
  EXPECT_EQ(qp->stats().overdue, 2u);
  post(fetch().cid);  // the device completes one after all
  qp->process_completions();
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(qp->fail_all(1 << 1), 1u);  // the other is still owned
}

TEST_F(Harness, FailAllAndRemovedDevice) {
  QpairOptions o;
  o.queue_size = 2;  // 1 slot: the second request waits in software
  auto qp = make(o);
  Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 1, Done::cb, &d), 0);
  ASSERT_EQ(qp->read(ns, buf(), 1, 1, Done::cb, &d), 0);
  dev.unplug();
  EXPECT_EQ(qp->read(ns, buf(), 2, 1, Done::cb, &d), -ENODEV);
  // The first poll that sees the removal ends both (submitted and waiting), DNR set.
  EXPECT_EQ(qp->process_completions(), -ENODEV);
  EXPECT_EQ(d.calls, 2);
  EXPECT_EQ(Status::from_cqe(d.last.status).sct, spec::nvme::sct::kPath);
  EXPECT_EQ(Status::from_cqe(d.last.status).sc, kScHostPathingError);
  EXPECT_TRUE(Status::from_cqe(d.last.status).dnr);
  EXPECT_EQ(qp->outstanding(), 0u);
  const uint16_t st =
      spec::nvme::status::make(spec::nvme::sct::kGeneric, spec::nvme::sc::kAbortedSqDeletion);
  EXPECT_EQ(qp->fail_all(st), 0u);  // nothing left: nothing ends twice
  EXPECT_EQ(d.calls, 2);
}

}  // namespace
}  // namespace pollux::nvme
