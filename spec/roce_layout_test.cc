// RoCEv2 headers of spec/roce.h built field by field and compared with bytes worked out from
// the InfiniBand specification's figures (BTH 9.2, RETH 9.3.3, AETH 9.3.5), plus the PSN
// arithmetic, the RNR timer table and the opcode classification.
#include <gtest/gtest.h>

#include <cstring>

#include "spec/roce.h"

namespace pollux::spec::roce {
namespace {

TEST(RoceSpec, BthFieldsSitWhereTheSpecPutsThem) {
  Bth h{};
  h.set_opcode(opcode::kRdmaWriteOnlyWithImmediate);
  h.set_flags(/*se=*/true, /*m=*/false, /*pad=*/3, /*tver=*/0);
  h.set_pkey(kDefaultPkey);
  h.set_dest_qp(0x123456);
  h.set_ack_req(true);
  h.set_psn(0xabcdef);
  const uint8_t want[12] = {0x0b, 0xb0, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef};
  EXPECT_EQ(std::memcmp(h.b, want, 12), 0);
  EXPECT_EQ(h.opcode(), 0x0b);
  EXPECT_TRUE(h.solicited());
  EXPECT_EQ(h.pad_count(), 3);
  EXPECT_EQ(h.dest_qp(), 0x123456u);
  EXPECT_TRUE(h.ack_req());
  EXPECT_EQ(h.psn(), 0xabcdefu);
  h.set_psn(0x1000000 + 5);  // PSNs are 24-bit
  EXPECT_EQ(h.psn(), 5u);
}

TEST(RoceSpec, RethAethImmAreBigEndian) {
  Reth r{};
  r.set(0x0102030405060708ull, 0xa1b2c3d4, 4096);
  const uint8_t want_reth[16] = {1, 2, 3, 4, 5, 6, 7, 8, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0x10, 0};
  EXPECT_EQ(std::memcmp(r.b, want_reth, 16), 0);
  EXPECT_EQ(r.va(), 0x0102030405060708ull);
  EXPECT_EQ(r.rkey(), 0xa1b2c3d4u);
  EXPECT_EQ(r.dma_length(), 4096u);

  Aeth a{};
  a.set(syndrome::nak(syndrome::kNakRemoteAccessError), 0x000102);
  const uint8_t want_aeth[4] = {0x62, 0x00, 0x01, 0x02};
  EXPECT_EQ(std::memcmp(a.b, want_aeth, 4), 0);
  EXPECT_EQ(syndrome::type(a.syndrome()), syndrome::kTypeNak);
  EXPECT_EQ(syndrome::value(a.syndrome()), syndrome::kNakRemoteAccessError);
  EXPECT_EQ(syndrome::ack(), 0x1f);
  EXPECT_EQ(syndrome::rnr_nak(14), 0x2e);
  EXPECT_EQ(syndrome::nak(syndrome::kNakPsnSequenceError), 0x60);
  EXPECT_EQ(syndrome::nak(syndrome::kNakInvalidRequest), 0x61);

  ImmDt i{};
  i.set(0xdeadbeef);
  EXPECT_EQ(i.b[0], 0xde);
  EXPECT_EQ(i.value(), 0xdeadbeefu);
}

TEST(RoceSpec, OpcodesFollowIbaTable38) {
  using namespace opcode;
  EXPECT_EQ(kAcknowledge, 0x11);
  EXPECT_EQ(kRdmaReadResponseOnly, 0x10);
  for (uint8_t op = 0; op <= kAcknowledge; ++op) {
    // Each packet has exactly one position in its message.
    const int positions = is_first(op) + is_middle(op) + is_last(op) + is_only(op);
    EXPECT_EQ(positions, 1) << int(op);
    EXPECT_EQ(transport(op), kTransportRc);
  }
  EXPECT_TRUE(has_reth(kRdmaWriteFirst));
  EXPECT_FALSE(has_reth(kRdmaWriteMiddle));
  EXPECT_TRUE(has_reth(kRdmaReadRequest));
  EXPECT_TRUE(has_aeth(kRdmaReadResponseFirst));
  EXPECT_FALSE(has_aeth(kRdmaReadResponseMiddle));
  EXPECT_TRUE(has_immediate(kSendLastWithImmediate));
  EXPECT_FALSE(has_immediate(kSendLast));
  EXPECT_FALSE(has_payload(kRdmaReadRequest));
  EXPECT_FALSE(has_payload(kAcknowledge));
}

TEST(RoceSpec, PsnArithmeticWraps) {
  EXPECT_EQ(psn_add(kPsnMask, 1), 0u);
  EXPECT_EQ(psn_diff(0, kPsnMask), 1);
  EXPECT_EQ(psn_diff(kPsnMask, 0), -1);
  EXPECT_EQ(psn_diff(100, 90), 10);
  EXPECT_EQ(psn_diff(90, 100), -10);
}

TEST(RoceSpec, TimersAndMtu) {
  EXPECT_EQ(rnr_timer_us(0), 655360u);  // code 0 is the longest
  EXPECT_EQ(rnr_timer_us(1), 10u);
  EXPECT_EQ(rnr_timer_us(14), 1280u);
  EXPECT_EQ(rnr_timer_us(31), 491520u);
  EXPECT_EQ(local_ack_timeout_ns(0), 0u);              // infinite
  EXPECT_EQ(local_ack_timeout_ns(14), 4096ull << 14);  // ~67 ms, a common setting
  EXPECT_EQ(mtu_bytes(Mtu::k256), 256u);
  EXPECT_EQ(mtu_bytes(Mtu::k4096), 4096u);
  EXPECT_FALSE(valid_mtu(0));
  EXPECT_FALSE(valid_mtu(6));
  EXPECT_EQ(packets_for(0, 1024), 1u);
  EXPECT_EQ(packets_for(1024, 1024), 1u);
  EXPECT_EQ(packets_for(1025, 1024), 2u);
}

}  // namespace
}  // namespace pollux::spec::roce
