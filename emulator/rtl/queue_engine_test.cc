// Directed tests of the queue engine rules (README.md), run against both the reference model and
// the verilated RTL.
#include <string>
#include <type_traits>
#include <vector>

#include "emulator/rtl/queue_engine.h"
#include "emulator/rtl/queue_engine_ref.h"
#include "emulator/rtl/rtl_queue_engine.h"
#include "emulator/rtl/test_inputs.h"
#include "gtest/gtest.h"

namespace pollux::emu::rtl {
namespace {

using namespace test;  // NOLINT: input builders
using V = std::vector<int>;

template <typename Model>
class QueueEngineTest : public ::testing::Test {
 protected:
  const QueueEngineOutputs& Tick(const QueueEngineInputs& in = {}) {
    out_ = model_.tick(in);
    return out_;
  }
  // `n` edges with fetch_ready: the SQ granted at each (-1: none); slots_ gets their slots.
  V Grants(int n) {
    V sqs;
    slots_.clear();
    for (int i = 0; i < n; ++i) {
      Tick(Fetch());
      sqs.push_back(out_.fetch_valid ? out_.fetch_sqid : -1);
      slots_.push_back(out_.fetch_valid ? out_.fetch_slot : -1);
    }
    return sqs;
  }
  // One completion request: the slot written (-1: refused); phase_ gets its phase tag.
  int Cpl(uint8_t cqid) {
    Tick(Complete(cqid));
    phase_ = out_.cpl_phase;
    if (out_.cpl_valid) {
      EXPECT_EQ(out_.cpl_cqid, cqid);
    }
    return out_.cpl_valid ? out_.cpl_slot : -1;
  }
  // Count of each SQ id in `sqs`.
  static std::vector<int> Histogram(const V& sqs) {
    std::vector<int> h(kQueues, 0);
    for (int s : sqs) {
      if (s >= 0) ++h[s];
    }
    return h;
  }

  Model model_;
  QueueEngineOutputs out_;
  V slots_;
  bool phase_ = false;
};

struct ModelName {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, RefQueueEngine> ? "Ref" : "Rtl";
  }
};
using Models = ::testing::Types<RefQueueEngine, RtlQueueEngine>;
TYPED_TEST_SUITE(QueueEngineTest, Models, ModelName);

TYPED_TEST(QueueEngineTest, RoundRobinVisitsSqsInOrderWithAdminAsPeer) {
  this->Tick(Arbitration(false, 0));
  this->Tick(CreateCq(0, 64));
  // Priorities play no part in round robin mode.
  this->Tick(CreateSq(0, 0, 8));
  this->Tick(CreateSq(1, 0, 8, Prio::kUrgent));
  this->Tick(CreateSq(2, 0, 8, Prio::kLow));
  this->Tick(CreateSq(5, 0, 8, Prio::kHigh));
  for (uint8_t q : {0, 1, 2, 5}) this->Tick(SqTail(q, 3));
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(13), (V{0, 1, 2, 5, 0, 1, 2, 5, 0, 1, 2, 5, -1}));
  EXPECT_EQ(this->slots_, (V{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, -1}));
  EXPECT_FALSE(this->out_.busy);
  // Fields of an invalid output are zero.
  EXPECT_EQ(this->out_.fetch_sqid, 0);
  EXPECT_EQ(this->out_.fetch_slot, 0);
}

TYPED_TEST(QueueEngineTest, RoundRobinContinuesAfterLastGrantedSq) {
  this->Tick(CreateCq(1, 64));
  for (uint8_t q : {1, 3, 5}) this->Tick(CreateSq(q, 1, 8));
  this->Tick(SqTail(3, 1));
  EXPECT_EQ(this->Grants(1), V{3});
  this->Tick(SqTail(1, 1));
  this->Tick(SqTail(5, 1));
  EXPECT_EQ(this->Grants(3), (V{5, 1, -1}));
}

TYPED_TEST(QueueEngineTest, BurstGivesUpToTwoToTheAbGrantsPerTurn) {
  this->Tick(Arbitration(false, 1));
  this->Tick(CreateCq(1, 64));
  for (uint8_t q : {1, 2, 3}) {
    this->Tick(CreateSq(q, 1, 8));
    this->Tick(SqTail(q, 4));
  }
  EXPECT_EQ(this->Grants(13), (V{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3, -1}));
}

TYPED_TEST(QueueEngineTest, BurstTurnEndsWhenSqEmptiesAndRenewsForALoneSq) {
  this->Tick(Arbitration(false, 2));
  this->Tick(CreateCq(1, 64));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(CreateSq(2, 1, 8));
  this->Tick(SqTail(1, 1));
  this->Tick(SqTail(2, 6));
  EXPECT_EQ(this->Grants(8), (V{1, 2, 2, 2, 2, 2, 2, -1}));
}

TYPED_TEST(QueueEngineTest, BurstSevenIsUnlimited) {
  this->Tick(Arbitration(false, 7));
  this->Tick(CreateCq(1, 64));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(CreateSq(2, 1, 8));
  this->Tick(SqTail(1, 5));
  this->Tick(SqTail(2, 5));
  EXPECT_EQ(this->Grants(11), (V{1, 1, 1, 1, 1, 2, 2, 2, 2, 2, -1}));
}

TYPED_TEST(QueueEngineTest, WeightedRoundRobinGivesGrantsInWeightRatio) {
  this->Tick(Arbitration(true, 0, /*hpw=*/3, /*mpw=*/1, /*lpw=*/0));  // 4 : 2 : 1
  this->Tick(CreateCq(1, 4096));
  this->Tick(CreateSq(1, 1, 1024, Prio::kHigh));
  this->Tick(CreateSq(2, 1, 1024, Prio::kHigh));
  this->Tick(CreateSq(3, 1, 1024, Prio::kMedium));
  this->Tick(CreateSq(4, 1, 1024, Prio::kLow));
  for (uint8_t q : {1, 2, 3, 4}) this->Tick(SqTail(q, 1000));
  const V g = this->Grants(700);
  // A round: the high class's 4 credits (round robin between SQs 1 and 2), medium's 2, low's 1.
  EXPECT_EQ(V(g.begin(), g.begin() + 14), (V{1, 2, 1, 2, 3, 3, 4, 1, 2, 1, 2, 3, 3, 4}));
  const auto h = this->Histogram(g);
  EXPECT_EQ(h[1] + h[2], 400);
  EXPECT_EQ(h[1], 200);
  EXPECT_EQ(h[3], 200);
  EXPECT_EQ(h[4], 100);
}

TYPED_TEST(QueueEngineTest, WeightedRoundRobinRatioHoldsWithUnlimitedBurst) {
  this->Tick(Arbitration(true, 7, 3, 1, 0));
  this->Tick(CreateCq(1, 4096));
  this->Tick(CreateSq(1, 1, 1024, Prio::kHigh));
  this->Tick(CreateSq(2, 1, 1024, Prio::kHigh));
  this->Tick(CreateSq(3, 1, 1024, Prio::kMedium));
  this->Tick(CreateSq(4, 1, 1024, Prio::kLow));
  for (uint8_t q : {1, 2, 3, 4}) this->Tick(SqTail(q, 1000));
  const auto h = this->Histogram(this->Grants(700));
  EXPECT_EQ(h[1], 400);  // the burst never ends while SQ 1 has commands
  EXPECT_EQ(h[2], 0);
  EXPECT_EQ(h[3], 200);
  EXPECT_EQ(h[4], 100);
}

TYPED_TEST(QueueEngineTest, UrgentClassStarvesWeightedClassesWhileItHasWork) {
  this->Tick(Arbitration(true, 0));
  this->Tick(CreateCq(1, 4096));
  this->Tick(CreateSq(1, 1, 64, Prio::kUrgent));
  this->Tick(CreateSq(2, 1, 64, Prio::kHigh));
  this->Tick(CreateSq(3, 1, 64, Prio::kLow));
  this->Tick(CreateSq(4, 1, 64, Prio::kUrgent));
  this->Tick(SqTail(1, 10));
  this->Tick(SqTail(2, 10));
  this->Tick(SqTail(3, 10));
  EXPECT_EQ(this->Grants(5), (V{1, 1, 1, 1, 1}));
  // A host that keeps the urgent SQ fed (a doorbell at every grant) keeps the others waiting.
  for (int i = 0; i < 100; ++i) {
    QueueEngineInputs in = SqTail(1, uint16_t((11 + i) % 64));
    in.fetch_ready = true;
    this->Tick(in);
    ASSERT_TRUE(this->out_.fetch_valid);
    ASSERT_EQ(this->out_.fetch_sqid, 1);
  }
  // Urgent SQs share their class round robin (SQ 1 has 5 commands left, SQ 4 gets 3); then
  // high and low (equal weights) alternate.
  this->Tick(SqTail(4, 3));
  EXPECT_EQ(this->Grants(10), (V{4, 1, 4, 1, 4, 1, 1, 1, 2, 3}));
  EXPECT_EQ(this->Grants(4), (V{2, 3, 2, 3}));
}

TYPED_TEST(QueueEngineTest, AdminBeatsEverythingInWrrMode) {
  this->Tick(Arbitration(true, 0));
  this->Tick(CreateCq(0, 64));
  this->Tick(CreateSq(0, 0, 8, Prio::kLow));  // the admin SQ's priority field means nothing
  this->Tick(CreateSq(1, 0, 8, Prio::kUrgent));
  this->Tick(CreateSq(2, 0, 8, Prio::kHigh));
  for (uint8_t q : {0, 1, 2}) this->Tick(SqTail(q, 3));
  EXPECT_EQ(this->Grants(10), (V{0, 0, 0, 1, 1, 1, 2, 2, 2, -1}));
}

TYPED_TEST(QueueEngineTest, AdminGrantsDoNotEndAnotherClassesBurst) {
  this->Tick(Arbitration(true, 1));
  this->Tick(CreateCq(0, 64));
  this->Tick(CreateSq(0, 0, 8));
  this->Tick(CreateSq(1, 0, 8, Prio::kUrgent));
  this->Tick(CreateSq(2, 0, 8, Prio::kUrgent));
  this->Tick(SqTail(1, 6));
  this->Tick(SqTail(2, 6));
  EXPECT_EQ(this->Grants(1), V{1});
  this->Tick(SqTail(0, 2));
  EXPECT_EQ(this->Grants(6), (V{0, 0, 1, 2, 2, 1}));
}

TYPED_TEST(QueueEngineTest, CqFullBlocksFetchUntilHeadDoorbell) {
  this->Tick(CreateCq(1, 4));  // 3 usable slots
  this->Tick(CreateSq(1, 1, 16));
  this->Tick(SqTail(1, 10));
  EXPECT_EQ(this->Grants(4), (V{1, 1, 1, -1}));
  EXPECT_FALSE(this->out_.busy);
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(this->Cpl(1), slot);
    EXPECT_TRUE(this->phase_);
  }
  EXPECT_EQ(this->Grants(1), V{-1});  // posted but not consumed: still full
  this->Tick(CqHead(1, 2));
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(3), (V{1, 1, -1}));
  EXPECT_EQ(this->slots_, (V{3, 4, -1}));
}

TYPED_TEST(QueueEngineTest, PhaseTagInvertsOnEveryWrap) {
  this->Tick(CreateCq(1, 3));
  this->Tick(CreateSq(1, 1, 64));
  this->Tick(SqTail(1, 63));
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(this->Grants(1), V{1});
    const int slot = this->Cpl(1);
    EXPECT_EQ(slot, i % 3);
    EXPECT_EQ(this->phase_, (i / 3) % 2 == 0) << i;
    this->Tick(CqHead(1, uint16_t((slot + 1) % 3)));
  }
}

TYPED_TEST(QueueEngineTest, InvalidDoorbellsAreIgnored) {
  this->Tick(CreateCq(1, 16));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 8));  // == entries
  this->Tick(SqTail(1, 0xffff));
  this->Tick(SqTail(40, 3));  // no such queue
  this->Tick(SqTail(2, 3));   // not enabled: not remembered either
  this->Tick(CreateSq(2, 1, 8));
  EXPECT_FALSE(this->out_.busy);
  EXPECT_EQ(this->Grants(1), V{-1});
  this->Tick(SqTail(1, 7));
  EXPECT_EQ(this->Grants(8), (V{1, 1, 1, 1, 1, 1, 1, -1}));

  this->Tick(CreateCq(3, 2));  // one usable slot
  this->Tick(CreateSq(4, 3, 8));
  this->Tick(SqTail(4, 5));
  EXPECT_EQ(this->Grants(2), (V{4, -1}));
  EXPECT_EQ(this->Cpl(3), 0);
  this->Tick(CqHead(3, 2));  // == entries: ignored, still full
  EXPECT_EQ(this->Grants(1), V{-1});
  this->Tick(CqHead(40, 1));
  EXPECT_EQ(this->Grants(1), V{-1});
  this->Tick(CqHead(3, 1));
  EXPECT_EQ(this->Grants(1), V{4});
}

TYPED_TEST(QueueEngineTest, CompletionNeedsAReservation) {
  this->Tick(CreateCq(1, 8));
  this->Tick(CreateSq(1, 1, 8));
  EXPECT_EQ(this->Cpl(1), -1);
  EXPECT_EQ(this->Cpl(2), -1);    // not enabled
  EXPECT_EQ(this->Cpl(200), -1);  // no such queue
  this->Tick(SqTail(1, 1));
  EXPECT_EQ(this->Grants(1), V{1});
  EXPECT_EQ(this->Cpl(1), 0);
  EXPECT_TRUE(this->phase_);
  EXPECT_EQ(this->Cpl(1), -1);
  EXPECT_FALSE(this->phase_);  // fields of a refused request are zero
}

TYPED_TEST(QueueEngineTest, DeleteClearsQueueState) {
  this->Tick(CreateCq(1, 16));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 5));
  EXPECT_EQ(this->Grants(2), (V{1, 1}));
  this->Tick(DeleteQueue(false, 1));
  EXPECT_FALSE(this->out_.busy);
  EXPECT_EQ(this->Grants(1), V{-1});
  this->Tick(CreateSq(1, 1, 8));  // fresh: head = tail = 0
  EXPECT_FALSE(this->out_.busy);
  this->Tick(SqTail(1, 3));
  EXPECT_EQ(this->Grants(4), (V{1, 1, 1, -1}));
  EXPECT_EQ(this->slots_, (V{0, 1, 2, -1}));

  // CQ 1 holds 5 reservations; deleting it drops them and stops its SQs.
  EXPECT_EQ(this->Cpl(1), 0);
  this->Tick(DeleteQueue(true, 1));
  EXPECT_EQ(this->Cpl(1), -1);
  this->Tick(SqTail(1, 6));
  EXPECT_FALSE(this->out_.busy);
  this->Tick(CreateCq(1, 16));
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(1), V{1});
  EXPECT_EQ(this->slots_, V{3});
  EXPECT_EQ(this->Cpl(1), 0);
  EXPECT_TRUE(this->phase_);
  EXPECT_EQ(this->Cpl(1), -1);
}

TYPED_TEST(QueueEngineTest, SqWaitsForItsCq) {
  this->Tick(CreateSq(1, 7, 8));
  this->Tick(SqTail(1, 2));
  EXPECT_FALSE(this->out_.busy);
  EXPECT_EQ(this->Grants(1), V{-1});
  this->Tick(CreateCq(7, 4));
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(3), (V{1, 1, -1}));
}

TYPED_TEST(QueueEngineTest, InvalidConfigWritesAreIgnored) {
  this->Tick(CreateCq(1, 1));  // size 0 (one entry): ignored
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 2));
  EXPECT_FALSE(this->out_.busy);
  this->Tick(CreateCq(1, 8));
  EXPECT_TRUE(this->out_.busy);
  this->Tick(CreateSq(1, 32, 8));  // no such CQ: ignored, SQ 1 keeps its state
  this->Tick(CreateSq(33, 1, 8));
  this->Tick(CreateCq(40, 8));
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(3), (V{1, 1, -1}));
}

TYPED_TEST(QueueEngineTest, ResetClearsEverything) {
  this->Tick(Arbitration(true, 3, 5, 5, 5));
  this->Tick(CreateCq(1, 8));
  this->Tick(CreateSq(1, 1, 8, Prio::kUrgent));
  this->Tick(CreateSq(2, 1, 8, Prio::kLow));
  this->Tick(SqTail(1, 3));
  this->Tick(SqTail(2, 3));
  EXPECT_EQ(this->Grants(1), V{1});
  this->Tick(Reset());
  EXPECT_FALSE(this->out_.busy);
  EXPECT_EQ(this->Cpl(1), -1);
  this->Tick(SqTail(1, 3));  // queues are gone
  EXPECT_EQ(this->Grants(1), V{-1});
  // Recreated: round robin with burst 1 again, so the urgent SQ does not starve the low one.
  this->Tick(CreateCq(1, 8));
  this->Tick(CreateSq(1, 1, 8, Prio::kUrgent));
  this->Tick(CreateSq(2, 1, 8, Prio::kLow));
  this->Tick(SqTail(1, 2));
  this->Tick(SqTail(2, 2));
  EXPECT_EQ(this->Grants(5), (V{1, 2, 1, 2, -1}));
  EXPECT_EQ(this->Cpl(1), 0);
  EXPECT_TRUE(this->phase_);
}

TYPED_TEST(QueueEngineTest, ResetWinsOverInputsAtTheSameEdge) {
  this->Tick(CreateCq(1, 8));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 3));
  QueueEngineInputs in = CreateCq(2, 8);
  in.fetch_ready = true;
  in.reset = true;
  this->Tick(in);
  EXPECT_FALSE(this->out_.fetch_valid);
  EXPECT_FALSE(this->out_.busy);
  this->Tick(CreateSq(3, 2, 8));
  this->Tick(SqTail(3, 1));
  EXPECT_FALSE(this->out_.busy);  // CQ 2 was not created
}

TYPED_TEST(QueueEngineTest, DoorbellAndGrantAtOneEdge) {
  this->Tick(CreateCq(1, 16));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 1));
  QueueEngineInputs in = SqTail(1, 3);
  in.fetch_ready = true;
  this->Tick(in);
  EXPECT_TRUE(this->out_.fetch_valid);
  EXPECT_EQ(this->out_.fetch_slot, 0);
  EXPECT_EQ(this->Grants(3), (V{1, 1, -1}));
  EXPECT_EQ(this->slots_, (V{1, 2, -1}));
}

TYPED_TEST(QueueEngineTest, DeleteAtTheEdgeOfAGrantKeepsTheGrantAndItsReservation) {
  this->Tick(CreateCq(1, 16));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 5));
  QueueEngineInputs in = DeleteQueue(false, 1);
  in.fetch_ready = true;
  this->Tick(in);
  EXPECT_TRUE(this->out_.fetch_valid);
  EXPECT_EQ(this->out_.fetch_sqid, 1);
  EXPECT_FALSE(this->out_.busy);
  EXPECT_EQ(this->Cpl(1), 0);
  EXPECT_EQ(this->Cpl(1), -1);

  // Re-creating the CQ at a grant's edge drops the reservation that grant made.
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 5));
  in = CreateCq(1, 16);
  in.fetch_ready = true;
  this->Tick(in);
  EXPECT_TRUE(this->out_.fetch_valid);
  EXPECT_EQ(this->Cpl(1), -1);
}

TYPED_TEST(QueueEngineTest, GrantAndCompletionOnOneCqAtOneEdge) {
  this->Tick(CreateCq(2, 3));  // 2 usable slots
  this->Tick(CreateSq(2, 2, 8));
  this->Tick(SqTail(2, 5));
  EXPECT_EQ(this->Grants(3), (V{2, 2, -1}));  // both slots reserved
  QueueEngineInputs in = Complete(2);
  in.fetch_ready = true;
  this->Tick(in);  // decided before the edge: full, so no grant
  EXPECT_TRUE(this->out_.cpl_valid);
  EXPECT_FALSE(this->out_.fetch_valid);
  EXPECT_EQ(this->Grants(1), V{-1});  // one posted, one reserved: still full
  this->Tick(CqHead(2, 1));
  this->Tick(in);  // one reservation made, one released
  EXPECT_TRUE(this->out_.cpl_valid);
  EXPECT_TRUE(this->out_.fetch_valid);
  EXPECT_EQ(this->Cpl(2), 2);
  EXPECT_EQ(this->Cpl(2), -1);
}

TYPED_TEST(QueueEngineTest, ArbitrationWriteTakesEffectAfterItsEdge) {
  this->Tick(CreateCq(1, 64));
  this->Tick(CreateSq(2, 1, 8, Prio::kHigh));
  this->Tick(CreateSq(3, 1, 8, Prio::kUrgent));
  this->Tick(SqTail(2, 4));
  this->Tick(SqTail(3, 4));
  QueueEngineInputs in = Arbitration(true, 0);
  in.fetch_ready = true;
  this->Tick(in);  // round robin still: SQ 2 comes first
  EXPECT_EQ(this->out_.fetch_sqid, 2);
  EXPECT_EQ(this->Grants(8), (V{3, 3, 3, 3, 2, 2, 2, -1}));
}

TYPED_TEST(QueueEngineTest, ConfigWriteWinsOverDoorbellAtOneEdge) {
  this->Tick(CreateCq(1, 64));
  this->Tick(CreateSq(4, 1, 8));
  QueueEngineInputs in = CreateSq(4, 1, 8);
  in.db_valid = true;
  in.db_qid = 4;
  in.db_value = 3;
  this->Tick(in);
  EXPECT_FALSE(this->out_.busy);
}

TYPED_TEST(QueueEngineTest, BusyDoesNotDependOnFetchReady) {
  this->Tick(CreateCq(1, 8));
  this->Tick(CreateSq(1, 1, 8));
  this->Tick(SqTail(1, 2));
  EXPECT_TRUE(this->out_.busy);
  this->Tick();
  EXPECT_TRUE(this->out_.busy);
  EXPECT_EQ(this->Grants(2), (V{1, 1}));
  EXPECT_FALSE(this->out_.busy);
}

}  // namespace
}  // namespace pollux::emu::rtl
