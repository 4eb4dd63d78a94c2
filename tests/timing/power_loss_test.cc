// Power loss aimed at an exact virtual instant, checked by the data-integrity oracle: with a
// volatile write cache (gen4-tlc: no power-loss protection) acknowledged but unflushed writes
// may be lost and flushed ones must survive; with protection (p3700) nothing acknowledged is
// lost. After the cut the host finds the controller not ready, resets it, and reads back.
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

constexpr uint32_t kLbas = 256;   // writes of 8 blocks (4 KiB) each
constexpr uint32_t kBlocks = 8;

struct Harness {
  std::unique_ptr<Rig> rig;
  std::unique_ptr<nvme::Qpair> qp;
  std::unique_ptr<env::DmaRegion> mem;
  const nvme::Namespace* ns = nullptr;
  int pending = 0, failures = 0;

  explicit Harness(const char* profile) {
    auto p = emu::timing::load_profile(profile);
    EXPECT_TRUE(p.ok()) << p.error();
    RigOptions o;
    o.profile = p.value();
    o.seed = 11;
    std::string err;
    rig = Rig::create(o, &err);
    EXPECT_NE(rig, nullptr) << err;
    auto q = rig->controller(0).alloc_io_qpair({});
    EXPECT_TRUE(q.ok());
    qp = std::move(q).value();
    rig->lockstep().watch(qp.get());
    auto m = env::DmaRegion::create(rig->registry(), size_t{kLbas} * 4096);
    EXPECT_TRUE(m.ok());
    mem = std::move(m).value();
    ns = rig->controller(0).ns(1);
  }
  ~Harness() {
    rig->lockstep().unwatch(qp.get());
    rig->controller(0).free_io_qpair(std::move(qp));
  }
  uint8_t* buf(uint32_t i) { return static_cast<uint8_t*>(mem->data()) + size_t{i} * 4096; }
  static void done(void* ctx, const sn::CompletionEntry& c) {
    auto* h = static_cast<Harness*>(ctx);
    --h->pending;
    if (c.status & 0xfffe) ++h->failures;
  }
  void wait() {
    for (int g = 0; g < 1'000'000 && pending > 0; ++g) {
      qp->process_completions();
      rig->lockstep().step();
    }
    ASSERT_EQ(pending, 0);
  }
  // Writes every LBA with generation `gen`, telling the oracle; waits for all acks.
  void write_all(scenarios::oracle::Oracle& o, uint64_t gen) {
    std::vector<uint64_t> ids(kLbas);
    for (uint32_t i = 0; i < kLbas; ++i) {
      env::fill_pattern(buf(i), uint64_t{i} * kBlocks, kBlocks, 512, gen);
      ids[i] = o.begin_write(uint64_t{i} * kBlocks, kBlocks, buf(i));
      ++pending;
      ASSERT_EQ(qp->write(*ns, buf(i), uint64_t{i} * kBlocks, kBlocks, done, this), 0);
    }
    qp->flush_doorbell();
    wait();
    ASSERT_EQ(failures, 0);
    for (uint64_t id : ids) o.write_acked(id);
  }
  void flush(scenarios::oracle::Oracle& o) {
    ++pending;
    ASSERT_EQ(qp->flush(*ns, done, this), 0);
    qp->flush_doorbell();
    wait();
    o.flush_acked();
  }
  // Reads every LBA back and checks it; returns how many still hold generation `gen`.
  uint32_t verify(scenarios::oracle::Oracle& o, uint64_t gen) {
    uint32_t holding = 0;
    for (uint32_t i = 0; i < kLbas; ++i) {
      ++pending;
      EXPECT_EQ(qp->read(*ns, buf(i), uint64_t{i} * kBlocks, kBlocks, done, this), 0);
    }
    qp->flush_doorbell();
    wait();
    for (uint32_t i = 0; i < kLbas; ++i) {
      const auto v = o.check_read(uint64_t{i} * kBlocks, kBlocks, buf(i));
      EXPECT_TRUE(v.ok()) << v.to_string();
      std::string why;
      holding += env::check_pattern(buf(i), uint64_t{i} * kBlocks, kBlocks, 512, gen, &why);
    }
    return holding;
  }
  void recover() {
    nvme::Controller& c = rig->controller(0);
    // The host sees the controller not ready, and resets it.
    for (int g = 0; g < 100 && c.healthy(); ++g) rig->lockstep().step();
    ASSERT_FALSE(c.healthy());
    ASSERT_EQ(c.reset(), 0);
  }
};

TEST(PowerLoss, VolatileCacheLosesOnlyUnflushedWrites) {
  Harness h("gen4-tlc");
  ASSERT_NE(h.rig, nullptr);
  scenarios::oracle::Oracle o(512, h.ns->num_blocks);
  h.write_all(o, 1);
  h.flush(o);          // generation 1 is durable
  h.write_all(o, 2);   // acknowledged, still in the DRAM cache
  const auto lost = h.rig->sim().device(0).power_loss();
  o.power_loss(/*plp=*/false);
  h.recover();
  const uint32_t new_data = h.verify(o, 2);
  std::printf("power cut right after %u acknowledged unflushed writes: %zu lost, %u survived\n",
              kLbas, lost.size(), new_data);
  EXPECT_GT(lost.size(), 0u) << "a volatile cache cut right after the acks loses some";
  EXPECT_EQ(lost.size() + new_data, kLbas);
}

// Cut while the cache drains: the writes the media already programmed survive, the rest are
// lost; the oracle accepts exactly that.
TEST(PowerLoss, CutDuringTheDrainLosesWhatWasNotYetProgrammed) {
  Harness h("gen4-tlc");
  ASSERT_NE(h.rig, nullptr);
  scenarios::oracle::Oracle o(512, h.ns->num_blocks);
  h.write_all(o, 1);
  h.flush(o);
  h.write_all(o, 2);
  // The fresh drive programs into its SLC cache: cut a little after one SLC tPROG, when the
  // groups filled early are programmed and the last is not.
  auto p = emu::timing::load_profile("gen4-tlc");
  ASSERT_TRUE(p.ok());
  const uint64_t cut_ns = p.value().nand_timing.t_prog_slc / emu::timing::kNs + 20'000;
  const uint64_t t0 = h.rig->lockstep().now_ns();
  while (h.rig->lockstep().now_ns() - t0 < cut_ns) h.rig->lockstep().step();
  const auto lost = h.rig->sim().device(0).power_loss();
  o.power_loss(false);
  h.recover();
  const uint32_t new_data = h.verify(o, 2);
  std::printf("power cut %" PRIu64 " us after the acks: %zu lost, %u survived\n", cut_ns / 1000,
              lost.size(), new_data);
  EXPECT_GT(lost.size(), 0u);
  EXPECT_GT(new_data, 0u);
  EXPECT_EQ(lost.size() + new_data, kLbas);
}

TEST(PowerLoss, FlushedWritesSurviveAVolatileCache) {
  Harness h("gen4-tlc");
  ASSERT_NE(h.rig, nullptr);
  scenarios::oracle::Oracle o(512, h.ns->num_blocks);
  h.write_all(o, 1);
  h.write_all(o, 2);
  h.flush(o);
  const auto lost = h.rig->sim().device(0).power_loss();
  o.power_loss(false);
  h.recover();
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(h.verify(o, 2), kLbas);
}

TEST(PowerLoss, ProtectedCacheLosesNothingAcknowledged) {
  Harness h("p3700");
  ASSERT_NE(h.rig, nullptr);
  scenarios::oracle::Oracle o(512, h.ns->num_blocks);
  h.write_all(o, 1);
  const auto lost = h.rig->sim().device(0).power_loss();
  o.power_loss(/*plp=*/true);
  h.recover();
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(h.verify(o, 1), kLbas);
}

}  // namespace
}  // namespace pollux::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
