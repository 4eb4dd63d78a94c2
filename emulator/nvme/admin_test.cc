// Admin commands: identify, queues, features, logs, abort, AER, keep alive, format.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

class Admin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(h.enable());
    buf = h.alloc(8192);
  }
  sp::CompletionEntry admin(const sp::SubmissionEntry& c) { return h.admin(c); }
  uint64_t iova() const { return TestHost::iova(buf); }
  void expect_status(const sp::CompletionEntry& c, uint8_t sct, uint8_t sc) {
    EXPECT_EQ(sct_of(c), sct) << "sc=" << int(sc_of(c));
    EXPECT_EQ(sc_of(c), sc);
  }
  sp::SubmissionEntry create_cq(uint32_t qid, uint32_t entries, uint64_t base, uint32_t cdw11) {
    sp::SubmissionEntry c{};
    c.opcode = sp::admin::kCreateIoCq;
    c.dptr.prp.prp1 = base;
    c.cdw10 = (entries - 1) << 16 | qid;
    c.cdw11 = cdw11;
    return c;
  }
  sp::SubmissionEntry create_sq(uint32_t qid, uint32_t entries, uint64_t base, uint32_t cqid,
                                bool pc = true) {
    sp::SubmissionEntry c{};
    c.opcode = sp::admin::kCreateIoSq;
    c.dptr.prp.prp1 = base;
    c.cdw10 = (entries - 1) << 16 | qid;
    c.cdw11 = (pc ? 1u : 0u) | cqid << 16;
    return c;
  }
  static sp::SubmissionEntry del(uint8_t op, uint32_t qid) {
    sp::SubmissionEntry c{};
    c.opcode = op;
    c.cdw10 = qid;
    return c;
  }
  static sp::SubmissionEntry aer() {
    sp::SubmissionEntry c{};
    c.opcode = sp::admin::kAsyncEventRequest;
    return c;
  }

  TestHost h;
  uint8_t* buf = nullptr;
};

// ------------------------------------------------------------------------- identify ---

TEST_F(Admin, IdentifyController) {
  auto c = admin(TestHost::identify(sp::cns::kController, 0, iova()));
  ASSERT_TRUE(ok(c));
  EXPECT_EQ(c.sqid, 0);
  const auto* id = reinterpret_cast<const sp::IdentifyController*>(buf);
  EXPECT_EQ(id->vid, sp::pci::kVendorPollux);
  EXPECT_EQ(std::string(id->sn, 20), "POLLUX00000001      ");
  EXPECT_EQ(std::string(id->mn, 20), "Pollux NVMe emulator");
  EXPECT_EQ(std::string(id->fr, 8), "0.1     ");
  EXPECT_EQ(id->mdts, 5);
  EXPECT_EQ(id->ver, 0x00010400u);
  EXPECT_EQ(id->nn, 2u);
  EXPECT_EQ(id->sqes, 0x66);
  EXPECT_EQ(id->cqes, 0x44);
  EXPECT_EQ(id->aerl, 3);
  EXPECT_EQ(id->acl, 3);
  EXPECT_EQ(id->elpe, 63);
  EXPECT_EQ(id->vwc & 1, 1);
  EXPECT_EQ(id->oacs & 2, 2);  // Format NVM
  EXPECT_EQ(id->oncs, sp::oncs::kCompare | sp::oncs::kDatasetManagement | sp::oncs::kWriteZeroes);
  EXPECT_EQ(id->sgls & 3, 1u);
  EXPECT_TRUE(id->sgls & sp::sgls::kBitBucket);
  EXPECT_EQ(std::string(id->subnqn), "nqn.2026-11.io.pollux:nvme:POLLUX00000001");
}

TEST_F(Admin, IdentifyNamespaces) {
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespace, 1, iova()))));
  auto* ns = reinterpret_cast<const sp::IdentifyNamespace*>(buf);
  EXPECT_EQ(ns->nsze, (16u << 20) / 512);
  EXPECT_EQ(ns->ncap, ns->nsze);
  EXPECT_EQ(ns->nuse, 0u);  // nothing written yet
  EXPECT_EQ(ns->nlbaf, 1);
  EXPECT_EQ(ns->flbas & 0xf, 0);
  EXPECT_EQ(ns->lbaf[0].lbads, 9);
  EXPECT_EQ(ns->lbaf[1].lbads, 12);
  EXPECT_EQ(ns->dlfeat & 7, 1);
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespace, 2, iova()))));
  EXPECT_EQ(ns->nsze, (16u << 20) / 4096);
  EXPECT_EQ(ns->flbas & 0xf, 1);
  for (uint32_t bad : {0u, 3u, 0xffffffffu}) {
    expect_status(admin(TestHost::identify(sp::cns::kNamespace, bad, iova())), sp::sct::kGeneric,
                  sp::sc::kInvalidNamespaceOrFormat);
  }
}

TEST_F(Admin, IdentifyWithUnalignedPrp1UsesPrp2) {
  uint8_t* two = h.alloc(8192);
  // 4 KiB starting 512 bytes into a page: the last 512 bytes go to PRP2.
  auto c = admin(TestHost::identify(sp::cns::kController, 0, TestHost::iova(two) + 512,
                                    TestHost::iova(two) + 4096));
  ASSERT_TRUE(ok(c));
  const auto* id = reinterpret_cast<const sp::IdentifyController*>(two + 512);
  EXPECT_EQ(id->vid, sp::pci::kVendorPollux);
  EXPECT_EQ(id->nn, 2u);
}

TEST_F(Admin, ActiveNamespaceList) {
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kActiveNamespaceList, 0, iova()))));
  auto* list = reinterpret_cast<const uint32_t*>(buf);
  EXPECT_EQ(list[0], 1u);
  EXPECT_EQ(list[1], 2u);
  EXPECT_EQ(list[2], 0u);
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kActiveNamespaceList, 1, iova()))));
  EXPECT_EQ(list[0], 2u);
  EXPECT_EQ(list[1], 0u);
  expect_status(admin(TestHost::identify(sp::cns::kActiveNamespaceList, 0xfffffffe, iova())),
                sp::sct::kGeneric, sp::sc::kInvalidNamespaceOrFormat);
}

TEST_F(Admin, NamespaceIdentificationDescriptors) {
  uint8_t* idns = h.alloc(4096);
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespace, 2, TestHost::iova(idns)))));
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespaceIdDescriptors, 2, iova()))));
  const auto* ns = reinterpret_cast<const sp::IdentifyNamespace*>(idns);
  const uint8_t* p = buf;
  EXPECT_EQ(p[0], sp::nidt::kEui64);
  EXPECT_EQ(p[1], 8);
  EXPECT_EQ(std::memcmp(p + 4, ns->eui64, 8), 0);
  p += 12;
  EXPECT_EQ(p[0], sp::nidt::kNguid);
  EXPECT_EQ(p[1], 16);
  EXPECT_EQ(std::memcmp(p + 4, ns->nguid, 16), 0);
  p += 20;
  EXPECT_EQ(p[0], sp::nidt::kUuid);
  EXPECT_EQ(p[1], 16);
  EXPECT_EQ(p[4 + 6] >> 4, 4);  // version 4 UUID
  p += 20;
  EXPECT_EQ(p[0], 0);  // end of list
  // NGUIDs differ between namespaces.
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespace, 1, iova()))));
  EXPECT_NE(std::memcmp(reinterpret_cast<const sp::IdentifyNamespace*>(buf)->nguid, ns->nguid, 16), 0);
  expect_status(admin(TestHost::identify(sp::cns::kNamespaceIdDescriptors, 9, iova())),
                sp::sct::kGeneric, sp::sc::kInvalidNamespaceOrFormat);
}

TEST_F(Admin, IdentifyUnsupportedCnsIsInvalidField) {
  expect_status(admin(TestHost::identify(0x10, 0, iova())), sp::sct::kGeneric, sp::sc::kInvalidField);
}

TEST_F(Admin, InvalidOpcodeAndSglOnAdmin) {
  for (uint8_t op : {uint8_t{0x7f}, sp::admin::kNamespaceManagement, sp::admin::kSanitize}) {
    sp::SubmissionEntry c{};
    c.opcode = op;
    expect_status(admin(c), sp::sct::kGeneric, sp::sc::kInvalidOpcode);
  }
  auto c = TestHost::identify(sp::cns::kController, 0, iova());
  c.set_psdt(sp::kPsdtSglMptrContiguous);
  expect_status(admin(c), sp::sct::kGeneric, sp::sc::kInvalidField);
  auto f = TestHost::identify(sp::cns::kController, 0, iova());
  f.flags |= 1;  // fused
  expect_status(admin(f), sp::sct::kGeneric, sp::sc::kInvalidField);
}

// ---------------------------------------------------------------------------- queues ---

TEST_F(Admin, CreateCqErrors) {
  uint8_t* q = h.alloc(64 * 1024);
  const uint64_t base = TestHost::iova(q);
  const uint32_t pc_ien = 1 | 2;
  expect_status(admin(create_cq(0, 16, base, pc_ien)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_cq(17, 16, base, pc_ien)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_cq(1, 1, base, pc_ien)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueSize);
  expect_status(admin(create_cq(1, 257, base, pc_ien)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueSize);
  expect_status(admin(create_cq(1, 16, base, 2)), sp::sct::kGeneric, sp::sc::kInvalidField);  // PC=0
  expect_status(admin(create_cq(1, 16, base + 64, pc_ien)), sp::sct::kGeneric,
                sp::sc::kPrpOffsetInvalid);
  expect_status(admin(create_cq(1, 16, base, pc_ien | 100u << 16)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidInterruptVector);
  const uint64_t faults = h.ctrl().counters().iommu_faults;
  expect_status(admin(create_cq(1, 16, 0x7000000000ull, pc_ien)), sp::sct::kGeneric,
                sp::sc::kDataTransferError);
  EXPECT_EQ(h.ctrl().counters().iommu_faults, faults + 1);
  ASSERT_TRUE(ok(admin(create_cq(1, 16, base, pc_ien))));
  expect_status(admin(create_cq(1, 16, base + 4096, pc_ien)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);  // exists
}

TEST_F(Admin, CreateSqErrorsAndDeletion) {
  uint8_t* q = h.alloc(64 * 1024);
  const uint64_t base = TestHost::iova(q);
  ASSERT_TRUE(ok(admin(create_cq(1, 16, base, 3))));
  const uint64_t sqb = base + 16384;
  expect_status(admin(create_sq(0, 16, sqb, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_sq(17, 16, sqb, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  // CQID in range without a CQ: Completion Queue Invalid. CQID 0 (the admin CQ) and CQIDs
  // beyond the 16 allocated: Invalid Queue Identifier (NVMe Base 2.0, 5.5; what SPDK's
  // nvme_compliance admin_create_io_sq_verify_qsize_cqid expects).
  expect_status(admin(create_sq(1, 16, sqb, 2)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kCompletionQueueInvalid);
  expect_status(admin(create_sq(1, 16, sqb, 0)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_sq(1, 16, sqb, 17)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_sq(1, 16, sqb, 0xffff)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(create_sq(1, 1, sqb, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueSize);
  expect_status(admin(create_sq(1, 300, sqb, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueSize);
  expect_status(admin(create_sq(1, 16, sqb, 1, /*pc=*/false)), sp::sct::kGeneric,
                sp::sc::kInvalidField);
  expect_status(admin(create_sq(1, 16, sqb + 8, 1)), sp::sct::kGeneric, sp::sc::kPrpOffsetInvalid);
  ASSERT_TRUE(ok(admin(create_sq(1, 16, sqb, 1))));
  ASSERT_TRUE(ok(admin(create_sq(2, 16, sqb + 4096, 1))));  // two SQs share CQ 1
  expect_status(admin(create_sq(2, 16, sqb + 8192, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);

  // Deleting a CQ with SQs bound to it is an invalid queue deletion.
  expect_status(admin(del(sp::admin::kDeleteIoCq, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueDeletion);
  expect_status(admin(del(sp::admin::kDeleteIoSq, 0)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(del(sp::admin::kDeleteIoSq, 5)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(del(sp::admin::kDeleteIoSq, 999)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  ASSERT_TRUE(ok(admin(del(sp::admin::kDeleteIoSq, 1))));
  expect_status(admin(del(sp::admin::kDeleteIoCq, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueDeletion);
  ASSERT_TRUE(ok(admin(del(sp::admin::kDeleteIoSq, 2))));
  expect_status(admin(del(sp::admin::kDeleteIoSq, 2)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  ASSERT_TRUE(ok(admin(del(sp::admin::kDeleteIoCq, 1))));
  expect_status(admin(del(sp::admin::kDeleteIoCq, 1)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  expect_status(admin(del(sp::admin::kDeleteIoCq, 0)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
}

// ------------------------------------------------------------------------- features ---

TEST_F(Admin, NumberOfQueues) {
  auto g = admin(TestHost::get_features(sp::feature::kNumberOfQueues));
  ASSERT_TRUE(ok(g));
  EXPECT_EQ(g.dw0, 15u << 16 | 15u);  // 16 pairs by default
  auto s = admin(TestHost::set_features(sp::feature::kNumberOfQueues, 1u << 16 | 3u));
  ASSERT_TRUE(ok(s));
  EXPECT_EQ(s.dw0, 1u << 16 | 3u);  // 4 SQs, 2 CQs
  g = admin(TestHost::get_features(sp::feature::kNumberOfQueues));
  EXPECT_EQ(g.dw0, 1u << 16 | 3u);
  s = admin(TestHost::set_features(sp::feature::kNumberOfQueues, 100u << 16 | 100u));
  EXPECT_EQ(s.dw0, 15u << 16 | 15u);  // capped at what the controller has
  expect_status(admin(TestHost::set_features(sp::feature::kNumberOfQueues, 0xffff)),
                sp::sct::kGeneric, sp::sc::kInvalidField);
  s = admin(TestHost::set_features(sp::feature::kNumberOfQueues, 0));  // 1 + 1
  ASSERT_TRUE(ok(s));
  // Queue identifiers above the allocation are invalid.
  uint8_t* q = h.alloc(16384);
  expect_status(admin(create_cq(2, 16, TestHost::iova(q), 3)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  // ... and so is an SQ's CQID of NCQA + 1, even before any CQ exists.
  expect_status(admin(create_sq(1, 16, TestHost::iova(q), 2)), sp::sct::kCommandSpecific,
                sp::sc_cmd::kInvalidQueueIdentifier);
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  // Once I/O queues exist the feature can't change.
  expect_status(admin(TestHost::set_features(sp::feature::kNumberOfQueues, 3)), sp::sct::kGeneric,
                sp::sc::kCommandSequenceError);
}

TEST_F(Admin, FeaturesRoundTrip) {
  struct Case {
    uint8_t fid;
    uint32_t value;
  };
  for (Case c : {Case{sp::feature::kArbitration, 0x02030406}, Case{sp::feature::kVolatileWriteCache, 0},
                 Case{sp::feature::kVolatileWriteCache, 1}, Case{sp::feature::kInterruptCoalescing, 0x0a05},
                 Case{sp::feature::kAsyncEventConfig, 0x102}, Case{sp::feature::kKeepAliveTimer, 15000},
                 Case{sp::feature::kErrorRecovery, 30}, Case{sp::feature::kWriteAtomicityNormal, 1},
                 Case{sp::feature::kPowerManagement, 0}}) {
    ASSERT_TRUE(ok(admin(TestHost::set_features(c.fid, c.value)))) << int(c.fid);
    auto g = admin(TestHost::get_features(c.fid));
    ASSERT_TRUE(ok(g));
    EXPECT_EQ(g.dw0, c.value) << int(c.fid);
  }
  // Default and capabilities selects.
  auto d = admin(TestHost::get_features(sp::feature::kArbitration, sp::feature::kSelDefault));
  EXPECT_EQ(d.dw0, 3u);
  auto saved = admin(TestHost::get_features(sp::feature::kArbitration, sp::feature::kSelSaved));
  EXPECT_EQ(saved.dw0, 3u);
  auto caps = admin(TestHost::get_features(sp::feature::kArbitration, sp::feature::kSelCapabilities));
  EXPECT_EQ(caps.dw0, 4u);  // changeable, not saveable, not namespace specific
  // Interrupt vector configuration is per vector.
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kInterruptVectorConfig, 1u << 16 | 3))));
  EXPECT_EQ(admin(TestHost::get_features(sp::feature::kInterruptVectorConfig, 0, 3)).dw0, 1u << 16 | 3);
  EXPECT_EQ(admin(TestHost::get_features(sp::feature::kInterruptVectorConfig, 0, 4)).dw0, 4u);
}

TEST_F(Admin, FeatureErrors) {
  expect_status(admin(TestHost::get_features(0x7a)), sp::sct::kGeneric, sp::sc::kInvalidField);
  expect_status(admin(TestHost::set_features(sp::feature::kHostMemoryBuffer, 1)), sp::sct::kGeneric,
                sp::sc::kInvalidField);
  expect_status(admin(TestHost::set_features(sp::feature::kPowerManagement, 1)), sp::sct::kGeneric,
                sp::sc::kInvalidField);
  auto save = TestHost::set_features(sp::feature::kArbitration, 0);
  save.cdw10 |= 1u << 31;
  expect_status(admin(save), sp::sct::kCommandSpecific, sp::sc_cmd::kFeatureIdNotSaveable);
  expect_status(admin(TestHost::set_features(sp::feature::kTemperatureThreshold, 1u << 16 | 300)),
                sp::sct::kGeneric, sp::sc::kInvalidField);  // only the composite sensor is modelled
  expect_status(admin(TestHost::get_features(sp::feature::kInterruptVectorConfig, 0, 999)),
                sp::sct::kGeneric, sp::sc::kInvalidField);
}

// Host Behavior Support (16h): a 512-byte structure in the data buffer, per controller, not
// saveable, back to zeroes on a controller reset; reserved values refused.
TEST_F(Admin, HostBehaviorSupport) {
  auto get = [&](uint32_t sel) {
    auto c = TestHost::get_features(sp::feature::kHostBehaviorSupport, sel);
    c.dptr.prp.prp1 = iova();
    std::memset(buf, 0xa5, sizeof(sp::HostBehaviorSupport));
    return admin(c);
  };
  auto set = [&](uint8_t acre, uint8_t etdas, uint8_t lbafee, bool save = false) {
    sp::HostBehaviorSupport hbs{};
    hbs.acre = acre;
    hbs.etdas = etdas;
    hbs.lbafee = lbafee;
    std::memcpy(buf, &hbs, sizeof hbs);
    auto c = TestHost::set_features(sp::feature::kHostBehaviorSupport, 0);
    c.dptr.prp.prp1 = iova();
    if (save) c.cdw10 |= 1u << 31;
    return admin(c);
  };
  auto held = [&] {
    sp::HostBehaviorSupport hbs;
    std::memcpy(&hbs, buf, sizeof hbs);
    for (uint8_t b : hbs.reserved) EXPECT_EQ(b, 0);
    return std::vector<int>{hbs.acre, hbs.etdas, hbs.lbafee};
  };
  ASSERT_TRUE(ok(get(sp::feature::kSelCurrent)));
  EXPECT_EQ(held(), (std::vector<int>{0, 0, 0}));
  auto caps = get(sp::feature::kSelCapabilities);
  ASSERT_TRUE(ok(caps));
  EXPECT_EQ(caps.dw0, sp::feature::kCapChangeable);

  ASSERT_TRUE(ok(set(1, 0, 1)));
  ASSERT_TRUE(ok(get(sp::feature::kSelCurrent)));
  EXPECT_EQ(held(), (std::vector<int>{1, 0, 1}));
  ASSERT_TRUE(ok(get(sp::feature::kSelDefault)));
  EXPECT_EQ(held(), (std::vector<int>{0, 0, 0}));
  expect_status(set(2, 0, 0), sp::sct::kGeneric, sp::sc::kInvalidField);
  expect_status(set(0, 0, 0, /*save=*/true), sp::sct::kCommandSpecific,
                sp::sc_cmd::kFeatureIdNotSaveable);
  ASSERT_TRUE(ok(get(sp::feature::kSelCurrent)));
  EXPECT_EQ(held(), (std::vector<int>{1, 0, 1}));  // refused changes left it alone

  h.disable();  // controller reset
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(ok(get(sp::feature::kSelCurrent)));
  EXPECT_EQ(held(), (std::vector<int>{0, 0, 0}));
}

// ACRE decides whether a completion may carry a Command Retry Delay: without it CRD is
// reserved (cleared), and so it is whenever DNR is set.
TEST_F(Admin, CommandRetryDelayOnlyWithAcre) {
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  FaultRule rule;
  rule.action = FaultAction::kStatus;
  rule.opcode = sp::nvm::kRead;
  rule.status = sp::status::make(sp::sct::kGeneric, sp::sc::kCommandInterrupted) | 1u << 12;
  ASSERT_TRUE(h.ctrl().faults().add(rule).ok());
  const auto read = TestHost::rw(sp::nvm::kRead, 1, 0, 1, iova());
  auto c = h.io(1, read);
  EXPECT_EQ(sc_of(c), sp::sc::kCommandInterrupted);
  EXPECT_EQ(sp::status::crd(c.status), 0);

  sp::HostBehaviorSupport hbs{};
  hbs.acre = 1;
  std::memcpy(buf, &hbs, sizeof hbs);
  auto s = TestHost::set_features(sp::feature::kHostBehaviorSupport, 0);
  s.dptr.prp.prp1 = iova();
  ASSERT_TRUE(ok(admin(s)));
  c = h.io(1, read);
  EXPECT_EQ(sc_of(c), sp::sc::kCommandInterrupted);
  EXPECT_EQ(sp::status::crd(c.status), 1);

  h.ctrl().faults().clear_rules();
  rule.status |= 1u << 15;  // DNR
  ASSERT_TRUE(h.ctrl().faults().add(rule).ok());
  c = h.io(1, read);
  EXPECT_TRUE(sp::status::dnr(c.status));
  EXPECT_EQ(sp::status::crd(c.status), 0);
}

TEST(AdminNoCache, VolatileWriteCacheAbsent) {
  ControllerConfig cfg = small_config();
  cfg.volatile_write_cache = false;
  TestHost h(cfg);
  ASSERT_TRUE(h.enable());
  auto r = h.admin(TestHost::set_features(sp::feature::kVolatileWriteCache, 1));
  EXPECT_EQ(sc_of(r), sp::sc::kInvalidField);
  uint8_t* buf = h.alloc(4096);
  ASSERT_TRUE(ok(h.admin(TestHost::identify(sp::cns::kController, 0, TestHost::iova(buf)))));
  EXPECT_EQ(reinterpret_cast<const sp::IdentifyController*>(buf)->vwc & 1, 0);
}

TEST_F(Admin, TemperatureThreshold) {
  auto g = admin(TestHost::get_features(sp::feature::kTemperatureThreshold));
  ASSERT_TRUE(ok(g));
  EXPECT_EQ(g.dw0, 0x157u);
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kTemperatureThreshold, 1u << 20 | 200))));
  EXPECT_EQ(admin(TestHost::get_features(sp::feature::kTemperatureThreshold, 0, 1u << 20)).dw0, 200u);
  // Lower the over-temperature threshold below the current temperature with SMART events on.
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kAsyncEventConfig, 0xff))));
  h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kTemperatureThreshold, 300))));
  auto ev = h.reap(h.admin_queue());
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->dw0, sp::aer::make_dw0(sp::aer::kTypeSmart, sp::aer::kInfoSmartTemperatureThreshold,
                                       sp::log::kSmartHealth));
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kSmartHealth, 512, iova()))));
  EXPECT_EQ(reinterpret_cast<const sp::SmartHealthLog*>(buf)->critical_warning & 2, 2);
}

// ------------------------------------------------------------------------- log pages ---

TEST_F(Admin, ErrorLogRecordsFailedCommands) {
  sp::SubmissionEntry bad{};
  bad.opcode = 0x7f;
  const auto c1 = admin(bad);
  const auto c2 = admin(TestHost::identify(sp::cns::kNamespace, 77, iova()));
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kErrorInformation, 4096, iova()))));
  const auto* e = reinterpret_cast<const sp::ErrorLogEntry*>(buf);
  EXPECT_EQ(e[0].error_count, 2u);  // newest first
  EXPECT_EQ(e[0].cid, c2.cid);
  EXPECT_EQ(e[0].nsid, 77u);
  EXPECT_EQ(sp::status::sc(e[0].status), sp::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(e[1].error_count, 1u);
  EXPECT_EQ(e[1].cid, c1.cid);
  EXPECT_EQ(e[1].sqid, 0);
  EXPECT_EQ(sp::status::sc(e[1].status), sp::sc::kInvalidOpcode);
  EXPECT_EQ(e[2].error_count, 0u);
  // Offset: the second entry alone.
  std::memset(buf, 0xaa, 128);
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kErrorInformation, 64, iova(), 0xffffffff, false, 64))));
  EXPECT_EQ(e[0].error_count, 1u);
  EXPECT_EQ(buf[64], 0xaa);  // nothing past the requested length
  // Bad offsets.
  EXPECT_EQ(sc_of(admin(TestHost::get_log(sp::log::kErrorInformation, 64, iova(), 0, false, 2))),
            sp::sc::kInvalidField);
  EXPECT_EQ(sc_of(admin(TestHost::get_log(sp::log::kErrorInformation, 64, iova(), 0, false, 8192))),
            sp::sc::kInvalidField);
}

TEST_F(Admin, ErrorLogWrapsAfter64Entries) {
  sp::SubmissionEntry bad{};
  bad.opcode = 0x7f;
  for (int i = 0; i < 70; ++i) admin(bad);
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kErrorInformation, 4096, iova()))));
  const auto* e = reinterpret_cast<const sp::ErrorLogEntry*>(buf);
  EXPECT_EQ(e[0].error_count, 70u);
  EXPECT_EQ(e[63].error_count, 7u);
}

TEST_F(Admin, SmartLogAndLogErrors) {
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kSmartHealth, 512, iova()))));
  const auto* s = reinterpret_cast<const sp::SmartHealthLog*>(buf);
  EXPECT_EQ(s->composite_temperature, 313);
  EXPECT_EQ(s->available_spare, 100);
  EXPECT_EQ(s->critical_warning, 0);
  EXPECT_EQ(s->host_read_commands[0], 0u);
  EXPECT_EQ(sc_of(admin(TestHost::get_log(sp::log::kSmartHealth, 512, iova(), 1))), sp::sc::kInvalidField);
  auto bad = admin(TestHost::get_log(0x70, 512, iova()));
  EXPECT_EQ(sct_of(bad), sp::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(bad), sp::sc_cmd::kInvalidLogPage);
  // Larger than MDTS (128 KiB).
  EXPECT_EQ(sc_of(admin(TestHost::get_log(sp::log::kSmartHealth, 256 * 1024, iova()))), sp::sc::kInvalidField);
  // Firmware slot log.
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kFirmwareSlot, 512, iova()))));
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf + 8), 3), "0.1");
}

// Log page C0h: the emulator's own status, for hosts that check whether their figures are the
// model's (pollux-perf warns when a realtime model fell behind).
TEST_F(Admin, PolluxEmulatorStatusLog) {
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kPolluxEmulatorStatus, 512, iova()))));
  const auto* st = reinterpret_cast<const sp::PolluxEmulatorStatus*>(buf);
  EXPECT_EQ(std::string(st->signature, 4), "PLXE");
  EXPECT_EQ(st->version, 1u);
  EXPECT_EQ(st->realtime, 0);  // nobody paces this one
  EXPECT_EQ(st->fell_behind, 0);
  h.ctrl().set_realtime_status({true, 300'000, 2'500'000, 1'000'000});
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kPolluxEmulatorStatus, 512, iova()))));
  EXPECT_EQ(st->realtime, 1);
  EXPECT_EQ(st->lag_ns, 300'000u);
  EXPECT_EQ(st->max_lag_ns, 2'500'000u);
  EXPECT_EQ(st->warn_lag_ns, 1'000'000u);
  EXPECT_EQ(st->fell_behind, 1);  // 2.5 ms at most, above the 1 ms threshold
  h.ctrl().set_realtime_status({true, 0, 900'000, 1'000'000});
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kPolluxEmulatorStatus, 512, iova()))));
  EXPECT_EQ(st->fell_behind, 0);
}

TEST_F(Admin, ChangedNamespaceListAndNotice) {
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kAsyncEventConfig, 1u << 8))));
  h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));
  h.ctrl().notify_namespace_changed(2);
  h.ctrl().poll(1);
  auto ev = h.reap(h.admin_queue());
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->dw0, sp::aer::make_dw0(sp::aer::kTypeNotice, sp::aer::kInfoNoticeNamespaceChanged,
                                       sp::log::kChangedNamespaceList));
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kChangedNamespaceList, 4096, iova()))));
  const auto* list = reinterpret_cast<const uint32_t*>(buf);
  EXPECT_EQ(list[0], 2u);
  EXPECT_EQ(list[1], 0u);
  ASSERT_TRUE(ok(admin(TestHost::get_log(sp::log::kChangedNamespaceList, 4096, iova()))));
  EXPECT_EQ(list[0], 0u);  // cleared by the read
}

// --------------------------------------------------------------------- abort, AER ------

TEST_F(Admin, AbortQueuedCommand) {
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* data = h.alloc(4096);
  const uint16_t cid = h.submit(h.queue(1), TestHost::rw(sp::nvm::kWrite, 1, 0, 1, TestHost::iova(data)));
  sp::SubmissionEntry abort{};
  abort.opcode = sp::admin::kAbort;
  abort.cdw10 = 1u | uint32_t{cid} << 16;
  const uint16_t acid = h.submit(h.admin_queue(), abort);
  h.ctrl().poll(8);  // admin first: the write is still in SQ 1 when the abort runs
  auto a = h.reap(h.admin_queue());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cid, acid);
  EXPECT_TRUE(ok(*a));
  EXPECT_EQ(a->dw0 & 1, 0u);  // aborted
  auto w = h.reap(h.queue(1));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->cid, cid);
  EXPECT_EQ(sct_of(*w), sp::sct::kGeneric);
  EXPECT_EQ(sc_of(*w), sp::sc::kAbortedByRequest);
  EXPECT_EQ(h.ctrl().counters().aborted_commands, 1u);
  EXPECT_EQ(h.ctrl().counters().io_writes, 0u);  // never executed
}

TEST_F(Admin, AbortNotFoundReportsNotAborted) {
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* data = h.alloc(4096);
  auto done = h.io(1, TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(data)));
  ASSERT_TRUE(ok(done));
  for (uint32_t cdw10 : {1u | uint32_t{done.cid} << 16, 9u | 5u << 16, 0u | 0x1234u << 16}) {
    sp::SubmissionEntry abort{};
    abort.opcode = sp::admin::kAbort;
    abort.cdw10 = cdw10;
    auto a = admin(abort);
    EXPECT_TRUE(ok(a));
    EXPECT_EQ(a.dw0 & 1, 1u) << std::hex << cdw10;
  }
}

TEST_F(Admin, AsyncEventRequestLimit) {
  for (int i = 0; i < 4; ++i) h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));
  const uint16_t fifth = h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  auto c = h.reap(h.admin_queue());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cid, fifth);
  EXPECT_EQ(sct_of(*c), sp::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(*c), sp::sc_cmd::kAsyncEventRequestLimitExceeded);
  // A reset drops the outstanding requests: four are accepted again afterwards.
  h.disable();
  ASSERT_TRUE(h.enable());
  for (int i = 0; i < 4; ++i) h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));
}

TEST_F(Admin, ErrorEventsAreMaskedUntilTheLogIsRead) {
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  h.submit(h.admin_queue(), aer());
  h.submit(h.admin_queue(), aer());
  h.ctrl().poll(8);
  h.write_sq_doorbell(1, 999);  // invalid value: beyond the queue
  h.ctrl().poll(8);
  auto ev = h.reap(h.admin_queue());
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->dw0, sp::aer::make_dw0(sp::aer::kTypeError, sp::aer::kInfoErrorInvalidDoorbellWriteValue,
                                       sp::log::kErrorInformation));
  h.write_cq_doorbell(1, 7);  // head beyond the tail: another invalid value
  h.ctrl().poll(8);
  EXPECT_FALSE(h.reap(h.admin_queue()));  // masked
  EXPECT_EQ(h.ctrl().counters().doorbell_errors, 2u);
  // Reading the error log with RAE = 1 keeps the mask; RAE = 0 releases it.
  ASSERT_TRUE(ok(h.admin(TestHost::get_log(sp::log::kErrorInformation, 64, iova(), 0xffffffff, true))));
  EXPECT_FALSE(h.reap(h.admin_queue()));
  sp::SubmissionEntry log = TestHost::get_log(sp::log::kErrorInformation, 64, iova());
  const uint16_t lcid = h.submit(h.admin_queue(), log);
  h.ctrl().poll(8);
  bool got_log = false, got_event = false;
  while (auto c = h.reap(h.admin_queue())) {
    if (c->cid == lcid) got_log = true;
    else if (c->dw0 == ev->dw0) got_event = true;
  }
  EXPECT_TRUE(got_log);
  EXPECT_TRUE(got_event);
}

TEST_F(Admin, KeepAlive) {
  ASSERT_TRUE(ok(admin(TestHost::set_features(sp::feature::kKeepAliveTimer, 10000))));
  sp::SubmissionEntry ka{};
  ka.opcode = sp::admin::kKeepAlive;
  EXPECT_TRUE(ok(admin(ka)));
  EXPECT_TRUE(ok(admin(ka)));
  EXPECT_EQ(h.ctrl().counters().keep_alives, 2u);
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kController, 0, iova()))));
  EXPECT_EQ(reinterpret_cast<const sp::IdentifyController*>(buf)->kas, 1);
}

// --------------------------------------------------------------------------- format ---

sp::SubmissionEntry format(uint32_t nsid, uint32_t cdw10) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kFormatNvm;
  c.nsid = nsid;
  c.cdw10 = cdw10;
  return c;
}

TEST_F(Admin, FormatErasesAndSwitchesLbaSize) {
  ASSERT_TRUE(h.create_io_queue_pair(1, 16));
  uint8_t* data = h.alloc(4096);
  std::memset(data, 0x5a, 4096);
  ASSERT_TRUE(ok(h.io(1, TestHost::rw(sp::nvm::kWrite, 1, 0, 8, TestHost::iova(data)))));
  ASSERT_TRUE(ok(admin(format(1, 1))));  // LBAF 1: 4 KiB
  EXPECT_EQ(h.ctrl().lba_size(1), 4096u);
  ASSERT_TRUE(ok(admin(TestHost::identify(sp::cns::kNamespace, 1, iova()))));
  const auto* ns = reinterpret_cast<const sp::IdentifyNamespace*>(buf);
  EXPECT_EQ(ns->flbas & 0xf, 1);
  EXPECT_EQ(ns->nsze, (16u << 20) / 4096);
  std::memset(data, 0xff, 4096);
  ASSERT_TRUE(ok(h.io(1, TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(data)))));
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(data[i], 0) << i;
  // And back to 512 for every namespace at once.
  ASSERT_TRUE(ok(admin(format(0xffffffff, 0))));
  EXPECT_EQ(h.ctrl().lba_size(1), 512u);
  EXPECT_EQ(h.ctrl().lba_size(2), 512u);
}

TEST_F(Admin, FormatErrors) {
  EXPECT_EQ(sc_of(admin(format(0, 0))), sp::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(sc_of(admin(format(5, 0))), sp::sc::kInvalidNamespaceOrFormat);
  auto c = admin(format(1, 2));  // LBAF 2 does not exist
  EXPECT_EQ(sct_of(c), sp::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(c), sp::sc_cmd::kInvalidFormat);
  c = admin(format(1, 1u << 5));  // protection information
  EXPECT_EQ(sc_of(c), sp::sc_cmd::kInvalidFormat);
  EXPECT_EQ(sc_of(admin(format(1, 2u << 9))), sp::sc::kInvalidField);  // cryptographic erase
  EXPECT_TRUE(ok(admin(format(1, 1u << 9))));                          // user data erase
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
