// NVM commands on an I/O queue, through the bdev layer to a malloc bdev: data written is read
// back, and every command's errors carry the status the specification names.
#include <gtest/gtest.h>

#include <numeric>

#include "fabric/target/test_rig.h"

namespace pollux::fabric::target::testing {
namespace {

namespace nvm = sn::nvm;

struct IoRig : Rig {
  IoRig() : Rig("0x3") {
    admin_q = &new_qpair(0);
    cntlid = connect_enabled(*admin_q);
    io = &new_qpair(1);
    EXPECT_EQ(connect(*io, 1, kNqn, kHost, cntlid, 63).cqe.status, 0);
  }
  FakeQpair::Slot& cmd(const sn::SubmissionEntry& c, const void* in = nullptr, uint32_t len = 0) {
    return run(*io, c, in, len);
  }
  FakeQpair* admin_q;
  FakeQpair* io;
  uint16_t cntlid;
};

std::vector<uint8_t> pattern(std::size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(Io, WriteThenReadBack) {
  IoRig rig;
  for (uint32_t blocks : {1u, 8u, 256u}) {
    const auto data = pattern(blocks * 512, static_cast<uint8_t>(blocks));
    ASSERT_EQ(rig.cmd(rw(nvm::kWrite, 1, 100, blocks), data.data(), blocks * 512).cqe.status, 0);
    auto& r = rig.cmd(rw(nvm::kRead, 1, 100, blocks), nullptr, blocks * 512);
    ASSERT_EQ(r.cqe.status, 0);
    EXPECT_EQ(r.c2h, data) << blocks << " blocks";
    EXPECT_EQ(r.cqe.sqid, 1);
  }
  EXPECT_GE(rig.group(1).stats().completed_nvme_io, 6u);
  EXPECT_EQ(rig.group(1).stats().pending_bdev_io, 0u);
}

TEST(Io, SqHeadReportedUnlessFlowControlIsOff) {
  IoRig rig;
  auto& a = rig.cmd(rw(nvm::kRead, 1, 0, 1), nullptr, 512);
  EXPECT_EQ(a.cqe.sqhd, rig.io->sq_head);
  FakeQpair& q2 = rig.new_qpair(1);
  const nf::ConnectData d = connect_data(kNqn, kHost, rig.cntlid);
  ASSERT_EQ(
      rig.run(q2, connect_cmd(2, 31, 0, nf::connect::kCattrDisableSqFlowControl), &d, sizeof d)
          .cqe.status,
      0);
  EXPECT_FALSE(q2.sq_flow_control);
  EXPECT_EQ(rig.run(q2, rw(nvm::kRead, 1, 0, 1), nullptr, 512).cqe.sqhd, 0xffff);
}

TEST(Io, ErrorsNameTheirCause) {
  IoRig rig;
  std::vector<uint8_t> buf(4096);
  auto sc = [&](const sn::SubmissionEntry& c, uint32_t len) {
    return sc_of(rig.cmd(c, buf.data(), len).cqe);
  };
  EXPECT_EQ(sc(rw(nvm::kRead, 1, 16384, 1), 512), sn::sc::kLbaOutOfRange);
  EXPECT_EQ(sc(rw(nvm::kRead, 1, 16383, 2), 1024), sn::sc::kLbaOutOfRange);
  EXPECT_EQ(sc(rw(nvm::kRead, 1, ~0ull, 2), 1024), sn::sc::kLbaOutOfRange);  // wraps
  EXPECT_EQ(sc(rw(nvm::kWrite, 1, 0, 8), 2048), sn::sc::kDataSglLengthInvalid);
  EXPECT_EQ(sc(rw(nvm::kRead, 2, 0, 1), 512), sn::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(sc(rw(nvm::kRead, 0, 0, 1), 512), sn::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(sc(rw(0x7c, 1, 0, 1), 0), sn::sc::kInvalidOpcode);
  sn::SubmissionEntry fused = rw(nvm::kRead, 1, 0, 1);
  fused.flags = 1;
  EXPECT_EQ(sc(fused, 512), sn::sc::kInvalidField);
  // Errors carry DNR: a retry would fail the same way.
  EXPECT_TRUE(sn::status::dnr(rig.cmd(rw(nvm::kRead, 1, 16384, 1), buf.data(), 512).cqe.status));
  EXPECT_EQ(rig.group(1).stats().io_errors, 0u);  // refused before the bdev layer
}

TEST(Io, Compare) {
  IoRig rig;
  const auto data = pattern(1024, 3);
  ASSERT_EQ(rig.cmd(rw(nvm::kWrite, 1, 10, 2), data.data(), 1024).cqe.status, 0);
  EXPECT_EQ(rig.cmd(rw(nvm::kCompare, 1, 10, 2), data.data(), 1024).cqe.status, 0);
  auto other = data;
  other[700] ^= 1;
  auto& miss = rig.cmd(rw(nvm::kCompare, 1, 10, 2), other.data(), 1024);
  EXPECT_EQ(sct_of(miss.cqe), sn::sct::kMediaError);
  EXPECT_EQ(sc_of(miss.cqe), sn::sc_media::kCompareFailure);
}

TEST(Io, WriteZeroesDeallocateAndFlush) {
  IoRig rig;
  const auto data = pattern(4096, 9);
  ASSERT_EQ(rig.cmd(rw(nvm::kWrite, 1, 0, 8), data.data(), 4096).cqe.status, 0);
  ASSERT_EQ(rig.cmd(rw(nvm::kWriteZeroes, 1, 2, 2)).cqe.status, 0);
  auto& r = rig.cmd(rw(nvm::kRead, 1, 0, 8), nullptr, 4096);
  for (std::size_t i = 0; i < 4096; ++i) {
    const uint8_t want = i >= 1024 && i < 2048 ? 0 : data[i];
    ASSERT_EQ(r.c2h[i], want) << "byte " << i;
  }
  EXPECT_EQ(sc_of(rig.cmd(rw(nvm::kWriteZeroes, 1, 16380, 8)).cqe), sn::sc::kLbaOutOfRange);
  // Dataset Management, deallocate: two ranges, one bdev unmap each.
  nvm::DsmRange ranges[2] = {{0, 4, 0}, {0, 2, 6}};
  sn::SubmissionEntry dsm{};
  dsm.opcode = nvm::kDatasetManagement;
  dsm.nsid = 1;
  dsm.cdw10 = 1;  // two ranges
  dsm.cdw11 = nvm::kDsmDeallocate;
  EXPECT_EQ(rig.cmd(dsm, ranges, sizeof ranges).cqe.status, 0);
  EXPECT_EQ(sc_of(rig.cmd(dsm, ranges, 16).cqe), sn::sc::kDataSglLengthInvalid);  // one range sent
  nvm::DsmRange outside[1] = {{0, 8, 16380}};
  dsm.cdw10 = 0;
  EXPECT_EQ(sc_of(rig.cmd(dsm, outside, sizeof outside).cqe), sn::sc::kLbaOutOfRange);
  sn::SubmissionEntry flush{};
  flush.opcode = nvm::kFlush;
  flush.nsid = 1;
  EXPECT_EQ(rig.cmd(flush).cqe.status, 0);
  flush.nsid = 0xffffffff;  // every namespace: not supported (VWC says so)
  EXPECT_EQ(sc_of(rig.cmd(flush).cqe), sn::sc::kInvalidNamespaceOrFormat);
}

TEST(Io, NamespaceRemovalWaitsForItsIo) {
  IoRig rig;
  const auto data = pattern(512 * 64, 1);
  // Submitted, not yet completed (the bdev's poller has not run).
  const int w = rig.on_group(
      [&] { return rig.io->submit(rw(nvm::kWrite, 1, 0, 64), data.data(), data.size()); }, 1);
  ASSERT_FALSE(rig.io->slot(w).done);
  bool removed = false;
  rig.on_app([&] {
    ASSERT_TRUE(rig.tgt->remove_namespace(kNqn, 1).ok());
    rig.tgt->when_settled([&] { removed = true; });
  });
  rig.settle();
  EXPECT_TRUE(rig.io->slot(w).done);
  EXPECT_EQ(rig.io->slot(w).cqe.status, 0);  // it finished before the channel went
  EXPECT_TRUE(removed);
  EXPECT_EQ(sc_of(rig.cmd(rw(nvm::kRead, 1, 0, 1), nullptr, 512).cqe),
            sn::sc::kInvalidNamespaceOrFormat);
}

// A bdev whose module holds every I/O until the test ends it, and records aborts.
class HoldingBackend final : public bdev::Backend {
 public:
  explicit HoldingBackend(event::Framework& fw) : fw_(fw) {
    fw_.register_io_device(
        this,
        [](void* dev, void*) { return static_cast<HoldingBackend*>(dev)->refuse_channels ? -EIO : 0; },
        [](void*, void*) {}, 0, "hold");
  }
  bool supports(bdev::IoType t) const override {
    return t == bdev::IoType::kRead || t == bdev::IoType::kWrite;
  }
  void* io_device() override { return this; }
  void submit(bdev::BdevIo& io, void*) override {
    if (!hold) return io.complete(bdev::IoStatus::kSuccess);
    held.push_back(&io);
  }
  void abort(bdev::BdevIo& io, void*) override { aborted.push_back(&io); }
  void destruct() override { fw_.unregister_io_device(this, nullptr, nullptr); }
  std::vector<bdev::BdevIo*> held, aborted;
  bool refuse_channels = false;  // a device that cannot give a queue now (being reset)
  bool hold = true;              // false: I/O succeeds at once

 private:
  event::Framework& fw_;
};

// Namespace 2 of the rig's subsystem, on a HoldingBackend bdev set up as `mode` says.
struct HoldMode {
  bool refuse_channels;
  bool hold;
};
HoldingBackend* add_holding_namespace(IoRig& rig, HoldMode mode) {
  HoldingBackend* be = nullptr;
  rig.on_app([&] {
    auto owned = std::make_unique<HoldingBackend>(*rig.fw);
    be = owned.get();
    be->refuse_channels = mode.refuse_channels;
    be->hold = mode.hold;
    bdev::BdevProperties p;
    p.name = "Hold0";
    p.num_blocks = 1024;
    EXPECT_TRUE(rig.mgr->register_bdev(p, std::move(owned), "hold").ok());
    NamespaceOptions no;
    no.bdev_name = "Hold0";
    no.nsid = 2;
    EXPECT_TRUE(rig.tgt->add_namespace(kNqn, no).ok());
  });
  rig.settle();
  return be;
}

// The host's connection goes while the device behind the namespace holds its write: the
// target aborts the write in the bdev layer (nothing may issue it again: the host will send it
// anew, and write newer data after it), and the queue closes once the module ends it.
TEST(Io, AClosingQueueAbortsItsIoInTheBdevLayer) {
  IoRig rig;
  HoldingBackend* be = add_holding_namespace(rig, {.refuse_channels = false, .hold = true});
  const auto data = pattern(512 * 8, 3);
  const int w = rig.on_group(
      [&] { return rig.io->submit(rw(nvm::kWrite, 2, 0, 8), data.data(), data.size()); }, 1);
  rig.settle();
  ASSERT_EQ(be->held.size(), 1u);
  EXPECT_TRUE(be->aborted.empty());
  rig.on_group([&] { rig.io->disconnect(); }, 1);
  rig.settle();
  ASSERT_EQ(be->aborted.size(), 1u);
  EXPECT_EQ(be->aborted[0], be->held[0]);
  EXPECT_TRUE(be->held[0]->abort_requested());
  EXPECT_FALSE(rig.io->closed);  // the module still holds it
  rig.on_group([&] { be->held[0]->complete(bdev::IoStatus::kAborted); }, 1);
  rig.settle();
  EXPECT_EQ(sc_of(rig.io->slot(w).cqe), sn::sc::kAbortedByRequest);
  EXPECT_TRUE(rig.io->closed);
}

// The Abort admin command (CDW10: SQID, CID): the I/O command it names is given up in the bdev
// layer on its queue's thread, and the Abort completes when that command ends — CDW0 bit 0
// clear when it ended aborted, set when it completed anyway or was not in flight.
TEST(Io, AnAbortGivesTheCommandUpAndSaysHowItEnded) {
  IoRig rig;
  HoldingBackend* be = add_holding_namespace(rig, {.refuse_channels = false, .hold = true});
  const auto data = pattern(512 * 8, 4);
  auto submit_write = [&] {
    return rig.on_group(
        [&] { return rig.io->submit(rw(nvm::kWrite, 2, 0, 8), data.data(), data.size()); }, 1);
  };
  auto submit_abort = [&](int cid) {
    const uint32_t cdw10 = 1u | uint32_t(cid) << 16;  // SQID 1
    return rig.on_group([&] { return rig.admin_q->submit(admin(sn::admin::kAbort, 0, cdw10)); },
                        0);
  };
  // 1. The module ends the command as aborted: the Abort says so.
  const int w = submit_write();
  rig.settle();
  ASSERT_EQ(be->held.size(), 1u);
  const int a = submit_abort(w);
  rig.settle();
  ASSERT_EQ(be->aborted.size(), 1u);
  EXPECT_TRUE(be->held[0]->abort_requested());
  EXPECT_FALSE(rig.admin_q->slot(a).done);  // waits for the command's end
  rig.on_group([&] { be->held[0]->complete(bdev::IoStatus::kAborted); }, 1);
  rig.settle();
  EXPECT_EQ(sc_of(rig.io->slot(w).cqe), sn::sc::kAbortedByRequest);
  ASSERT_TRUE(rig.admin_q->slot(a).done);
  EXPECT_EQ(rig.admin_q->slot(a).cqe.status, 0);
  EXPECT_EQ(rig.admin_q->slot(a).cqe.dw0 & 1, 0u);  // aborted

  // 2. The module completes it anyway (the device had it): not aborted.
  const int w2 = submit_write();
  rig.settle();
  ASSERT_EQ(be->held.size(), 2u);
  const int a2 = submit_abort(w2);
  rig.settle();
  EXPECT_FALSE(rig.admin_q->slot(a2).done);
  rig.on_group([&] { be->held[1]->complete(bdev::IoStatus::kSuccess); }, 1);
  rig.settle();
  EXPECT_EQ(rig.io->slot(w2).cqe.status, 0);
  ASSERT_TRUE(rig.admin_q->slot(a2).done);
  EXPECT_EQ(rig.admin_q->slot(a2).cqe.dw0 & 1, 1u);

  // 3. Nothing in flight with that CID, or an admin command: not aborted, at once.
  auto& none = rig.run(*rig.admin_q, admin(sn::admin::kAbort, 0, 1u | 40u << 16));
  EXPECT_EQ(none.cqe.status, 0);
  EXPECT_EQ(none.cqe.dw0 & 1, 1u);
  auto& adm = rig.run(*rig.admin_q, admin(sn::admin::kAbort, 0, 0u | 3u << 16));
  EXPECT_EQ(adm.cqe.dw0 & 1, 1u);
}

// A namespace added while its bdev can give no channel (its device is being reset: chaos seed
// 7400130, a target restarted during a fatal status) is there all the same: its I/O answers
// Namespace Not Ready (DNR clear: the host retries) and gets a channel once one can be had.
TEST(Io, ANamespaceWithoutAChannelIsNotReadyUntilItGetsOne) {
  IoRig rig;
  HoldingBackend* be = add_holding_namespace(rig, {.refuse_channels = true, .hold = false});
  const auto data = pattern(512, 9);
  const sn::CompletionEntry refused = rig.cmd(rw(nvm::kWrite, 2, 0, 1), data.data(), 512).cqe;
  EXPECT_EQ(sct_of(refused), sn::sct::kGeneric);
  EXPECT_EQ(sc_of(refused), sn::sc::kNamespaceNotReady);
  EXPECT_FALSE(sn::status::dnr(refused.status));
  // Listed all the same.
  std::vector<uint32_t> list(1024);
  auto& ids = rig.run(*rig.admin_q, admin(sn::admin::kIdentify, 0, sn::cns::kActiveNamespaceList),
                      nullptr, 4096);
  ASSERT_EQ(ids.cqe.status, 0);
  std::memcpy(list.data(), ids.c2h.data(), 4096);
  EXPECT_EQ(list[1], 2u);
  be->refuse_channels = false;
  rig.advance_us(1000, 1000);  // past the next try
  EXPECT_EQ(rig.cmd(rw(nvm::kWrite, 2, 0, 1), data.data(), 512).cqe.status, 0);
}

TEST(Io, DisconnectEndsOnlyThatQueue) {
  IoRig rig;
  sn::SubmissionEntry disc{};
  disc.opcode = nf::kOpcodeFabrics;
  reinterpret_cast<uint8_t*>(&disc)[4] = nf::fctype::kDisconnect;
  EXPECT_EQ(rig.cmd(disc).cqe.status, 0);
  EXPECT_TRUE(rig.io->closed);
  Controller* c = rig.on_group([&] { return rig.admin_q->ctrlr; });
  EXPECT_EQ(c->io_queue_count(), 0u);
  EXPECT_EQ(rig.csts(*rig.admin_q) & sn::csts::kRdy, sn::csts::kRdy);
  // On the admin queue it is refused.
  auto& a = rig.run(*rig.admin_q, disc);
  EXPECT_EQ(sct_of(a.cqe), sn::sct::kCommandSpecific);
  EXPECT_EQ(sc_of(a.cqe), nf::sc::kInvalidQueueType);
}

}  // namespace
}  // namespace pollux::fabric::target::testing
