// Queue mechanics: CQ back-pressure, doorbell validation, phase wrap, many queues, interrupts,
// the layering API.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

TEST(Queues, FullCqStopsFetchingAndNeverOverwrites) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  HostQueue& q = h.queue(1);
  // CQ of 4 entries (3 usable), SQ of 16.
  q = HostQueue{};
  q.qid = q.cqid = 1;
  q.cq_size = 4;
  q.sq_size = 16;
  q.cq = reinterpret_cast<sp::CompletionEntry*>(h.alloc(4096));
  q.sq = reinterpret_cast<sp::SubmissionEntry*>(h.alloc(4096));
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kCreateIoCq;
  c.dptr.prp.prp1 = TestHost::iova(q.cq);
  c.cdw10 = 3u << 16 | 1;
  c.cdw11 = 1;
  ASSERT_TRUE(ok(h.admin(c)));
  c = sp::SubmissionEntry{};
  c.opcode = sp::admin::kCreateIoSq;
  c.dptr.prp.prp1 = TestHost::iova(q.sq);
  c.cdw10 = 15u << 16 | 1;
  c.cdw11 = 1 | 1u << 16;
  ASSERT_TRUE(ok(h.admin(c)));

  uint8_t* b = h.alloc(4096);
  std::set<uint16_t> cids;
  for (int i = 0; i < 10; ++i) cids.insert(h.submit(q, TestHost::rw(sp::nvm::kRead, 1, i, 1, TestHost::iova(b)), false));
  h.ring_sq(q);
  EXPECT_EQ(h.ctrl().poll(64), 3u);
  EXPECT_GT(h.ctrl().counters().cq_full_stalls, 0u);
  EXPECT_EQ(h.ctrl().poll(64), 0u);  // still full: the host has not moved the head
  // The fourth slot is untouched (phase 0).
  EXPECT_EQ(q.cq[3].status & 1, 0);
  std::set<uint16_t> seen;
  uint16_t last_sqhd = 0;
  while (seen.size() < 10) {
    int got = 0;
    while (auto e = h.reap(q, /*ring=*/false)) {
      EXPECT_TRUE(ok(*e));
      EXPECT_EQ(e->sqid, 1);
      seen.insert(e->cid);
      last_sqhd = e->sqhd;
      ++got;
    }
    ASSERT_GT(got, 0);
    h.write_cq_doorbell(1, q.cq_head);
    h.ctrl().poll(64);
  }
  EXPECT_EQ(seen, cids);
  EXPECT_EQ(last_sqhd, 10);
  EXPECT_EQ(h.ctrl().counters().completions_posted - 0, h.ctrl().counters().completions_posted);
}

TEST(Queues, InvalidDoorbellValuesAreRecordedNotFatal) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 8));
  Controller& c = h.ctrl();
  h.write_sq_doorbell(1, 8);  // tail == size
  EXPECT_EQ(c.poll(8), 0u);
  EXPECT_EQ(c.counters().doorbell_errors, 1u);
  h.write_sq_doorbell(1, 0xffffffff);
  c.poll(8);
  EXPECT_EQ(c.counters().doorbell_errors, 2u);
  h.write_cq_doorbell(1, 3);  // head beyond the tail (nothing posted yet)
  c.poll(8);
  EXPECT_EQ(c.counters().doorbell_errors, 3u);
  h.write_cq_doorbell(1, 99);  // head >= size
  c.poll(8);
  EXPECT_EQ(c.counters().doorbell_errors, 4u);
  h.write_cq_doorbell(1, 0);  // back to valid
  c.poll(8);
  EXPECT_EQ(c.counters().doorbell_errors, 4u);
  // Doorbells of queues that do not exist.
  h.write_sq_doorbell(5, 1);
  h.write_cq_doorbell(5, 1);
  EXPECT_EQ(c.counters().doorbell_errors, 6u);
  EXPECT_FALSE(c.fatal());
  // The queue still works.
  uint8_t* b = h.alloc(4096);
  EXPECT_TRUE(ok(h.io(1, TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(b)))));
  // The error log has entries for the doorbell errors (CID FFFFh).
  ASSERT_TRUE(ok(h.admin(TestHost::get_log(sp::log::kErrorInformation, 64, TestHost::iova(b)))));
  EXPECT_EQ(reinterpret_cast<const sp::ErrorLogEntry*>(b)->cid, 0xffff);
}

TEST(Queues, InvalidDoorbellCompletesOutstandingAer) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  sp::SubmissionEntry aer{};
  aer.opcode = sp::admin::kAsyncEventRequest;
  const uint16_t cid = h.submit(h.admin_queue(), aer);
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));
  h.write_sq_doorbell(9, 1);  // write to the doorbell of a queue that does not exist
  auto e = h.reap(h.admin_queue());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cid, cid);
  EXPECT_TRUE(ok(*e));
  EXPECT_EQ(e->dw0, sp::aer::make_dw0(sp::aer::kTypeError, sp::aer::kInfoErrorInvalidDoorbellRegister,
                                      sp::log::kErrorInformation));
}

TEST(Queues, PhaseTagWrapsAndSqhdFollows) {
  TestHost h;
  ASSERT_TRUE(h.enable(4));  // admin queue of 4 entries
  ASSERT_TRUE(h.create_io_queue_pair(1, 4));
  uint8_t* b = h.alloc(4096);
  for (int i = 0; i < 25; ++i) {
    auto e = h.io(1, TestHost::rw(sp::nvm::kRead, 1, i, 1, TestHost::iova(b)));
    ASSERT_TRUE(ok(e)) << i;
    EXPECT_EQ(e.sqhd, (i + 1) % 4);
  }
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(ok(h.admin(TestHost::identify(sp::cns::kController, 0, TestHost::iova(b)))));
  }
}

TEST(Queues, ManyQueuesRoundRobin) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  constexpr int kQueues = 16;
  for (int q = 1; q <= kQueues; ++q) ASSERT_TRUE(h.create_io_queue_pair(q, 32));
  // Arbitration burst 1 (AB = 0): one command per queue per turn.
  ASSERT_TRUE(ok(h.admin(TestHost::set_features(sp::feature::kArbitration, 0))));
  std::vector<uint8_t*> bufs;
  for (int q = 1; q <= kQueues; ++q) {
    uint8_t* b = h.alloc(4096 * 8);
    bufs.push_back(b);
    for (int i = 0; i < 8; ++i) {
      std::memset(b + i * 4096, q * 16 + i, 4096);
      h.submit(h.queue(q), TestHost::rw(sp::nvm::kWrite, 2, q * 8 + i, 1, TestHost::iova(b + i * 4096)), false);
    }
    h.ring_sq(h.queue(q));
  }
  // A small budget: every queue gets a turn before any queue gets a second burst.
  size_t fetched = h.ctrl().poll(kQueues);
  EXPECT_EQ(fetched, size_t{kQueues});
  int queues_with_completions = 0;
  for (int q = 1; q <= kQueues; ++q) {
    if (h.queue(q).cq[0].status & 1) ++queues_with_completions;
  }
  EXPECT_EQ(queues_with_completions, kQueues);
  while (h.ctrl().poll(64)) {
  }
  for (int q = 1; q <= kQueues; ++q) {
    int n = 0;
    while (auto e = h.reap(h.queue(q))) {
      EXPECT_TRUE(ok(*e));
      ++n;
    }
    EXPECT_EQ(n, 8) << q;
  }
  // Read everything back through queue 16.
  uint8_t* r = h.alloc(4096);
  for (int q = 1; q <= kQueues; ++q) {
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(ok(h.io(kQueues, TestHost::rw(sp::nvm::kRead, 2, q * 8 + i, 1, TestHost::iova(r)))));
      ASSERT_EQ(r[0], static_cast<uint8_t>(q * 16 + i));
      ASSERT_EQ(r[4095], static_cast<uint8_t>(q * 16 + i));
    }
  }
}

TEST(Queues, SeveralSqsShareOneCq) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  HostQueue& q2 = h.queue(2);
  q2 = HostQueue{};
  q2.qid = 2;
  q2.cqid = 1;
  q2.sq_size = 16;
  q2.sq = reinterpret_cast<sp::SubmissionEntry*>(h.alloc(4096));
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kCreateIoSq;
  c.dptr.prp.prp1 = TestHost::iova(q2.sq);
  c.cdw10 = 15u << 16 | 2;
  c.cdw11 = 1 | 1u << 16;
  ASSERT_TRUE(ok(h.admin(c)));
  uint8_t* b = h.alloc(4096);
  h.submit(q2, TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(b)));
  h.submit(h.queue(1), TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(b)));
  h.ctrl().poll(8);
  std::set<uint16_t> sqids;
  while (auto e = h.reap(h.queue(1))) sqids.insert(e->sqid);
  EXPECT_EQ(sqids, (std::set<uint16_t>{1, 2}));
}

TEST(Queues, InterruptHandlerGetsTheVector) {
  TestHost h;
  std::vector<uint16_t> vectors;
  h.ctrl().set_interrupt_handler([&](uint16_t v) { vectors.push_back(v); });
  ASSERT_TRUE(h.enable());
  EXPECT_TRUE(vectors.empty());
  uint8_t* b = h.alloc(4096);
  ASSERT_TRUE(ok(h.admin(TestHost::identify(sp::cns::kController, 0, TestHost::iova(b)))));
  ASSERT_EQ(vectors.size(), 1u);
  EXPECT_EQ(vectors[0], 0);
  vectors.clear();
  ASSERT_TRUE(h.create_io_queue_pair(3, 16));  // create_io_queue_pair uses IV = qid
  vectors.clear();
  ASSERT_TRUE(ok(h.io(3, TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(b)))));
  ASSERT_EQ(vectors.size(), 1u);
  EXPECT_EQ(vectors[0], 3);
}

TEST(Queues, LayeringExecuteThenPostLater) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* b = h.alloc(4096);
  std::memset(b, 0x3c, 4096);
  sp::SubmissionEntry w = TestHost::rw(sp::nvm::kWrite, 2, 9, 1, TestHost::iova(b));
  w.cid = 77;
  sp::CompletionEntry cqe{};
  ASSERT_TRUE(h.ctrl().execute(1, w, &cqe));
  EXPECT_EQ(cqe.cid, 77);
  EXPECT_EQ(cqe.sqid, 1);
  EXPECT_EQ(cqe.status, 0);
  EXPECT_FALSE(h.reap(h.queue(1)));  // nothing posted yet
  h.ctrl().post_completion(1, cqe);
  auto e = h.reap(h.queue(1));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cid, 77);
  EXPECT_TRUE(ok(*e));
}

TEST(Queues, SqDeletionDropsUnfetchedCommands) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* b = h.alloc(4096);
  h.submit(h.queue(1), TestHost::rw(sp::nvm::kWrite, 1, 0, 1, TestHost::iova(b)), false);
  h.ring_sq(h.queue(1));
  sp::SubmissionEntry d{};
  d.opcode = sp::admin::kDeleteIoSq;
  d.cdw10 = 1;
  ASSERT_TRUE(ok(h.admin(d)));  // admin runs first in the poll: the write never executes
  EXPECT_EQ(h.ctrl().counters().io_writes, 0u);
  d.opcode = sp::admin::kDeleteIoCq;
  ASSERT_TRUE(ok(h.admin(d)));
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
