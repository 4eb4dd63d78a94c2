// Power cut after every device command of the crash workload, on a bdev with a volatile
// write cache, under three fates for what the cache held (all lost, all kept, each block
// kept or lost at random: torn writes); reload and check every invariant each time.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "driver/blob/crash/volatile_bdev.h"
#include "driver/blob/crash/workload.h"
#include "driver/env/dma_memory.h"
#include "driver/event/test_util.h"

namespace pollux::blob::crash {
namespace {

TEST(CrashSweep, EveryCommandUnderEveryCacheFate) {
  const char* seed_env = std::getenv("POLLUX_SEED");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 0) : 1;
  const char* rounds_env = std::getenv("POLLUX_TEAR_ROUNDS");
  const uint64_t tear_rounds = rounds_env ? std::strtoull(rounds_env, nullptr, 0) : 10;
  event::testing::StepFramework s;
  bdev::ManagerOptions mo;
  mo.io_pool_size = 1024;
  mo.bounce_buffers = 0;
  auto m = bdev::Manager::create(*s.fw, mo);
  ASSERT_TRUE(m.ok());
  auto mgr = std::move(m).value();
  event::Thread* md = s.fw->create_thread("md", 0);
  event::Thread* io = s.fw->create_thread("io", 1);
  VolatileBdev* dev = nullptr;
  {
    event::CurrentThreadScope scope(md);
    auto r = VolatileBdev::create(*mgr, "vol0", (8u << 20) / 512);
    ASSERT_TRUE(r.ok()) << r.error().message;
    dev = r.value();
  }
  auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 1 << 20);
  ASSERT_TRUE(mem.ok());
  Harness h;
  h.mgr = mgr.get();
  h.bdev_name = "vol0";
  h.md_thread = md;
  h.io_thread = io;
  h.pump = [&] { s.fw->step(); };
  h.buffer = static_cast<uint8_t*>(mem.value()->data());
  h.cluster_size = 64 * 1024;
  Workload w(h);

  // The reference run: no cut. It fixes the blob ids and counts the commands.
  ASSERT_EQ(w.format(), 0);
  dev->power_on();
  std::string err;
  ASSERT_EQ(w.run(&err), w.steps()) << err;
  const uint64_t total = dev->commands();
  CheckStats stats;
  ASSERT_EQ(w.check(w.steps(), &stats), "");

  uint64_t points = 0, clean = 0;
  std::vector<std::string> failures;
  const CutPolicy policies[] = {CutPolicy::kLoseAll, CutPolicy::kKeepAll, CutPolicy::kTearRandomly};
  for (CutPolicy p : policies) {
    const uint64_t rounds = p == CutPolicy::kTearRandomly ? tear_rounds : 1;
    for (uint64_t round = 0; round < rounds; ++round)
      for (uint64_t k = 1; k <= total; ++k) {
        dev->power_on();
        ASSERT_EQ(w.format(), 0);
        dev->power_on();
        const uint64_t cut_seed = seed * 1000003 + round * 7919 + k;
        dev->arm(k, p, cut_seed);
        const int completed = w.run(&err);
        EXPECT_TRUE(dev->cut()) << "command " << k << " never came";
        dev->power_on();
        const std::string why = w.check(completed, &stats);
        ++points;
        if (why.empty()) {
          ++clean;
        } else if (failures.size() < 20) {
          failures.push_back(std::string(to_string(p)) + " cut after command " + std::to_string(k) +
                             " (step " + std::to_string(completed + 1) + ", seed " +
                             std::to_string(cut_seed) + "): " + why);
        }
      }
  }
  std::printf("crash sweep: %d steps, %" PRIu64 " device commands; %" PRIu64 " crash points "
              "(every command x lose-all, keep-all, %" PRIu64 " torn round(s), seed %" PRIu64
              "), %" PRIu64 " recovered with every invariant holding\n",
              w.steps(), total, points, tear_rounds, seed, clean);
  std::printf("crash sweep: %" PRIu64 " dirty loads, %" PRIu64 " repairs, %" PRIu64
              " load errors (torn creates/deletes), %" PRIu64 " blobs and %" PRIu64
              " data regions checked\n",
              stats.dirty_loads, stats.repairs, stats.load_errors, stats.blobs_checked,
              stats.regions_checked);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(clean, points);
  EXPECT_GE(points, 500u);
}

}  // namespace
}  // namespace pollux::blob::crash
