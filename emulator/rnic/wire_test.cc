// The wire: latency, ordering, scripted and seeded faults, and replay from a seed.
#include "emulator/rnic/wire.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace pollux::emu::rnic {
namespace {

struct Sink : WirePort {
  std::vector<std::vector<uint8_t>> got;
  void receive(uint64_t, const uint8_t* p, std::size_t n) override { got.emplace_back(p, p + n); }
};

std::vector<uint8_t> packet(uint16_t id) {
  std::vector<uint8_t> p(16, 0);
  p[0] = 0x04;                            // SEND Only
  p[10] = static_cast<uint8_t>(id >> 8);  // the PSN's low 16 bits
  p[11] = static_cast<uint8_t>(id);
  return p;
}
uint16_t id_of(const std::vector<uint8_t>& p) {
  return static_cast<uint16_t>(p[10] << 8 | p[11]);
}

TEST(Wire, DeliversAfterTheLatencyInSendOrder) {
  Wire w(1, {}, 500);
  Sink b;
  w.attach(2, &b);
  for (uint8_t i = 0; i < 3; ++i) w.transmit(100, 1, 2, packet(i).data(), 16);
  EXPECT_EQ(w.next_event_ns(), 600u);
  EXPECT_EQ(w.deliver_until(599), 0u);
  EXPECT_EQ(w.deliver_until(600), 3u);
  ASSERT_EQ(b.got.size(), 3u);
  for (uint8_t i = 0; i < 3; ++i) EXPECT_EQ(b.got[i][11], i);
  EXPECT_TRUE(w.idle());
  EXPECT_EQ(w.next_event_ns(), UINT64_MAX);
}

TEST(Wire, ScriptedDropLosesExactlyThatPacket) {
  Wire w(1);
  Sink b;
  w.attach(2, &b);
  w.drop_packet(1);
  for (uint8_t i = 0; i < 3; ++i) w.transmit(0, 1, 2, packet(i).data(), 16);
  w.deliver_until(UINT64_MAX - 1);
  ASSERT_EQ(b.got.size(), 2u);
  EXPECT_EQ(b.got[0][11], 0);
  EXPECT_EQ(b.got[1][11], 2);
  EXPECT_EQ(w.stats().dropped, 1u);
}

TEST(Wire, UnknownDestinationIsDropped) {
  Wire w(1);
  w.transmit(0, 1, 9, packet(0).data(), 16);
  EXPECT_EQ(w.deliver_until(UINT64_MAX - 1), 0u);
  EXPECT_EQ(w.stats().dropped, 1u);
}

// Runs 2000 packets through a faulty wire and returns what arrived.
std::vector<std::vector<uint8_t>> run(Wire& w) {
  Sink b;
  w.attach(2, &b);
  w.record_trace(true);
  for (int i = 0; i < 2000; ++i)
    w.transmit(i * 10, 1, 2, packet(static_cast<uint16_t>(i)).data(), 16);
  w.deliver_until(UINT64_MAX - 1);
  return b.got;
}

TEST(Wire, FaultsFollowTheSeed) {
  const uint64_t seed = 0x5eed;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const WireFaults f{0.05, 0.05, 0.05, 0.05, 5000};
  Wire a(seed, f), b(seed, f), c(seed + 1, f);
  const auto ga = run(a);
  const auto gb = run(b);
  run(c);
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(a.trace(), b.trace());
  EXPECT_EQ(a.trace_hash(), b.trace_hash());
  EXPECT_NE(a.trace_hash(), c.trace_hash());
  EXPECT_EQ(a.decision_hash(), b.decision_hash());
  EXPECT_NE(a.decision_hash(), c.decision_hash());
  EXPECT_EQ(a.decisions(), 2000u);
  // Each fault happened at roughly its rate (2000 packets, 5%: 100 expected).
  for (uint64_t n :
       {a.stats().dropped, a.stats().corrupted, a.stats().duplicated, a.stats().reordered}) {
    EXPECT_GT(n, 50u);
    EXPECT_LT(n, 160u);
  }
  EXPECT_EQ(a.stats().delivered, 2000 - a.stats().dropped + a.stats().duplicated);
  // Reordering: some packet arrived after one sent later.
  bool reordered = false;
  for (std::size_t i = 1; i < ga.size(); ++i) reordered |= id_of(ga[i]) < id_of(ga[i - 1]);
  EXPECT_TRUE(reordered);
}

// The decision hash covers what a trace line says and not the bytes beyond the headers: two
// runs that differ only in a payload (a host address in a RETH) hash alike; another fate,
// time or PSN does not.
TEST(Wire, DecisionHashLeavesPayloadsOut) {
  auto hash = [](uint8_t payload_byte, uint64_t at, uint16_t id, bool down) {
    Wire w(3);
    Sink b;
    w.attach(2, &b);
    if (down) w.set_link_up(2, false);
    std::vector<uint8_t> p = packet(id);
    p[15] = payload_byte;
    w.transmit(at, 1, 2, p.data(), p.size());
    return w.decision_hash();
  };
  EXPECT_EQ(hash(1, 10, 5, false), hash(2, 10, 5, false));
  EXPECT_NE(hash(1, 10, 5, false), hash(1, 11, 5, false));
  EXPECT_NE(hash(1, 10, 5, false), hash(1, 10, 6, false));
  EXPECT_NE(hash(1, 10, 5, false), hash(1, 10, 5, true));
}

}  // namespace
}  // namespace pollux::emu::rnic
