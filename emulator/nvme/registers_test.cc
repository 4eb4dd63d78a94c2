// BAR0 registers, enable/disable/reset/shutdown, NSSR, doorbell memory.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

TEST(Registers, CapVersionAndDefaults) {
  TestHost h;
  Controller& c = h.ctrl();
  const uint64_t cap = c.read64(sp::reg::kCap);
  EXPECT_EQ(sp::cap::mqes(cap), 255u);
  EXPECT_TRUE(sp::cap::cqr(cap));
  EXPECT_EQ(sp::cap::dstrd(cap), 0u);
  EXPECT_GT(sp::cap::to(cap), 0u);
  EXPECT_TRUE(sp::cap::nssrs(cap));
  EXPECT_EQ(sp::cap::css(cap) & sp::cap::kCssNvm, sp::cap::kCssNvm);
  EXPECT_EQ(sp::cap::mpsmin(cap), 0u);
  EXPECT_GE(sp::cap::mpsmax(cap), 0u);
  EXPECT_EQ(c.read32(sp::reg::kCap), static_cast<uint32_t>(cap));
  EXPECT_EQ(c.read32(sp::reg::kVs), 0x00010400u);
  EXPECT_EQ(c.read32(sp::reg::kCsts), 0u);
  EXPECT_EQ(c.read32(sp::reg::kCc), 0u);
  EXPECT_EQ(c.read32(sp::reg::kNssr), 0u);
  EXPECT_GE(c.bar0_size(), 0x1000u + c.doorbell_bytes());
}

TEST(Registers, DoorbellStrideInCap) {
  ControllerConfig cfg = small_config();
  cfg.doorbell_stride = 2;
  TestHost h(cfg);
  EXPECT_EQ(sp::cap::dstrd(h.ctrl().read64(sp::reg::kCap)), 2u);
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(3, 16));
  uint8_t* buf = h.alloc(4096);
  auto c = h.io(3, TestHost::rw(sp::nvm::kRead, 1, 0, 8, TestHost::iova(buf)));
  EXPECT_TRUE(ok(c));
  // A write between strided doorbells is a write to an invalid doorbell register.
  const uint64_t before = h.ctrl().counters().doorbell_errors;
  h.ctrl().write32(sp::reg::kDoorbellBase + 4, 1);
  EXPECT_EQ(h.ctrl().counters().doorbell_errors, before + 1);
}

TEST(Registers, AdminQueueRegistersReadBack) {
  TestHost h;
  Controller& c = h.ctrl();
  c.write32(sp::reg::kAqa, 0xffffffff);
  EXPECT_EQ(c.read32(sp::reg::kAqa), 0x0fff0fffu);
  c.write64(sp::reg::kAsq, 0x123456789abcdfffull);
  EXPECT_EQ(c.read64(sp::reg::kAsq), 0x123456789abcd000ull);
  c.write32(sp::reg::kAcq, 0x5000);
  c.write32(sp::reg::kAcq + 4, 0x7);
  EXPECT_EQ(c.read64(sp::reg::kAcq), 0x0000000700005000ull);
  c.write32(sp::reg::kIntms, 0x5);
  EXPECT_EQ(c.read32(sp::reg::kIntms), 0x5u);
  c.write32(sp::reg::kIntmc, 0x1);
  EXPECT_EQ(c.read32(sp::reg::kIntmc), 0x4u);
  // Read-only CAP and VS ignore writes; unaligned accesses are ignored.
  c.write32(sp::reg::kCap, 0);
  c.write32(sp::reg::kVs, 0);
  EXPECT_NE(c.read32(sp::reg::kCap), 0u);
  EXPECT_EQ(c.read32(sp::reg::kVs), 0x00010400u);
  EXPECT_EQ(c.read32(sp::reg::kCc + 1), 0u);
}

TEST(Registers, EnableSetsReadyAndDisableClearsIt) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  EXPECT_TRUE(h.ctrl().ready());
  EXPECT_EQ(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kCfs, 0u);
  h.disable();
  EXPECT_EQ(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kRdy, 0u);
  EXPECT_EQ(h.ctrl().counters().resets, 1u);
}

TEST(Registers, ReadyAfterConfiguredPolls) {
  ControllerConfig cfg = small_config();
  cfg.ready_delay_polls = 3;
  TestHost h(cfg);
  Controller& c = h.ctrl();
  uint8_t* sq = h.alloc(4096);
  uint8_t* cq = h.alloc(4096);
  c.write32(sp::reg::kAqa, sp::aqa::make(7, 7));
  c.write64(sp::reg::kAsq, TestHost::iova(sq));
  c.write64(sp::reg::kAcq, TestHost::iova(cq));
  c.write32(sp::reg::kCc, sp::cc::make(true, 0, 0, 0, 0, 6, 4));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.read32(sp::reg::kCsts) & sp::csts::kRdy, 0u) << i;
    c.poll(1);
  }
  EXPECT_EQ(c.read32(sp::reg::kCsts) & sp::csts::kRdy, sp::csts::kRdy);
}

struct BadEnable {
  const char* what;
  uint32_t cc;
  uint32_t aqa;
  uint64_t asq_offset;
};

class EnableValidation : public ::testing::TestWithParam<BadEnable> {};

TEST_P(EnableValidation, SetsCfsAndStaysNotReady) {
  const BadEnable& p = GetParam();
  TestHost h;
  Controller& c = h.ctrl();
  uint8_t* mem = h.alloc(64 * 1024, 64 * 1024);
  c.write32(sp::reg::kAqa, p.aqa);
  c.write64(sp::reg::kAsq, TestHost::iova(mem) + p.asq_offset);
  c.write64(sp::reg::kAcq, TestHost::iova(mem) + 32768);
  c.write32(sp::reg::kCc, p.cc);
  for (int i = 0; i < 3; ++i) c.poll(1);
  const uint32_t csts = c.read32(sp::reg::kCsts);
  EXPECT_EQ(csts & sp::csts::kRdy, 0u) << p.what;
  EXPECT_EQ(csts & sp::csts::kCfs, sp::csts::kCfs) << p.what;
  // A reset clears the failure; a good configuration then comes up.
  c.write32(sp::reg::kCc, 0);
  EXPECT_EQ(c.read32(sp::reg::kCsts) & sp::csts::kCfs, 0u);
  c.write32(sp::reg::kAqa, sp::aqa::make(15, 15));
  c.write64(sp::reg::kAsq, TestHost::iova(mem));
  c.write32(sp::reg::kCc, sp::cc::make(true, 0, 0, 0, 0, 6, 4));
  EXPECT_TRUE(c.ready()) << p.what;
}

INSTANTIATE_TEST_SUITE_P(
    Bad, EnableValidation,
    ::testing::Values(BadEnable{"css", sp::cc::make(true, 1, 0, 0, 0, 6, 4), sp::aqa::make(15, 15), 0},
                      BadEnable{"mps", sp::cc::make(true, 0, 9, 0, 0, 6, 4), sp::aqa::make(15, 15), 0},
                      BadEnable{"ams", sp::cc::make(true, 0, 0, 1, 0, 6, 4), sp::aqa::make(15, 15), 0},
                      BadEnable{"iosqes", sp::cc::make(true, 0, 0, 0, 0, 7, 4), sp::aqa::make(15, 15), 0},
                      BadEnable{"iocqes", sp::cc::make(true, 0, 0, 0, 0, 6, 5), sp::aqa::make(15, 15), 0},
                      BadEnable{"asqs=1", sp::cc::make(true, 0, 0, 0, 0, 6, 4), sp::aqa::make(0, 15), 0},
                      BadEnable{"acqs=1", sp::cc::make(true, 0, 0, 0, 0, 6, 4), sp::aqa::make(15, 0), 0},
                      BadEnable{"asqs>mqes", sp::cc::make(true, 0, 0, 0, 0, 6, 4), sp::aqa::make(1000, 15), 0},
                      BadEnable{"asq not 8K aligned", sp::cc::make(true, 0, 1, 0, 0, 6, 4),
                                sp::aqa::make(15, 15), 4096}));

TEST(Registers, ShutdownReportsComplete) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  Controller& c = h.ctrl();
  const uint32_t cc = c.read32(sp::reg::kCc);
  c.write32(sp::reg::kCc, cc | (sp::cc::kShnNormal << 14));
  EXPECT_EQ(sp::csts::shst(c.read32(sp::reg::kCsts)), sp::csts::kShstComplete);
  // Reset after shutdown: not an unsafe shutdown.
  c.write32(sp::reg::kCc, 0);
  EXPECT_EQ(sp::csts::shst(c.read32(sp::reg::kCsts)), sp::csts::kShstNormal);
  ASSERT_TRUE(h.enable());
  uint8_t* buf = h.alloc(4096);
  auto r = h.admin(TestHost::get_log(sp::log::kSmartHealth, 512, TestHost::iova(buf)));
  ASSERT_TRUE(ok(r));
  const auto* smart = reinterpret_cast<const sp::SmartHealthLog*>(buf);
  EXPECT_EQ(smart->unsafe_shutdowns[0], 0u);
  // Abrupt shutdown works the same; a reset without shutdown counts as unsafe.
  c.write32(sp::reg::kCc, c.read32(sp::reg::kCc) | (sp::cc::kShnAbrupt << 14));
  EXPECT_EQ(sp::csts::shst(c.read32(sp::reg::kCsts)), sp::csts::kShstComplete);
  c.write32(sp::reg::kCc, 0);
  ASSERT_TRUE(h.enable());
  h.disable();
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(ok(h.admin(TestHost::get_log(sp::log::kSmartHealth, 512, TestHost::iova(buf)))));
  EXPECT_EQ(smart->unsafe_shutdowns[0], 1u);
}

TEST(Registers, DisableDeletesQueuesAndDropsCommands) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* buf = h.alloc(4096);
  // Queue a command but reset before it is fetched.
  h.submit(h.queue(1), TestHost::rw(sp::nvm::kWrite, 1, 0, 1, TestHost::iova(buf)));
  h.disable();
  EXPECT_EQ(h.ctrl().poll(16), 0u);
  ASSERT_TRUE(h.enable());
  // Queue 1 is gone: its doorbell is an invalid register, and it can be created again.
  const uint64_t before = h.ctrl().counters().doorbell_errors;
  h.write_sq_doorbell(1, 1);
  EXPECT_EQ(h.ctrl().counters().doorbell_errors, before + 1);
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  EXPECT_EQ(h.ctrl().counters().io_writes, 0u);
}

TEST(Registers, SubsystemReset) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  Controller& c = h.ctrl();
  c.write32(sp::reg::kNssr, 0x12345678);  // not "NVMe": ignored
  EXPECT_TRUE(c.ready());
  c.write32(sp::reg::kNssr, sp::reg::kNssrReset);
  EXPECT_FALSE(c.ready());
  EXPECT_EQ(c.read32(sp::reg::kCc), 0u);
  EXPECT_EQ(c.read32(sp::reg::kCsts) & sp::csts::kNssro, sp::csts::kNssro);
  c.write32(sp::reg::kCsts, sp::csts::kNssro);  // RW1C
  EXPECT_EQ(c.read32(sp::reg::kCsts) & sp::csts::kNssro, 0u);
  ASSERT_TRUE(h.enable());
  EXPECT_TRUE(ok(h.admin(TestHost::identify(sp::cns::kController, 0, TestHost::iova(h.alloc(4096))))));
}

TEST(Registers, AttachedDoorbellPageIsPolled) {
  TestHost h;
  Controller& c = h.ctrl();
  std::vector<uint32_t> page(c.doorbell_bytes() / 4 + 16, 0);
  EXPECT_FALSE(c.attach_doorbells(page.data(), 8));  // too small
  ASSERT_TRUE(c.attach_doorbells(page.data(), page.size() * 4));
  ASSERT_TRUE(h.enable());
  // Slow path: write32 lands in the attached page.
  uint8_t* buf = h.alloc(4096);
  auto cmd = TestHost::identify(sp::cns::kController, 0, TestHost::iova(buf));
  h.submit(h.admin_queue(), cmd, /*ring=*/true);
  EXPECT_EQ(page[0], 1u);
  c.poll(8);
  auto cqe = h.reap(h.admin_queue(), /*ring=*/false);
  ASSERT_TRUE(cqe);
  EXPECT_TRUE(ok(*cqe));
  // Fast path: the host writes the shared page directly.
  page[1] = h.admin_queue().cq_head;
  h.submit(h.admin_queue(), cmd, /*ring=*/false);
  page[0] = h.admin_queue().sq_tail;
  c.poll(8);
  cqe = h.reap(h.admin_queue(), false);
  ASSERT_TRUE(cqe);
  EXPECT_TRUE(ok(*cqe));
  page[1] = h.admin_queue().cq_head;
  // Reset zeroes doorbells in the attached page.
  h.disable();
  EXPECT_EQ(page[0], 0u);
  EXPECT_EQ(page[1], 0u);
  c.detach_doorbells();
}

TEST(Registers, DoorbellsReadZeroAndOutOfRangeWritesAreIgnored) {
  TestHost h;
  ASSERT_TRUE(h.enable());
  Controller& c = h.ctrl();
  EXPECT_EQ(c.read32(sp::reg::kDoorbellBase), 0u);
  const uint64_t before = c.counters().doorbell_errors;
  c.write32(static_cast<uint32_t>(sp::reg::kDoorbellBase + c.doorbell_bytes() + 64), 5);
  EXPECT_EQ(c.counters().doorbell_errors, before);
}

TEST(Registers, DoorbellWriteWhileDisabledIsIgnored) {
  TestHost h;
  h.ctrl().write32(sp::reg::kDoorbellBase, 3);
  EXPECT_EQ(h.ctrl().counters().doorbell_errors, 1u);
  ASSERT_TRUE(h.enable());
  EXPECT_EQ(h.ctrl().poll(8), 0u);
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
