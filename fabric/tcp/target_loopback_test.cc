// Pollux's NVMe/TCP host (the driver's controller through fabric/tcp's host transport) against
// Pollux's NVMe/TCP target in the same process, over 127.0.0.1: identify, verified I/O at sizes
// that travel in-capsule and by R2T, digests, many R2Ts per command, resets under I/O,
// disconnect and reconnect.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "fabric/target/controller.h"
#include "fabric/tcp/live_target.h"
#include "fabric/tcp/test_host.h"

namespace pollux::fabric::tcp::testing {
namespace {

namespace sn = spec::nvme;

// Writes and reads back every size: 512 B to 4 KiB travel in the capsule (IOCCSZ), larger by R2T.
void verified_sizes(Host& h) {
  uint64_t lba = 0;
  for (uint32_t bytes : {512u, 4096u, 8192u, 65536u, 131072u}) {
    const uint32_t nlb = bytes / 512;
    fill(h.buf(0), bytes, bytes);
    ASSERT_EQ(h.io(true, h.buf(0), lba, nlb), 0) << bytes << " bytes";
    std::memset(h.buf(1 << 20), 0xee, bytes);
    ASSERT_EQ(h.io(false, h.buf(1 << 20), lba, nlb), 0) << bytes << " bytes";
    ASSERT_EQ(std::memcmp(h.buf(0), h.buf(1 << 20), bytes), 0)
        << bytes << " bytes read back differ";
    lba += nlb + 8;
  }
}

TEST(TcpLoopback, IdentifyThenVerifiedIoAtSeveralSizes) {
  LiveTarget t;
  Host h(t.trid());
  ASSERT_TRUE(h.ok());
  const sn::IdentifyController& id = h.ctrl->identify();
  EXPECT_EQ(std::string(id.subnqn), t.nqn());
  EXPECT_EQ(std::string(id.mn, 22), "Pollux bdev Controller");
  EXPECT_EQ(id.mdts, 5);
  EXPECT_EQ(h.ns->num_blocks, 65536u);
  EXPECT_EQ(h.ns->block_size, 512u);
  EXPECT_EQ(h.ctrl->namespace_ids(), std::vector<uint32_t>{1});
  verified_sizes(h);
  // An LBA beyond the namespace: the target's status reaches the host.
  EXPECT_EQ(sn::status::sc(h.io(false, h.buf(0), 65536, 1)), sn::sc::kLbaOutOfRange);
}

TEST(TcpLoopback, HeaderAndDataDigests) {
  LiveTarget t;
  Host h(t.trid("hdgst:1 ddgst:1"));
  ASSERT_TRUE(h.ok());
  verified_sizes(h);
}

TEST(TcpLoopback, ManyR2tsPerCommand) {
  LiveTargetOptions o;
  o.tcp.max_h2c_data_size = 4096;  // a 128 KiB write takes 32 R2Ts
  o.tcp.in_capsule_data_size = 0;  // and every write, even 512 bytes, goes by R2T
  LiveTarget t(o);
  Host h(t.trid());
  ASSERT_TRUE(h.ok());
  verified_sizes(h);
}

// Many commands in flight: random verified writes then reads, each block range owned by one
// slot so what is read must be what that slot last wrote.
TEST(TcpLoopback, QueueDepth32VerifiedRandomIo) {
  LiveTarget t;
  Host h(t.trid(), 128);
  ASSERT_TRUE(h.ok());
  constexpr uint32_t kSlots = 32, kBlocks = 16;  // 8 KiB each: R2T
  std::mt19937 rng(7);
  std::vector<uint32_t> gen(kSlots, 0);
  Host::Done ds[kSlots];
  for (int round = 0; round < 20; ++round) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      ds[s] = {};
      gen[s] = rng();
      fill(h.buf(s * 8192), 8192, gen[s]);
      ASSERT_EQ(h.qp->write(*h.ns, h.buf(s * 8192), s * 1024, kBlocks, Host::on_done, &ds[s]), 0);
    }
    ASSERT_TRUE(h.wait(ds, kSlots));
    for (uint32_t s = 0; s < kSlots; ++s) ASSERT_EQ(ds[s].status, 0);
    for (uint32_t s = 0; s < kSlots; ++s) {
      ds[s] = {};
      ASSERT_EQ(
          h.qp->read(*h.ns, h.buf((1 << 20) + s * 8192), s * 1024, kBlocks, Host::on_done, &ds[s]),
          0);
    }
    ASSERT_TRUE(h.wait(ds, kSlots));
    std::vector<uint8_t> want(8192);
    for (uint32_t s = 0; s < kSlots; ++s) {
      ASSERT_EQ(ds[s].status, 0);
      fill(want.data(), want.size(), gen[s]);
      ASSERT_EQ(std::memcmp(want.data(), h.buf((1 << 20) + s * 8192), 8192), 0) << "slot " << s;
    }
  }
}

// Controller resets (CC.EN 1 -> 0, every queue reconnected) with reads in flight: every
// command ends (done or retriable), the data written before is intact, I/O goes on after.
TEST(TcpLoopback, ResetsUnderIo) {
  LiveTarget t;
  Host h(t.trid());
  ASSERT_TRUE(h.ok());
  fill(h.buf(0), 1 << 20, 99);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_EQ(h.io(true, h.buf(i * 131072), i * 256, 256), 0);
  for (int reset = 0; reset < 3; ++reset) {
    Host::Done ds[16];
    for (uint32_t i = 0; i < 16; ++i)
      ASSERT_EQ(h.qp->read(*h.ns, h.buf((2 << 20) + i * 65536), (i % 8) * 256, 128, Host::on_done,
                           &ds[i]),
                0);
    ASSERT_EQ(h.ctrl->reset(), 0) << "reset " << reset;
    ASSERT_TRUE(h.wait(ds, 16));
    for (uint32_t i = 0; i < 16; ++i) {
      if (ds[i].status != 0) {
        EXPECT_FALSE(sn::status::dnr(ds[i].status)) << "a reset ends I/O retriably";
      }
    }
    for (uint32_t i = 0; i < 8; ++i) {
      ASSERT_EQ(h.io(false, h.buf(4 << 20), i * 256, 256), 0);
      ASSERT_EQ(std::memcmp(h.buf(4 << 20), h.buf(i * 131072), 131072), 0)
          << "after reset " << reset;
    }
  }
}

TEST(TcpLoopback, DisconnectAndReconnect) {
  LiveTarget t;
  uint16_t first;
  {
    Host h(t.trid());
    ASSERT_TRUE(h.ok());
    first = h.ctrl->identify().cntlid;
    fill(h.buf(0), 65536, 5);
    ASSERT_EQ(h.io(true, h.buf(0), 1000, 128), 0);
  }  // the host shuts the controller down and closes every connection
  // The target lets the association go.
  size_t ctrls = 1;
  for (int i = 0; i < 500 && ctrls != 0; ++i) {
    t.on_target([&](target::Target& tg) { ctrls = tg.find(t.nqn())->controllers().size(); });
    if (ctrls) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ctrls, 0u);
  Host h(t.trid("hdgst:1"));
  ASSERT_TRUE(h.ok());
  EXPECT_NE(h.ctrl->identify().cntlid, first);  // a new association, a new controller
  std::vector<uint8_t> want(65536);
  fill(want.data(), want.size(), 5);
  ASSERT_EQ(h.io(false, h.buf(0), 1000, 128), 0);
  EXPECT_EQ(std::memcmp(want.data(), h.buf(0), 65536), 0);
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
