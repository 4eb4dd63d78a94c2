// A controller's properties and state machine (CC.EN, CC.SHN), keep-alive expiry, the admin
// commands a host needs and their errors, asynchronous events for namespace changes.
#include <gtest/gtest.h>

#include "fabric/target/test_rig.h"

namespace pollux::fabric::target::testing {
namespace {

namespace adm = sn::admin;

sn::IdentifyController identify_ctrl(Rig& rig, FakeQpair& q) {
  auto& s = rig.run(q, admin(adm::kIdentify, 0, sn::cns::kController), nullptr, 4096);
  EXPECT_EQ(s.cqe.status, 0);
  sn::IdentifyController id{};
  if (s.c2h.size() == sizeof id) std::memcpy(&id, s.c2h.data(), sizeof id);
  return id;
}

std::string field(const char* p, std::size_t n) {
  std::string s(p, n);
  return s.substr(0, s.find_last_not_of(' ') + 1);
}

TEST(Controller, PropertiesBeforeAndAfterEnable) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  ASSERT_EQ(rig.connect(q, 0).cqe.status, 0);
  auto& cap = rig.run(q, property_get(sn::reg::kCap, true));
  ASSERT_EQ(cap.cqe.status, 0);
  const uint64_t c = nf::property_value(cap.cqe);
  EXPECT_EQ(sn::cap::mqes(c), 127u);
  EXPECT_TRUE(sn::cap::cqr(c));
  EXPECT_TRUE(sn::cap::css(c) & sn::cap::kCssNvm);
  EXPECT_EQ(rig.run(q, property_get(sn::reg::kCap + 4)).cqe.dw0, c >> 32);  // the high half
  EXPECT_EQ(rig.run(q, property_get(sn::reg::kVs)).cqe.dw0, sn::make_version(1, 3));
  EXPECT_EQ(rig.csts(q), 0u);
  // Admin commands wait for CC.EN.
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 0, 1), nullptr, 4096).cqe),
            sn::sc::kCommandSequenceError);
  ASSERT_EQ(rig.run(q, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
  EXPECT_EQ(rig.csts(q) & sn::csts::kRdy, sn::csts::kRdy);
  EXPECT_EQ(rig.run(q, property_get(sn::reg::kCc)).cqe.dw0, cc_enabled());
  // Read-only properties, unknown offsets, CC fields this controller cannot do.
  EXPECT_EQ(sc_of(rig.run(q, property_set(sn::reg::kCsts, 1)).cqe), sn::sc::kInvalidField);
  EXPECT_EQ(sc_of(rig.run(q, property_get(0x50)).cqe), sn::sc::kInvalidField);
  EXPECT_EQ(sc_of(rig.run(q, property_set(sn::reg::kCc, cc_enabled() | 1u << 7)).cqe),
            sn::sc::kInvalidField);  // MPS 8 KiB while enabled
}

TEST(Controller, EnableRefusesAnUnsupportedCommandSet) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  ASSERT_EQ(rig.connect(q, 0).cqe.status, 0);
  const uint32_t css6 = sn::cc::make(true, 6, 0, 0, 0, 6, 4);
  EXPECT_EQ(sc_of(rig.run(q, property_set(sn::reg::kCc, css6)).cqe), sn::sc::kInvalidField);
  EXPECT_EQ(rig.csts(q), 0u);
}

TEST(Controller, ResetByCcEnDisconnectsIoQueuesThenDropsReady) {
  Rig rig("0x3");
  FakeQpair& a = rig.new_qpair(0);
  const uint16_t cntlid = rig.connect_enabled(a);
  FakeQpair& io = rig.new_qpair(1);
  ASSERT_EQ(rig.connect(io, 1, kNqn, kHost, cntlid, 31).cqe.status, 0);
  const sn::CompletionEntry r = rig.run(a, property_set(sn::reg::kCc, 0)).cqe;
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(io.disconnects, 1);
  EXPECT_TRUE(io.closed);
  EXPECT_EQ(rig.csts(a) & sn::csts::kRdy, 0u);
  // The association lives on: enable again, and the host connects its I/O queue again.
  ASSERT_EQ(rig.run(a, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
  EXPECT_EQ(rig.csts(a) & sn::csts::kRdy, sn::csts::kRdy);
  FakeQpair& io2 = rig.new_qpair(1);
  EXPECT_EQ(rig.connect(io2, 1, kNqn, kHost, cntlid, 31).cqe.status, 0);
}

// New connections spread over the poll groups, admin and I/O queues each in their own round
// robin: hosts that each open an admin queue and an I/O queue (a transport that knows which,
// RDMA) do not put every I/O queue on one group.
TEST(Target, AdminAndIoQueuesTakeTurnsOverThePollGroupsSeparately) {
  Rig rig("0x7");
  ASSERT_EQ(rig.tgt->groups().size(), 3u);
  std::vector<uint32_t> admin, io;
  for (int host = 0; host < 6; ++host) {
    admin.push_back(rig.tgt->next_group(true).index());
    io.push_back(rig.tgt->next_group(false).index());
  }
  EXPECT_EQ(admin, (std::vector<uint32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(io, (std::vector<uint32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(rig.tgt->next_group().index(), 0u);  // unknown (TCP): the I/O turn
}

TEST(Controller, ShutdownCompletesOnceIoQueuesAreGone) {
  Rig rig("0x3");
  FakeQpair& a = rig.new_qpair(0);
  const uint16_t cntlid = rig.connect_enabled(a);
  FakeQpair& io = rig.new_qpair(1);
  ASSERT_EQ(rig.connect(io, 1, kNqn, kHost, cntlid, 31).cqe.status, 0);
  const uint32_t shn = cc_enabled() | sn::cc::kShnNormal << 14;
  // Submitted on the admin thread, not yet run through the framework: the shutdown is under
  // way while the I/O queue's disconnect message travels.
  rig.on_group([&] { a.submit(property_set(sn::reg::kCc, shn)); });
  EXPECT_EQ(sn::csts::shst(rig.on_group([&] { return a.ctrlr->csts(); })),
            sn::csts::kShstOccurring);
  rig.settle();
  EXPECT_TRUE(io.closed);
  EXPECT_EQ(sn::csts::shst(rig.csts(a)), sn::csts::kShstComplete);
}

TEST(Controller, KeepAliveTimeoutEndsTheAssociation) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q, 1500);  // rounded up to 2 s (KAS: 1 s)
  EXPECT_EQ(rig.run(q, admin(adm::kGetFeatures, 0, sn::feature::kKeepAliveTimer)).cqe.dw0, 2000u);
  // Keep Alive within the timeout keeps it going.
  for (int i = 0; i < 3; ++i) {
    rig.advance_us(1'500'000);
    ASSERT_FALSE(q.closing);
    EXPECT_EQ(rig.run(q, admin(adm::kKeepAlive)).cqe.status, 0);
  }
  // Silence: past KATO (+ 1%) the controller fails (CFS) and disconnects its admin queue.
  Controller* c = rig.on_group([&] { return q.ctrlr; });
  rig.advance_us(2'000'000);
  EXPECT_FALSE(q.closing);
  EXPECT_EQ(c->csts() & sn::csts::kCfs, 0u);
  rig.advance_us(600'000);
  EXPECT_TRUE(q.closed);
  EXPECT_EQ(rig.tgt->find(kNqn)->controllers().size(), 0u);
}

// What a host needs to know how long a lost association's commands may still take effect:
// KATO as applied (rounded up to KAS) and CQT; the timeout is seen within KATO + 1%.
TEST(Controller, KeepAliveGranularityAndQuiesceTimeAreTheSubsystemsAndExpiryIsPrompt) {
  Rig rig("0x1", {}, [](SubsystemOptions& so) {
    so.kas = 1;
    so.cqt_ms = 250;
  });
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q, 150);  // rounded up to 200 ms (KAS: 100 ms)
  EXPECT_EQ(rig.run(q, admin(adm::kGetFeatures, 0, sn::feature::kKeepAliveTimer)).cqe.dw0, 200u);
  const sn::IdentifyController id = identify_ctrl(rig, q);
  EXPECT_EQ(id.kas, 1);
  EXPECT_EQ(id.cqt, 250);
  rig.advance_us(199'000, 1'000);
  EXPECT_FALSE(q.closing);
  rig.advance_us(5'000, 1'000);
  EXPECT_TRUE(q.closed);
}

TEST(Controller, KeepAliveOffWhenKatoIsZero) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q, 0);
  rig.advance_us(600'000'000, 1'000'000);
  EXPECT_FALSE(q.closing);
}

TEST(Controller, IdentifyController) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  const uint16_t cntlid = rig.connect_enabled(q);
  const sn::IdentifyController id = identify_ctrl(rig, q);
  EXPECT_EQ(field(id.sn, sizeof id.sn), "SN0001");
  EXPECT_EQ(field(id.mn, sizeof id.mn), "Pollux test");
  EXPECT_EQ(std::string(id.subnqn), kNqn);
  EXPECT_EQ(id.cntlid, cntlid);
  EXPECT_EQ(id.mdts, 5);  // 128 KiB in 4 KiB pages
  EXPECT_EQ(id.nn, 8u);
  EXPECT_EQ(id.kas, 10);  // SubsystemOptions' default: 1 s, as SPDK and nvmet
  EXPECT_EQ(id.cqt, 0);   // not reported unless configured
  EXPECT_EQ(id.cntrltype, 1);
  EXPECT_EQ(id.oaes & (1u << 8), 1u << 8);
  EXPECT_EQ(id.maxcmd, 128);
  nf::IdentifyControllerFabrics f;
  std::memcpy(&f, id.nvmeof, sizeof f);
  EXPECT_EQ(f.ioccsz, (64 + 4096) / 16u);
  EXPECT_EQ(f.iorcsz, 1u);
  EXPECT_EQ(f.icdoff, 0);
  EXPECT_EQ(f.msdbd, 1);
  // Too small a buffer: the SGL's length is wrong.
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 0, 1), nullptr, 1024).cqe),
            sn::sc::kDataSglLengthInvalid);
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 0, 0x10), nullptr, 4096).cqe),
            sn::sc::kInvalidField);  // a CNS this controller does not have
}

TEST(Controller, IdentifyNamespaces) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q);
  auto& ns = rig.run(q, admin(adm::kIdentify, 1, sn::cns::kNamespace), nullptr, 4096);
  ASSERT_EQ(ns.cqe.status, 0);
  sn::IdentifyNamespace idns;
  std::memcpy(&idns, ns.c2h.data(), sizeof idns);
  EXPECT_EQ(idns.nsze, 16384u);
  EXPECT_EQ(idns.lbaf[0].lbads, 9);
  // Inactive NSIDs within NN read as zeroes; beyond NN they are invalid.
  auto& inactive = rig.run(q, admin(adm::kIdentify, 5, sn::cns::kNamespace), nullptr, 4096);
  EXPECT_EQ(inactive.cqe.status, 0);
  EXPECT_TRUE(
      std::all_of(inactive.c2h.begin(), inactive.c2h.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 9, 0), nullptr, 4096).cqe),
            sn::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 0, 0), nullptr, 4096).cqe),
            sn::sc::kInvalidNamespaceOrFormat);
  // Active list and descriptors (a UUID, random when the bdev has none).
  NamespaceOptions no;
  no.bdev_name = "Malloc1";
  no.nsid = 3;
  no.nguid = std::array<uint8_t, 16>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->add_namespace(kNqn, no).ok()); });
  rig.settle();
  auto& list = rig.run(q, admin(adm::kIdentify, 0, sn::cns::kActiveNamespaceList), nullptr, 4096);
  uint32_t ids[3];
  std::memcpy(ids, list.c2h.data(), sizeof ids);
  EXPECT_EQ(ids[0], 1u);
  EXPECT_EQ(ids[1], 3u);
  EXPECT_EQ(ids[2], 0u);
  auto& after1 = rig.run(q, admin(adm::kIdentify, 1, sn::cns::kActiveNamespaceList), nullptr, 4096);
  std::memcpy(ids, after1.c2h.data(), 4);
  EXPECT_EQ(ids[0], 3u);
  auto& desc =
      rig.run(q, admin(adm::kIdentify, 3, sn::cns::kNamespaceIdDescriptors), nullptr, 4096);
  ASSERT_EQ(desc.cqe.status, 0);
  EXPECT_EQ(desc.c2h[0], sn::nidt::kNguid);
  EXPECT_EQ(desc.c2h[1], 16);
  EXPECT_EQ(desc.c2h[4], 1);
  EXPECT_EQ(desc.c2h[20], sn::nidt::kUuid);
  EXPECT_EQ(desc.c2h[21], 16);
  EXPECT_EQ(desc.c2h[24 + 6] >> 4, 4);  // a version 4 UUID
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kIdentify, 2, 3), nullptr, 4096).cqe),
            sn::sc::kInvalidNamespaceOrFormat);
}

TEST(Controller, FeaturesAndTheirErrors) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q);
  auto& noq = rig.run(q, admin(adm::kSetFeatures, 0, sn::feature::kNumberOfQueues, 0x00ff00ff));
  EXPECT_EQ(noq.cqe.status, 0);
  EXPECT_EQ(noq.cqe.dw0, 0x007e007eu);  // 127 granted, 0's based
  EXPECT_EQ(rig.run(q, admin(adm::kGetFeatures, 0, sn::feature::kNumberOfQueues)).cqe.dw0,
            0x007e007eu);
  EXPECT_EQ(
      sc_of(rig.run(q, admin(adm::kSetFeatures, 0, sn::feature::kNumberOfQueues, 0xffff)).cqe),
      sn::sc::kInvalidField);
  EXPECT_EQ(
      rig.run(q, admin(adm::kSetFeatures, 0, sn::feature::kAsyncEventConfig, 0x100)).cqe.status, 0);
  EXPECT_EQ(rig.run(q, admin(adm::kGetFeatures, 0, sn::feature::kAsyncEventConfig)).cqe.dw0,
            0x100u);
  EXPECT_EQ(rig.run(q, admin(adm::kGetFeatures, 0, sn::feature::kVolatileWriteCache)).cqe.dw0, 1u);
  auto& save = rig.run(q, admin(adm::kSetFeatures, 0, sn::feature::kArbitration | 1u << 31));
  EXPECT_EQ(sct_of(save.cqe), sn::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(save.cqe), sn::sc_cmd::kFeatureIdNotSaveable);
  EXPECT_EQ(sc_of(rig.run(q, admin(adm::kGetFeatures, 0, 0x7d)).cqe), sn::sc::kInvalidField);
  EXPECT_EQ(sc_of(rig.run(q, admin(0x7e)).cqe), sn::sc::kInvalidOpcode);
  EXPECT_EQ(rig.run(q, admin(adm::kAbort, 0, 5)).cqe.dw0, 1u);  // not aborted
}

TEST(Controller, LogPages) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q);
  // A failed admin command lands in the error log (newest first).
  rig.run(q, admin(0x7e));
  auto& err = rig.run(q, get_log(sn::log::kErrorInformation, 128), nullptr, 128);
  ASSERT_EQ(err.cqe.status, 0);
  sn::ErrorLogEntry e;
  std::memcpy(&e, err.c2h.data(), sizeof e);
  EXPECT_EQ(e.error_count, 1u);
  EXPECT_EQ(sn::status::sc(e.status), sn::sc::kInvalidOpcode);
  // SMART after writes through an I/O queue.
  auto& smart = rig.run(q, get_log(sn::log::kSmartHealth, 512), nullptr, 512);
  ASSERT_EQ(smart.cqe.status, 0);
  sn::SmartHealthLog h;
  std::memcpy(&h, smart.c2h.data(), sizeof h);
  EXPECT_EQ(h.available_spare, 100);
  // Offsets: the firmware slot page from byte 8 is the revision.
  auto& fw = rig.run(q, get_log(sn::log::kFirmwareSlot, 8, 8), nullptr, 8);
  ASSERT_EQ(fw.cqe.status, 0);
  EXPECT_EQ(std::string(fw.c2h.begin(), fw.c2h.begin() + 6), "pollux");
  EXPECT_EQ(sc_of(rig.run(q, get_log(sn::log::kFirmwareSlot, 8, 2), nullptr, 8).cqe),
            sn::sc::kInvalidField);  // not dword aligned
  EXPECT_EQ(sc_of(rig.run(q, get_log(sn::log::kFirmwareSlot, 8, 4096), nullptr, 8).cqe),
            sn::sc::kInvalidField);  // past the page
  auto& bad = rig.run(q, get_log(0x30, 512), nullptr, 512);
  EXPECT_EQ(sct_of(bad.cqe), sn::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(bad.cqe), sn::sc_cmd::kInvalidLogPage);
  EXPECT_EQ(sc_of(rig.run(q, get_log(sn::log::kSmartHealth, 512), nullptr, 256).cqe),
            sn::sc::kDataSglLengthInvalid);
}

TEST(Controller, AsyncEventLimit) {
  Rig rig;
  FakeQpair& q = rig.new_qpair();
  rig.connect_enabled(q);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(rig.run(q, admin(adm::kAsyncEventRequest)).done);
  auto& fifth = rig.run(q, admin(adm::kAsyncEventRequest));
  EXPECT_EQ(sct_of(fifth.cqe), sn::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(fifth.cqe), sn::sc_cmd::kAsyncEventRequestLimitExceeded);
  // Closing the admin queue gives them back: it can close.
  rig.on_group([&] { q.disconnect(); });
  rig.settle();
  EXPECT_TRUE(q.closed);
}

TEST(Controller, NamespaceHotAddAndRemoveRaiseANotice) {
  Rig rig("0x3");
  FakeQpair& q = rig.new_qpair(0);
  const uint16_t cntlid = rig.connect_enabled(q);
  ASSERT_EQ(
      rig.run(q, admin(adm::kSetFeatures, 0, sn::feature::kAsyncEventConfig, 1u << 8)).cqe.status,
      0);
  const int aer = rig.on_group([&] { return q.submit(admin(adm::kAsyncEventRequest)); });
  rig.settle();
  ASSERT_FALSE(q.slot(aer).done);
  // Hot add: every poll group has the namespace before the notice goes out.
  NamespaceOptions no;
  no.bdev_name = "Malloc1";
  no.nsid = 2;
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->add_namespace(kNqn, no).ok()); });
  rig.settle();
  ASSERT_TRUE(q.slot(aer).done);
  EXPECT_EQ(q.slot(aer).cqe.dw0,
            sn::aer::make_dw0(sn::aer::kTypeNotice, 0, sn::log::kChangedNamespaceList));
  FakeQpair& io = rig.new_qpair(1);
  ASSERT_EQ(rig.connect(io, 1, kNqn, kHost, cntlid, 31).cqe.status, 0);
  std::vector<uint8_t> block(512, 0x5a);
  EXPECT_EQ(rig.run(io, rw(sn::nvm::kWrite, 2, 0, 1), block.data(), 512).cqe.status, 0);
  // A second change before the log is read: masked, no new notice.
  const int aer2 = rig.on_group([&] { return q.submit(admin(adm::kAsyncEventRequest)); });
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->remove_namespace(kNqn, 1).ok()); });
  rig.settle();
  EXPECT_FALSE(q.slot(aer2).done);
  auto& log = rig.run(q, get_log(sn::log::kChangedNamespaceList, 4096), nullptr, 4096);
  uint32_t changed[3];
  std::memcpy(changed, log.c2h.data(), sizeof changed);
  EXPECT_EQ(changed[0], 1u);
  EXPECT_EQ(changed[1], 2u);
  EXPECT_EQ(changed[2], 0u);
  EXPECT_EQ(sc_of(rig.run(io, rw(sn::nvm::kRead, 1, 0, 1), nullptr, 512).cqe),
            sn::sc::kInvalidNamespaceOrFormat);
  // Reading the log unmasked the notice: a bdev hot-removed under namespace 2 raises one.
  rig.on_app([&] { ASSERT_EQ(rig.mgr->unregister_bdev("Malloc1"), 0); });
  rig.settle();
  ASSERT_TRUE(q.slot(aer2).done);
  auto& log2 = rig.run(q, get_log(sn::log::kChangedNamespaceList, 8), nullptr, 8);
  std::memcpy(changed, log2.c2h.data(), 8);
  EXPECT_EQ(changed[0], 2u);
  EXPECT_EQ(changed[1], 0u);
  EXPECT_EQ(rig.tgt->find(kNqn)->namespaces().size(), 0u);
  EXPECT_EQ(rig.mgr->find("Malloc1"), nullptr);  // the namespace let go of it
}

TEST(Controller, DiscoveryLogListsWhatTheHostMaySee) {
  Rig rig;
  SubsystemOptions other;
  other.nqn = "nqn.2026-11.io.pollux:other";
  other.allow_any_host = true;
  rig.on_app([&] {
    ASSERT_TRUE(rig.tgt->create_subsystem(other).ok());
    ASSERT_TRUE(rig.tgt->add_listener(other.nqn, {"TCP", "IPv4", "10.0.0.1", "4421"}).ok());
  });
  rig.settle();
  auto page_for = [&](const std::string& host) {
    FakeQpair& d = rig.new_qpair();
    EXPECT_EQ(rig.connect(d, 0, nf::kDiscoveryNqn, host).cqe.status, 0);
    EXPECT_EQ(rig.run(d, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
    const sn::IdentifyController id = identify_ctrl(rig, d);
    EXPECT_EQ(id.cntrltype, 2);
    EXPECT_EQ(std::string(id.subnqn), nf::kDiscoveryNqn);
    auto& hdr = rig.run(d, get_log(nf::kLogDiscovery, 1024), nullptr, 1024);
    EXPECT_EQ(hdr.cqe.status, 0);
    nf::DiscoveryLogHeader h;
    std::memcpy(&h, hdr.c2h.data(), sizeof h);
    std::vector<nf::DiscoveryLogEntry> entries(h.numrec);
    if (h.numrec) {
      auto& all =
          rig.run(d, get_log(nf::kLogDiscovery, 1024 * h.numrec, 1024), nullptr, 1024 * h.numrec);
      EXPECT_EQ(all.cqe.status, 0);
      std::memcpy(entries.data(), all.c2h.data(), 1024 * h.numrec);
    }
    return entries;
  };
  auto mine = page_for(kHost);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(std::string(mine[0].subnqn), kNqn);
  EXPECT_EQ(mine[0].trtype, nf::trtype::kTcp);
  EXPECT_EQ(mine[0].adrfam, nf::adrfam::kIpv4);
  EXPECT_EQ(mine[0].subtype, nf::subtype::kNvm);
  EXPECT_EQ(field(mine[0].trsvcid, sizeof mine[0].trsvcid), "4420");
  EXPECT_EQ(field(mine[0].traddr, sizeof mine[0].traddr), "127.0.0.1");
  EXPECT_EQ(mine[0].cntlid, 0xffff);
  EXPECT_EQ(std::string(mine[1].subnqn), other.nqn);
  auto theirs = page_for("nqn.2026-11.io.pollux:stranger");  // not allowed into kNqn
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(std::string(theirs[0].subnqn), other.nqn);
}

TEST(Controller, DiscoveryLogChangeRaisesANotice) {
  Rig rig;
  FakeQpair& d = rig.new_qpair();
  ASSERT_EQ(rig.connect(d, 0, nf::kDiscoveryNqn, kHost).cqe.status, 0);
  ASSERT_EQ(rig.run(d, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
  ASSERT_EQ(
      rig.run(d, admin(adm::kSetFeatures, 0, sn::feature::kAsyncEventConfig, 1u << 31)).cqe.status,
      0);
  const int aer = rig.on_group([&] { return d.submit(admin(adm::kAsyncEventRequest)); });
  rig.settle();
  ASSERT_FALSE(d.slot(aer).done);
  rig.on_app([&] {
    ASSERT_TRUE(rig.tgt->add_listener(kNqn, {"TCP", "IPv4", "127.0.0.1", "4430"}).ok());
  });
  rig.settle();
  ASSERT_TRUE(d.slot(aer).done);
  EXPECT_EQ(d.slot(aer).cqe.dw0, sn::aer::make_dw0(sn::aer::kTypeNotice, 0xf0, nf::kLogDiscovery));
  // Masked until the log is read (RAE clear): a second change raises nothing yet.
  const int aer2 = rig.on_group([&] { return d.submit(admin(adm::kAsyncEventRequest)); });
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->add_host(kNqn, "nqn.2026-11.io.pollux:h9").ok()); });
  rig.settle();
  EXPECT_FALSE(d.slot(aer2).done);
  auto& log = rig.run(d, get_log(nf::kLogDiscovery, 1024), nullptr, 1024);
  ASSERT_EQ(log.cqe.status, 0);
  nf::DiscoveryLogHeader h;
  std::memcpy(&h, log.c2h.data(), sizeof h);
  EXPECT_EQ(h.numrec, 2u);  // kNqn on two listeners
  rig.on_app([&] { ASSERT_TRUE(rig.tgt->remove_host(kNqn, "nqn.2026-11.io.pollux:h9").ok()); });
  rig.settle();
  EXPECT_TRUE(d.slot(aer2).done);
}

}  // namespace
}  // namespace pollux::fabric::target::testing
