// The Pollux RNIC's shared structures (spec/rnic.h): offsets are static_asserted in the
// header; here the encodings a driver and the device must agree on are checked byte by byte.
#include <gtest/gtest.h>

#include <cstring>

#include "spec/rnic.h"

namespace pollux::spec::rnic {
namespace {

TEST(RnicSpec, DoorbellsDoNotOverlapAndFitThePage) {
  EXPECT_EQ(reg::sq_doorbell(0), reg::kDoorbellBase);
  EXPECT_EQ(reg::rq_doorbell(2), reg::kDoorbellBase + 20);
  EXPECT_LE(reg::rq_doorbell(kMaxQp - 1) + 4, reg::cq_doorbell(0));
  EXPECT_LE(reg::cq_doorbell(kMaxCq - 1) + 4, reg::srq_doorbell(0));
  EXPECT_LE(reg::srq_doorbell(kMaxSrq - 1) + 4, reg::kDoorbellBase + reg::kDoorbellSize);
  EXPECT_LE(reg::kDoorbellBase + reg::kDoorbellSize, reg::kPushBase);
}

TEST(RnicSpec, PushSlotsAlternateWithinEachQpsPairAndFillTheWindow) {
  EXPECT_EQ(reg::push_slot(0, 0), reg::kPushBase);
  EXPECT_EQ(reg::push_slot(0, 1), reg::kPushBase + sizeof(SendWqe));
  EXPECT_EQ(reg::push_slot(0, 2), reg::kPushBase) << "count 2 reuses count 0's slot";
  EXPECT_EQ(reg::push_slot(3, 7), reg::kPushBase + 3 * 256 + 128);
  EXPECT_EQ(reg::push_slot(kMaxQp - 1, 1) + sizeof(SendWqe), reg::kPushBase + reg::kPushSize);
  EXPECT_EQ(reg::kPushBase + reg::kPushSize, kBar0Size);
  EXPECT_EQ(kBar0Size & (kBar0Size - 1), 0u) << "a BAR's size is a power of two";
}

TEST(RnicSpec, PhaseFlipsOnEveryPassOverTheRing) {
  // A 4-entry ring (log 2): counts 0-3 write phase 1, 4-7 phase 0, 8-11 phase 1 again.
  EXPECT_EQ(phase_for(0, 2), 1);
  EXPECT_EQ(phase_for(3, 2), 1);
  EXPECT_EQ(phase_for(4, 2), 0);
  EXPECT_EQ(phase_for(8, 2), 1);
  EXPECT_EQ(phase_for(0xffffffffu, 2), 0);  // the counter wraps at 2^32, a multiple of 8
}

TEST(RnicSpec, CqeBytes) {
  Cqe c{};
  c.wr_id = 0x1122334455667788ull;
  c.byte_len = 4096;
  c.qpn = 7;
  c.wqe_counter = 0xabcd;
  c.status = static_cast<uint8_t>(WcStatus::kRemAccessErr);
  c.opcode = static_cast<uint8_t>(WcOpcode::kRecvRdmaWithImm);
  c.owner = 1;
  const auto* b = reinterpret_cast<const uint8_t*>(&c);
  EXPECT_EQ(b[0], 0x88);
  EXPECT_EQ(b[9], 0x10);  // byte_len 4096 little-endian
  EXPECT_EQ(b[16], 7);
  EXPECT_EQ(b[20], 0xcd);
  EXPECT_EQ(b[22], 10);
  EXPECT_EQ(b[23], 129);
  EXPECT_EQ(b[31], 1);
}

TEST(RnicSpec, VerbsNumbering) {
  // libibverbs' values: a verbs layer passes these through unchanged.
  EXPECT_EQ(static_cast<int>(QpState::kErr), 6);
  EXPECT_EQ(static_cast<int>(WcStatus::kWrFlushErr), 5);
  EXPECT_EQ(static_cast<int>(WcStatus::kRetryExcErr), 12);
  EXPECT_EQ(static_cast<int>(WrOpcode::kRdmaRead), 4);
  EXPECT_EQ(attr::kDestQpn, 1u << 20);
  EXPECT_EQ(access::kRemoteRead, 4u);
}

TEST(RnicSpec, CommandPayloadsFitTheMailbox) {
  CommandMailbox m{};
  EXPECT_LE(sizeof(QpAttrs), sizeof m.in);
  EXPECT_LE(sizeof(QpAttrs), sizeof m.out);
  EXPECT_LE(sizeof(RegMrIn), sizeof m.in);
  EXPECT_LE(sizeof(QueryDeviceOut), sizeof m.out);
  RegMrIn in{1, access::kRemoteRead, 0x1000, 8192, 0x200000};
  std::memcpy(m.in, &in, sizeof in);
  EXPECT_EQ(m.in[4], access::kRemoteRead);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(&m)[8 + 8 + 1], 0x10);  // va 0x1000, byte 1
}

}  // namespace
}  // namespace pollux::spec::rnic
