// Surprise removal under verified writes, then re-insertion: the driver learns of the removal
// from the device itself (an MMIO read answered "no such device"), ends every outstanding
// request once with a do-not-retry status, and after the device comes back (a fresh function
// on the same media) a new driver instance reads back every write acknowledged before the
// pull; writes in flight at the pull may or may not have landed (the oracle accepts either).
#include <gtest/gtest.h>

#include <cinttypes>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/pattern.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/timed_ssd.h"
#include "scenarios/oracle/oracle.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim {
namespace {

namespace sn = spec::nvme;
constexpr uint32_t kLbas = 64, kBlocks = 8;

struct Write {
  uint64_t id = 0;
  bool done = false;
  uint16_t status = 0;
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* w = static_cast<Write*>(ctx);
    w->done = true;
    w->status = c.status & 0xfffe;
  }
};

struct Result {
  uint64_t ended_by_removal = 0, landed = 0, trace = 0;
};

Result run(uint64_t seed) {
  auto p = emu::timing::load_profile("p4800x");
  EXPECT_TRUE(p.ok());
  RigOptions o;
  o.profile = p.value();
  o.seed = seed;
  std::string err;
  auto rig = Rig::create(o, &err);
  EXPECT_NE(rig, nullptr) << err;
  auto mem = env::DmaRegion::create(rig->registry(), size_t{kLbas} * 4096);
  EXPECT_TRUE(mem.ok());
  auto buf = [&](uint32_t i) { return static_cast<uint8_t*>(mem.value()->data()) + size_t{i} * 4096; };
  scenarios::oracle::Oracle oracle(512, rig->controller(0).ns(1)->num_blocks);
  auto qp = rig->controller(0).alloc_io_qpair({});
  EXPECT_TRUE(qp.ok());
  rig->lockstep().watch(qp.value().get());
  const nvme::Namespace ns = *rig->controller(0).ns(1);
  std::vector<Write> w(kLbas);
  auto write_all = [&](uint64_t gen) {
    for (uint32_t i = 0; i < kLbas; ++i) {
      env::fill_pattern(buf(i), uint64_t{i} * kBlocks, kBlocks, 512, gen);
      w[i] = Write{oracle.begin_write(uint64_t{i} * kBlocks, kBlocks, buf(i))};
      EXPECT_EQ(qp.value()->write(ns, buf(i), uint64_t{i} * kBlocks, kBlocks, Write::cb, &w[i]), 0);
    }
    qp.value()->flush_doorbell();
  };
  auto all_done = [&] {
    for (const Write& x : w)
      if (!x.done) return false;
    return true;
  };
  write_all(1);
  for (int g = 0; g < 100000 && !all_done(); ++g) {
    qp.value()->process_completions();
    rig->lockstep().step();
  }
  for (Write& x : w) {
    EXPECT_EQ(x.status, 0);
    oracle.write_acked(x.id);
  }
  // Second generation in flight; pull the device 20 us in.
  write_all(2);
  const uint64_t t0 = rig->lockstep().now_ns();
  while (rig->lockstep().now_ns() - t0 < 20'000) {
    qp.value()->process_completions();
    rig->lockstep().step();
  }
  rig->hot_remove(0);
  // The host sees I/O stall and checks the controller: the read says the device is gone.
  for (int g = 0; g < 100000 && !all_done(); ++g) {
    if (qp.value()->process_completions() < 0) break;
    rig->lockstep().step();
    if (g % 64 == 63) (void)rig->controller(0).healthy();
  }
  EXPECT_LT(qp.value()->process_completions(), 0) << "the queue pair reports the removal";
  Result r;
  for (Write& x : w) {
    EXPECT_TRUE(x.done) << "every request ends once";
    if (x.status == 0) {
      oracle.write_acked(x.id);
    } else {
      EXPECT_TRUE(x.status & 0x8000) << "removal ends requests with do-not-retry";
      oracle.write_failed(x.id);
      ++r.ended_by_removal;
    }
  }
  EXPECT_EQ(qp.value()->read(ns, buf(0), 0, kBlocks, Write::cb, &w[0]), -ENODEV);
  rig->lockstep().unwatch(qp.value().get());
  rig->controller(0).free_io_qpair(std::move(qp).value());
  // Back in; a new driver instance.
  rig->hot_insert(0);
  EXPECT_EQ(rig->reattach(0), "");
  auto qp2 = rig->controller(0).alloc_io_qpair({});
  EXPECT_TRUE(qp2.ok());
  for (uint32_t i = 0; i < kLbas; ++i) {
    Write rd;
    EXPECT_EQ(qp2.value()->read(ns, buf(i), uint64_t{i} * kBlocks, kBlocks, Write::cb, &rd), 0);
    qp2.value()->flush_doorbell();
    for (int g = 0; g < 100000 && !rd.done; ++g) {
      qp2.value()->process_completions();
      rig->lockstep().step();
    }
    EXPECT_TRUE(rd.done && rd.status == 0);
    const auto v = oracle.check_read(uint64_t{i} * kBlocks, kBlocks, buf(i));
    EXPECT_TRUE(v.ok()) << v.to_string();
    std::string why;
    r.landed += env::check_pattern(buf(i), uint64_t{i} * kBlocks, kBlocks, 512, 2, &why);
  }
  EXPECT_EQ(rig->sim().device(0).stats().engine_mismatches, 0u);
  r.trace = rig->sim().trace().hash();
  rig->controller(0).free_io_qpair(std::move(qp2).value());
  return r;
}

TEST(HotPlug, SurpriseRemovalUnderWritesThenReinsertLosesNothingAcknowledged) {
  const Result a = run(5);
  std::printf("removed 20 us into 64 writes: %" PRIu64 " ended by the removal, %" PRIu64
              " of 64 second-generation writes on the media after re-insertion\n",
              a.ended_by_removal, a.landed);
  EXPECT_GT(a.ended_by_removal, 0u);
  const Result b = run(5);
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_EQ(a.ended_by_removal, b.ended_by_removal);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
