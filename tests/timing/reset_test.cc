// Controller reset as recovery, aimed at an exact moment in virtual time: the device enters
// fatal status with writes in flight; the host sees them stall, finds CSTS.CFS, resets the
// controller. What the device held ends with a retriable status and is resubmitted; what was
// acknowledged before the fault reads back intact; the same seed replays the same run.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstring>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/pattern.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim {
namespace {

namespace sn = spec::nvme;

constexpr uint32_t kIos = 64;
constexpr uint32_t kBlocks = 8;  // 4 KiB of 512 B blocks

struct Io {
  struct Test* t;
  uint32_t index;
  bool done = false, acked = false;
  uint16_t status = 0;
  int retries = 0;
};

struct Test {
  std::unique_ptr<Rig> rig;
  std::unique_ptr<nvme::Qpair> qp;
  std::unique_ptr<env::DmaRegion> mem;
  const nvme::Namespace* ns = nullptr;
  std::vector<Io> ios;
  uint8_t* buf(uint32_t i) { return static_cast<uint8_t*>(mem->data()) + size_t{i} * 4096; }
  static void on_write(void* ctx, const sn::CompletionEntry& c) {
    auto* io = static_cast<Io*>(ctx);
    io->done = true;
    io->status = c.status & 0xfffe;
    io->acked = io->status == 0;
  }
  int write(Io& io) {
    io.done = false;
    return qp->write(*ns, buf(io.index), uint64_t{io.index} * kBlocks, kBlocks, on_write, &io);
  }
  void step() {
    qp->process_completions();
    rig->lockstep().step();
  }
};

struct Outcome {
  uint64_t aborted_by_reset = 0, retried = 0, resets = 0;
  uint64_t trace_hash = 0;
};

Outcome run(uint64_t seed, uint64_t fault_after_ns) {
  Test t;
  auto p = emu::timing::load_profile("p4800x");
  EXPECT_TRUE(p.ok());
  RigOptions o;
  o.profile = p.value();
  o.seed = seed;
  std::string err;
  t.rig = Rig::create(o, &err);
  EXPECT_NE(t.rig, nullptr) << err;
  nvme::Controller& ctrl = t.rig->controller(0);
  auto qp = ctrl.alloc_io_qpair({});
  EXPECT_TRUE(qp.ok());
  t.qp = std::move(qp).value();
  t.rig->lockstep().watch(t.qp.get());
  auto mem = env::DmaRegion::create(t.rig->registry(), kIos * 4096);
  EXPECT_TRUE(mem.ok());
  t.mem = std::move(mem).value();
  t.ns = ctrl.ns(1);
  t.ios.resize(kIos);
  for (uint32_t i = 0; i < kIos; ++i) {
    t.ios[i] = Io{&t, i};
    env::fill_pattern(t.buf(i), uint64_t{i} * kBlocks, kBlocks, 512, seed);
    EXPECT_EQ(t.write(t.ios[i]), 0);
  }
  t.qp->flush_doorbell();
  // The fault, at an exact virtual instant: the device stops fetching and posting.
  const uint64_t t0 = t.rig->lockstep().now_ns();
  while (t.rig->lockstep().now_ns() - t0 < fault_after_ns) t.step();
  t.rig->device(0).controller().inject_fatal_status();
  // The host notices a stall (nothing completes for 100 us with I/O outstanding), checks
  // health, resets.
  uint64_t last_progress = t.rig->lockstep().now_ns();
  uint64_t completed = t.qp->stats().completed;
  Outcome out;
  for (int guard = 0; guard < 100000; ++guard) {
    t.step();
    if (t.qp->stats().completed != completed) {
      completed = t.qp->stats().completed;
      last_progress = t.rig->lockstep().now_ns();
    }
    bool all = true;
    for (Io& io : t.ios) all &= io.done;
    if (all) break;
    if (t.qp->outstanding() && t.rig->lockstep().now_ns() - last_progress > 100'000 &&
        !ctrl.healthy()) {
      EXPECT_EQ(ctrl.reset(), 0);
      ++out.resets;
      last_progress = t.rig->lockstep().now_ns();
    }
  }
  // Ended by the reset (retriable, DNR clear): submit again, as a bdev layer would.
  for (Io& io : t.ios) {
    if (io.done && !io.acked) {
      EXPECT_EQ(sn::status::sc(io.status), sn::sc::kAbortedSqDeletion);
      EXPECT_FALSE(io.status & 0x8000) << "must be retriable (DNR clear)";
      ++out.aborted_by_reset;
      ++out.retried;
      EXPECT_EQ(t.write(io), 0);
    }
  }
  t.qp->flush_doorbell();
  for (int guard = 0; guard < 100000; ++guard) {
    bool all = true;
    for (Io& io : t.ios) all &= io.done;
    if (all) break;
    t.step();
  }
  for (Io& io : t.ios) EXPECT_TRUE(io.acked) << "write " << io.index;
  // Every write reads back as written.
  auto rd = env::DmaRegion::create(t.rig->registry(), 4096);
  EXPECT_TRUE(rd.ok());
  for (uint32_t i = 0; i < kIos; ++i) {
    bool done = false;
    EXPECT_EQ(t.qp->read(*t.ns, rd.value()->data(), uint64_t{i} * kBlocks, kBlocks,
                         [](void* ctx, const sn::CompletionEntry&) { *static_cast<bool*>(ctx) = true; },
                         &done),
              0);
    t.qp->flush_doorbell();
    for (int g = 0; g < 100000 && !done; ++g) t.step();
    EXPECT_TRUE(done);
    if (!done) {
      const auto st = t.rig->sim().device(0).stats();
      std::printf("read %u stuck: qp outstanding %u submitted %" PRIu64 " completed %" PRIu64
                  " bad %" PRIu64 "; device commands %" PRIu64 " completions %" PRIu64
                  " in flight %" PRIu64 " mismatches %" PRIu64 " healthy %d\n",
                  i, t.qp->outstanding(), t.qp->stats().submitted.load(), t.qp->stats().completed.load(),
                  t.qp->stats().bad_completions.load(), st.commands, st.completions, st.in_flight,
                  st.engine_mismatches, int(t.rig->controller(0).healthy()));
      break;
    }
    std::string why;
    EXPECT_TRUE(env::check_pattern(static_cast<const uint8_t*>(rd.value()->data()),
                                   uint64_t{i} * kBlocks, kBlocks, 512, seed, &why))
        << why;
  }
  out.trace_hash = t.rig->sim().trace().hash();
  EXPECT_EQ(t.rig->sim().device(0).stats().engine_mismatches, 0u);
  t.rig->lockstep().unwatch(t.qp.get());
  EXPECT_EQ(ctrl.free_io_qpair(std::move(t.qp)), 0);
  return out;
}

TEST(Reset, FatalStatusMidFlightRecoversAndLosesNothing) {
  const Outcome a = run(7, 20'000);  // 20 us in: some writes done, some in the device
  std::printf("resets %" PRIu64 ", ended by reset and resubmitted %" PRIu64 ", trace %016" PRIx64 "\n",
              a.resets, a.aborted_by_reset, a.trace_hash);
  EXPECT_EQ(a.resets, 1u);
  EXPECT_GT(a.aborted_by_reset, 0u);
  EXPECT_LT(a.aborted_by_reset, kIos);
  const Outcome b = run(7, 20'000);
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "the same seed replays the same run";
  EXPECT_EQ(a.aborted_by_reset, b.aborted_by_reset);
}

// A controller that stops (here: RDY drops, as after a power cut) while a synchronous admin
// command waits must not hold the host for the admin timeout (5 s): the wait reads CSTS and
// gives up within a millisecond; the admin queue is refused and healthy() is false until a
// reset, after which admin commands work again.
TEST(Reset, AdminCommandOnAStoppedControllerFailsFastAndResetRestoresIt) {
  auto p = emu::timing::load_profile("p4800x");
  ASSERT_TRUE(p.ok());
  RigOptions o;
  o.profile = p.value();
  o.seed = 11;
  std::string err;
  auto rig = Rig::create(o, &err);
  ASSERT_NE(rig, nullptr) << err;
  nvme::Controller& ctrl = rig->controller(0);
  sn::SubmissionEntry get_queues{};
  get_queues.opcode = sn::admin::kGetFeatures;
  get_queues.cdw10 = sn::feature::kNumberOfQueues;
  ASSERT_TRUE(ctrl.admin_sync(get_queues).ok());

  // The device stops (nothing noticed it yet), then the host sends a command it never sees.
  rig->device(0).controller().inject_spontaneous_disable();
  const uint64_t t0 = rig->lockstep().now_ns();
  auto r = ctrl.admin_sync(get_queues);
  const uint64_t waited_ns = rig->lockstep().now_ns() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("controller stopped"), std::string::npos) << r.error().message;
  EXPECT_LT(waited_ns, 5'000'000u) << "gave up after " << waited_ns << " ns";
  EXPECT_FALSE(ctrl.failed()) << "a reset can bring it back";
  EXPECT_FALSE(ctrl.healthy());
  auto refused = ctrl.admin_sync(get_queues);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("needs a reset"), std::string::npos);

  EXPECT_EQ(ctrl.reset(), 0);
  EXPECT_TRUE(ctrl.healthy());
  EXPECT_TRUE(ctrl.admin_sync(get_queues).ok());
}

// A drive that drops RDY on its own while an attach initialises it (chaos seed 7100416: a
// spontaneous disable during the hot-plug re-attach after a re-insertion) fails that attach;
// the failed attach leaves the controller disabled, so the next one attaches at once instead
// of waiting out CAP.TO for a RDY that never comes.
// One p4800x, no driver controller attached: the test attaches (Rig::connect).
RigOptions unattached_p4800x(uint64_t seed) {
  RigOptions o;
  o.profile = emu::timing::load_profile("p4800x").value();
  o.seed = seed;
  o.attach_controllers = false;
  return o;
}

TEST(Reset, AnAttachThatFailsAfterEnablingLeavesTheControllerDisabled) {
  RigOptions o = unattached_p4800x(12);
  Rig* rig_ptr = nullptr;
  bool armed = true;
  o.tune_controller = [&](nvme::ControllerOptions& co) {
    auto wait = co.wait_hook;
    co.wait_hook = [&, wait] {
      // The first wait once the controller is ready (an admin command of the initialisation).
      if (armed && rig_ptr &&
          (rig_ptr->device(0).controller().read32(sn::reg::kCsts) & sn::csts::kRdy)) {
        armed = false;
        rig_ptr->device(0).controller().inject_spontaneous_disable();
      }
      wait();
    };
  };
  std::string err;
  auto rig = Rig::create(o, &err);
  ASSERT_NE(rig, nullptr) << err;
  rig_ptr = rig.get();
  auto failed = rig->connect(0, &err);
  ASSERT_EQ(failed, nullptr);
  EXPECT_FALSE(armed) << "the disable never came";
  EXPECT_NE(err.find("controller stopped"), std::string::npos) << err;
  EXPECT_EQ(rig->device(0).controller().read32(sn::reg::kCc) & sn::cc::kEn, 0u)
      << "the failed attach left the controller enabled";

  const uint64_t t0 = rig->lockstep().now_ns();
  auto ctrl = rig->connect(0, &err);
  ASSERT_NE(ctrl, nullptr) << err;
  EXPECT_LT(rig->lockstep().now_ns() - t0, 5'000'000u) << "waited for a RDY that never came";
  sn::SubmissionEntry get_queues{};
  get_queues.opcode = sn::admin::kGetFeatures;
  get_queues.cdw10 = sn::feature::kNumberOfQueues;
  EXPECT_TRUE(ctrl->admin_sync(get_queues).ok());
}

// A controller left enabled that dropped RDY on its own (its previous owner gone: nobody reset
// it) never becomes ready: the attach waits CAP.TO for RDY, as it should for a controller still
// enabling, then clears CC.EN — the reset that recovers it — rather than failing for good.
TEST(Reset, AttachTakesOverAControllerThatDroppedReady) {
  std::string err;
  auto rig = Rig::create(unattached_p4800x(13), &err);
  ASSERT_NE(rig, nullptr) << err;
  // A previous owner's enable, by hand: admin queue registers, CC.EN = 1; then RDY drops.
  emu::nvme::Controller& dev = rig->device(0).controller();
  dev.write32(sn::reg::kAqa, (31u << 16) | 31u);
  dev.write64(sn::reg::kAsq, 0x100000);
  dev.write64(sn::reg::kAcq, 0x200000);
  dev.write32(sn::reg::kCc, sn::cc::make(true, 0, 0, sn::cc::kAmsRoundRobin, sn::cc::kShnNone, 6, 4));
  ASSERT_TRUE(dev.read32(sn::reg::kCsts) & sn::csts::kRdy);
  dev.inject_spontaneous_disable();
  ASSERT_FALSE(dev.read32(sn::reg::kCsts) & sn::csts::kRdy);
  ASSERT_TRUE(dev.read32(sn::reg::kCc) & sn::cc::kEn);

  auto ctrl = rig->connect(0, &err);
  ASSERT_NE(ctrl, nullptr) << err;
  EXPECT_TRUE(ctrl->healthy());
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
