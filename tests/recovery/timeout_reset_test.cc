// TimeoutAction::kReset in virtual time: a p3700-profile rig (NAND reads take ~70 us) with a
// queue pair timeout below the read latency. Every stall (a batch of reads outliving the
// timeout) requests exactly one controller reset, which the admin poll runs on this same
// thread; every read then either completed or was ended retriable (DNR clear). Writes land
// in the device's power-protected cache, well inside the timeout, and never stall.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/status.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/rig.h"
#include "tests/recovery/rig_queue.h"

namespace pollux::sim {
namespace {

namespace sn = spec::nvme;

struct Io {
  bool done = false;
  int calls = 0;
  uint16_t status = 0;
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* io = static_cast<Io*>(ctx);
    io->done = true;
    ++io->calls;
    io->status = c.status & 0xfffe;
  }
};

struct Fixture : testing::RigQueue {
  // A p3700 (NAND reads ~70 us), reset on timeout.
  explicit Fixture(uint64_t timeout_us) : RigQueue("p3700", 3, timeout_us, 64) {
    ctrl->set_timeout_action(nvme::TimeoutAction::kReset);
  }
  bool run_until_done(std::vector<Io>& ios) {
    for (int guard = 0; guard < 200000; ++guard) {
      bool all = true;
      for (Io& io : ios) all &= io.done;
      if (all) return true;
      step();
    }
    return false;
  }
};

// Reads of LBAs far from anything written here: the preconditioned drive serves them from NAND.
uint64_t far_lba(uint32_t i) { return 100'000'000ull + uint64_t{i} * 4096; }

TEST(TimeoutReset, OneResetPerStallAndIoCompletesOrEndsRetriable) {
  Fixture f(/*timeout_us=*/50);
  // Writes: fast, no timeout, no reset.
  std::vector<Io> writes(8);
  for (uint32_t i = 0; i < writes.size(); ++i)
    ASSERT_EQ(f.qp->write(*f.ns, f.buf(i), uint64_t{i} * 8, 8, Io::cb, &writes[i]), 0);
  f.qp->flush_doorbell();
  ASSERT_TRUE(f.run_until_done(writes));
  for (Io& io : writes) EXPECT_EQ(io.status, 0);
  EXPECT_EQ(f.ctrl->stats().resets.load(), 0u);
  EXPECT_EQ(f.qp->stats().timeouts, 0u);

  for (int stall = 1; stall <= 2; ++stall) {
    std::vector<Io> reads(32);
    for (uint32_t i = 0; i < reads.size(); ++i)
      ASSERT_EQ(f.qp->read(*f.ns, f.buf(i), far_lba(i + 64 * stall), 8, Io::cb, &reads[i]), 0);
    f.qp->flush_doorbell();
    ASSERT_TRUE(f.run_until_done(reads)) << "stall " << stall;
    uint32_t ok = 0, retriable = 0;
    for (Io& io : reads) {
      EXPECT_EQ(io.calls, 1);
      if (io.status == 0) {
        ++ok;
      } else {
        ++retriable;
        EXPECT_EQ(sn::status::sct(io.status), sn::sct::kGeneric);
        EXPECT_EQ(sn::status::sc(io.status), sn::sc::kAbortedSqDeletion);
        EXPECT_FALSE(sn::status::dnr(io.status)) << "must be retriable";
      }
    }
    std::printf("stall %d: %u completed, %u ended retriable by the reset; timeouts %" PRIu64
                ", resets %" PRIu64 "\n",
                stall, ok, retriable, f.qp->stats().timeouts.load(), f.ctrl->stats().resets.load());
    EXPECT_GT(retriable, 0u);
    EXPECT_EQ(f.ctrl->stats().resets.load(), uint64_t(stall)) << "exactly one reset per stall";
    EXPECT_EQ(f.ctrl->stats().reset_requests.load(), uint64_t(stall));
    EXPECT_EQ(f.ctrl->stats().reset_failures.load(), 0u);
    EXPECT_EQ(f.ctrl->stats().aborts_sent.load(), 0u) << "kReset sends no Abort";
    EXPECT_FALSE(f.ctrl->reset_pending());
    EXPECT_TRUE(f.ctrl->healthy());
  }
  EXPECT_GT(f.ctrl->stats().io_timeouts.load(), 2u) << "several timeouts, still one reset each";

  // After the resets the queue pair works: the data written before them reads back (cached
  // writes, fast), and retried reads go through once the timeout no longer fires.
  f.ctrl->set_timeout_action(nvme::TimeoutAction::kNone);
  std::vector<Io> again(4);
  for (uint32_t i = 0; i < again.size(); ++i)
    ASSERT_EQ(f.qp->read(*f.ns, f.buf(32 + i), far_lba(i + 64), 8, Io::cb, &again[i]), 0);
  f.qp->flush_doorbell();
  ASSERT_TRUE(f.run_until_done(again));
  for (Io& io : again) EXPECT_EQ(io.status, 0);
  EXPECT_EQ(f.ctrl->stats().resets.load(), 2u) << "kNone: timeouts are only reported";
}

// With a hook the admin poll does not reset: it tells the owner, once per stall.
TEST(TimeoutReset, HookedRequestIsHandedToTheOwnerOnce) {
  Fixture f(/*timeout_us=*/50);
  std::vector<Io> reads(8);
  for (uint32_t i = 0; i < reads.size(); ++i)
    ASSERT_EQ(f.qp->read(*f.ns, f.buf(i), far_lba(i), 8, Io::cb, &reads[i]), 0);
  f.qp->flush_doorbell();
  // poll_recovery() with no pending request is a no-op.
  EXPECT_EQ(f.ctrl->poll_recovery(), 0);
  for (int guard = 0; guard < 100000 && !f.ctrl->reset_pending(); ++guard) {
    f.qp->process_completions();
    f.rig->lockstep().step();
  }
  ASSERT_TRUE(f.ctrl->reset_pending());
  // The owner runs the reset itself (it is the only thread here).
  EXPECT_EQ(f.ctrl->poll_recovery(), 0);  // inline reset (no hook configured)
  EXPECT_FALSE(f.ctrl->reset_pending());
  EXPECT_EQ(f.ctrl->stats().resets.load(), 1u);
  EXPECT_EQ(f.ctrl->poll_recovery(), 0);
  EXPECT_EQ(f.ctrl->stats().resets.load(), 1u) << "one request, one reset";
  ASSERT_TRUE(f.run_until_done(reads));
  for (Io& io : reads) EXPECT_EQ(io.calls, 1);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
