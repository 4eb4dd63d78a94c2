// The target's send batching on the kernel's TCP (recorded at the socket seam): a C2HData
// batch of at least TcpConnection::kCorkBytes goes with send_more (TCP_CORK: the kernel holds
// its last partial segment back), and what was held leaves by push() once a poll adds
// nothing — the host gets all of it without sending anything more. Small answers (QD 1) go
// with a plain send and are never held.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric/tcp/live_target.h"
#include "fabric/tcp/raw_host.h"
#include "fabric/tcp/testing/recording_network.h"

namespace pollux::fabric::tcp::testing {
namespace {

struct Rig {
  RecordingNetwork net;
  std::unique_ptr<LiveTarget> target;
  std::unique_ptr<Raw> admin, io;
  Rig() {
    LiveTargetOptions o;
    o.network = &net;
    target = std::make_unique<LiveTarget>(o);
    admin = std::make_unique<Raw>(target->port());
    admin->handshake();
    const uint16_t cntlid = connect_admin(*admin, target->nqn());
    io = std::make_unique<Raw>(target->port());
    io->handshake();
    EXPECT_EQ(connect_io(*io, target->nqn(), cntlid, nf::connect::kCattrDisableSqFlowControl), 0);
  }
  // Reads `bytes` at LBA 0 on the I/O queue: one C2HData PDU with the SUCCESS flag.
  void read(uint16_t cid, uint32_t bytes) {
    sn::SubmissionEntry e = sqe(sn::nvm::kRead, cid, 1);
    e.cdw12 = bytes / 512 - 1;
    e.dptr.sgl1 = nf::sgl::transport(bytes);
    io->send(capsule(e, nullptr, 0, false, false));
    const auto p = io->pdu();  // a held-back tail never pushed would time out here
    nt::C2hData c{};
    ASSERT_EQ(p.size(), sizeof c + bytes);
    std::memcpy(&c, p.data(), sizeof c);
    EXPECT_EQ(c.ch.type, nt::pdu::kC2hData);
    EXPECT_EQ(c.cccid, cid);
    EXPECT_EQ(c.datal, bytes);
    EXPECT_TRUE(c.ch.flags & nt::flags::kSuccess);
  }
  // What the target did on the I/O queue's socket (accepted second).
  std::string io_calls() const { return net.calls().at(1); }
};

TEST(TcpSendBatching, ABigBatchIsHeldBackThenPushedWithoutTheHostSendingMore) {
  Rig rig;
  rig.read(7, 131072);  // 128 KiB: two full 64 KiB segments' worth, and a tail
  const std::string calls = rig.io_calls();
  const auto m = calls.find('M');
  ASSERT_NE(m, std::string::npos) << calls;
  // The host had it all: after the last send_more, a push (nothing was sent after it).
  EXPECT_EQ(calls.back(), 'P') << calls;
}

TEST(TcpSendBatching, SmallAnswersAreNeverHeld) {
  Rig rig;
  for (uint16_t cid = 1; cid <= 16; ++cid) rig.read(cid, 4096);
  const std::string calls = rig.io_calls();
  EXPECT_EQ(calls.find('M'), std::string::npos) << calls;
  EXPECT_EQ(calls.find('P'), std::string::npos) << calls;
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
