// The crash workload on bdev_nvme over the timed emulator (gen4-tlc: a volatile DRAM write
// cache without power-loss protection, draining to NAND at its own pace), in virtual time.
// Power is cut right after the k-th device command, for every k, and again after letting
// the cache drain for a while (so each cut loses a different set of acknowledged writes);
// the host resets the controller, reloads the store and checks every invariant.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/blob/crash/cut_switch.h"
#include "driver/blob/crash/workload.h"
#include "driver/env/dma_memory.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/sim/rig.h"

namespace pollux::blob::crash {
namespace {

TEST(EmulatedCrashSweep, EveryCommandOnATimedDriveWithAVolatileCache) {
  auto profile = emu::timing::load_profile("gen4-tlc");
  ASSERT_TRUE(profile.ok()) << profile.error();
  ASSERT_FALSE(profile.value().cache.power_loss_protection);
  sim::RigOptions ro;
  ro.profile = profile.value();
  ro.seed = 5;
  ro.attach_controllers = false;
  std::string err;
  auto rig = sim::Rig::create(ro, &err);
  ASSERT_NE(rig, nullptr) << err;
  event::Thread* t = &rig->thread();
  std::unique_ptr<bdev::Manager> mgr;
  CutSwitch* sw = nullptr;
  {
    event::CurrentThreadScope scope(t);
    auto m = bdev::Manager::create(rig->framework());
    ASSERT_TRUE(m.ok());
    mgr = std::move(m).value();
    auto ctrl = rig->connect(0, &err);
    ASSERT_NE(ctrl, nullptr) << err;
    bdev::NvmeBdevOptions o;
    o.name = "nvme0";
    o.registry = &rig->registry();
    o.admin_poll_period_us = 1000;
    sim::Lockstep* ls = &rig->lockstep();
    o.qpair_observer = [ls](nvme::Qpair* qp, bool created, const std::string&) {
      if (created) ls->watch(qp);
      else ls->unwatch(qp);
    };
    auto names = bdev::nvme_attach_controller(*mgr, std::move(ctrl), o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    auto s = CutSwitch::create(*mgr, "nvme0n1", "cut0", (16u << 20) / 512);  // a 16 MiB store
    ASSERT_TRUE(s.ok()) << s.error().message;
    sw = s.value();
  }
  auto mem = env::DmaRegion::create(rig->registry(), 1 << 20);
  ASSERT_TRUE(mem.ok());
  uint64_t power_cuts = 0, lost_writes = 0;
  Harness h;
  h.mgr = mgr.get();
  h.bdev_name = "cut0";
  h.md_thread = t;
  h.io_thread = t;
  h.registry = &rig->registry();
  h.buffer = static_cast<uint8_t*>(mem.value()->data());
  h.cluster_size = 64 * 1024;
  uint64_t drain_ns = 0;
  h.pump = [&] {
    rig->lockstep().step();
    if (!sw->take_cut_request()) return;
    // The cut comes `drain_ns` after the k-th command completed: the cache drains meanwhile.
    const uint64_t at = rig->lockstep().now_ns() + drain_ns;
    while (rig->lockstep().now_ns() < at) rig->lockstep().step();
    lost_writes += rig->sim().device(0).power_loss().size();
    ++power_cuts;
  };
  // After a cut: power back, and bdev_nvme's health check resets the controller.
  auto recover = [&] {
    sw->power_on();
    const uint64_t resets = power_cuts;  // one reset per cut (it may be done already)
    for (int i = 0; i < 2'000'000; ++i) {
      auto st = bdev::nvme_controller_stats(*mgr, "nvme0");
      if (st->resets >= resets && !st->lost) return true;
      rig->lockstep().step();
    }
    auto st = bdev::nvme_controller_stats(*mgr, "nvme0");
    std::printf("not back: resets %" PRIu64 " (before %" PRIu64 "), failures %" PRIu64 ", lost %d, cuts %" PRIu64 ", t %" PRIu64 " ns\n",
                st->resets, resets, st->reset_failures, st->lost, power_cuts, rig->lockstep().now_ns());
    return false;
  };
  Workload w(h);
  ASSERT_EQ(w.format(), 0);
  sw->power_on();
  ASSERT_EQ(w.run(&err), w.steps()) << err;
  const uint64_t total = sw->commands();
  CheckStats stats;
  ASSERT_EQ(w.check(w.steps(), &stats), "");

  const char* every_env = std::getenv("POLLUX_CUT_EVERY");  // 1: every command (the default)
  const uint64_t every = every_env ? std::max<uint64_t>(1, std::strtoull(every_env, nullptr, 0)) : 1;
  const uint64_t drains_ns[] = {0, 150'000, 600'000, 2'000'000, 20'000'000};
  uint64_t points = 0, clean = 0;
  std::vector<std::string> failures;
  for (uint64_t d : drains_ns) {
    drain_ns = d;
    for (uint64_t k = 1; k <= total; k += every) {
      sw->power_on();
      ASSERT_EQ(w.format(), 0);
      sw->power_on();
      sw->arm(k);
      const int completed = w.run(&err);
      ASSERT_TRUE(sw->cut()) << "command " << k << " never came";
      ASSERT_TRUE(recover()) << "the controller did not come back after cut " << k;
      const std::string why = w.check(completed, &stats);
      ++points;
      if (why.empty()) clean++;
      else if (failures.size() < 20)
        failures.push_back("cut after command " + std::to_string(k) + " + " + std::to_string(d / 1000) +
                           " us (step " + std::to_string(completed + 1) + "): " + why);
    }
  }
  std::printf("emulated crash sweep (gen4-tlc, volatile cache, virtual time): %d steps, %" PRIu64
              " device commands; %" PRIu64 " crash points (every command x 5 drain times), %" PRIu64
              " recovered with every invariant holding; %" PRIu64 " acknowledged writes lost to "
              "the cuts; %" PRIu64 " blobs and %" PRIu64 " data regions checked\n",
              w.steps(), total, points, clean, lost_writes, stats.blobs_checked, stats.regions_checked);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(clean, points);
  EXPECT_GE(points, 500u);
  EXPECT_GT(lost_writes, 0u) << "the cuts never lost anything: the sweep proved nothing";
  {
    event::CurrentThreadScope scope(t);
    bdev::nvme_detach_controller(*mgr, "nvme0");
  }
  for (int i = 0; i < 100000; ++i) rig->lockstep().step();
}

}  // namespace
}  // namespace pollux::blob::crash

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
