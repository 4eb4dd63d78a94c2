// The wire: latency, ordering, scripted and seeded faults, and replay from a seed; seeded
// link flaps and partitions; the timed wire (a NIC profile's network under it).
#include "emulator/rnic/wire.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace pollux::emu::rnic {
namespace {

struct Sink : WirePort {
  std::vector<std::vector<uint8_t>> got;
  std::vector<uint64_t> at_ps;  // delivery times
  const Wire* wire = nullptr;
  void receive(uint64_t, const uint8_t* p, std::size_t n) override {
    got.emplace_back(p, p + n);
    if (wire != nullptr) at_ps.push_back(wire->delivery_time_ps());
  }
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

TEST(Wire, FlapsFollowTheSeedAndLastTheirDownTime) {
  WireFaults f;
  f.flap_interval_ns = 100'000;  // up 100 us on average, then down 10 us
  f.flap_down_ns = 10'000;
  Wire a(7, f), b(7, f), c(8, f);
  uint64_t down = 0;
  std::vector<uint64_t> edges_a, edges_b, edges_c;
  bool was_a = false, was_b = false, was_c = false;
  for (uint64_t t = 0; t < 100'000'000; t += 1000) {  // 100 ms in 1 us steps
    const bool da = a.flapping(1, t), db = b.flapping(1, t), dc = c.flapping(1, t);
    down += da;
    if (da != was_a) edges_a.push_back(t);
    if (db != was_b) edges_b.push_back(t);
    if (dc != was_c) edges_c.push_back(t);
    was_a = da, was_b = db, was_c = dc;
  }
  EXPECT_EQ(edges_a, edges_b);
  EXPECT_NE(edges_a, edges_c);
  // About 100 ms / 110 us = 900 flaps of 10 us: down ~9% of the time.
  EXPECT_GT(edges_a.size(), 2 * 700u);
  EXPECT_LT(edges_a.size(), 2 * 1100u);
  // Each flap is down for exactly 10 us (two flaps less than a sampling step apart look
  // like one longer one).
  std::size_t exact = 0, flaps = 0;
  for (std::size_t i = 0; i + 1 < edges_a.size(); i += 2, ++flaps) {
    EXPECT_GE(edges_a[i + 1] - edges_a[i], 10'000u) << i;
    exact += edges_a[i + 1] - edges_a[i] == 10'000;
  }
  EXPECT_GT(exact, flaps * 95 / 100);
  EXPECT_NEAR(static_cast<double>(down) / 100'000, 0.09, 0.02);
  // Another port has a schedule of its own.
  bool differs = false;
  for (uint64_t t = 0; t < 10'000'000 && !differs; t += 1000)
    differs |= a.flapping(2, t) != a.flapping(1, t);
  EXPECT_TRUE(differs);
}

TEST(Wire, PacketsSentDuringAFlapAreLost) {
  WireFaults f;
  f.flap_interval_ns = 50'000;
  f.flap_down_ns = 5'000;
  Wire w(3, f, 100);
  Sink b;
  w.attach(2, &b);
  Wire probe(3, f);
  uint64_t expected_lost = 0;
  for (uint64_t t = 0; t < 1'000'000; t += 500) {
    expected_lost += probe.flapping(1, t) || probe.flapping(2, t);
    w.transmit(t, 1, 2, packet(0).data(), 16);
  }
  w.deliver_until(UINT64_MAX - 1);
  EXPECT_GT(expected_lost, 0u);
  EXPECT_EQ(w.stats().dropped, expected_lost);
  EXPECT_EQ(b.got.size(), 2000 - expected_lost);
}

TEST(Wire, PartitionCutsOnlyBetweenItsSides) {
  Wire w(1, {}, 100);
  Sink n1, n2, n3;
  w.attach(1, &n1);
  w.attach(2, &n2);
  w.attach(3, &n3);
  w.partition({1, 2});
  w.transmit(0, 1, 2, packet(1).data(), 16);  // same side
  w.transmit(0, 1, 3, packet(2).data(), 16);  // across
  w.transmit(0, 3, 2, packet(3).data(), 16);  // across
  w.deliver_until(1000);
  EXPECT_EQ(n2.got.size(), 1u);
  EXPECT_EQ(n3.got.size(), 0u);
  EXPECT_EQ(w.stats().dropped, 2u);
  w.heal();
  w.transmit(1000, 3, 2, packet(4).data(), 16);
  w.deliver_until(2000);
  EXPECT_EQ(n2.got.size(), 2u);
}

NicProfile direct_25g() {
  NicProfile p;
  p.port.rate_gbps = 25;
  p.port.propagation = 10 * timing::kNs;
  return p;
}

TEST(TimedWire, CarriesPacketsThroughTheProfilesNetwork) {
  Wire w(1);
  w.enable_timing(direct_25g());
  Sink b;
  b.wire = &w;
  w.attach(1, &b);  // the sender needs a port too
  Sink c;
  c.wire = &w;
  w.attach(2, &c);
  const std::vector<uint8_t> p(4112, 0);
  w.transmit_at(1'000'000, 1, 2, p.data(), p.size());
  w.transmit_at(1'000'000, 1, 2, p.data(), p.size());
  EXPECT_EQ(w.queued(1), 2u);
  // 4,178 bytes at 25 Gb/s = 1,336.96 ns each, then 10 ns of cable.
  EXPECT_EQ(w.next_event_ns(), 1'000u);  // the first frame starts
  while (w.next_event_ns() != UINT64_MAX) w.deliver_until(w.next_event_ns());
  ASSERT_EQ(c.at_ps.size(), 2u);
  EXPECT_EQ(c.at_ps[0], 1'000'000u + 1'336'960 + 10'000);
  EXPECT_EQ(c.at_ps[1], 1'000'000u + 2 * 1'336'960 + 10'000);
  EXPECT_EQ(w.stats().delivered, 2u);
  EXPECT_EQ(w.network_stats()->frames, 2u);
  EXPECT_TRUE(w.idle());
}

TEST(TimedWire, FaultsAreDecidedWhenTheFrameStarts) {
  WireFaults f;
  f.loss = 1.0;
  Wire w(1, f);
  w.enable_timing(direct_25g());
  Sink a, b;
  w.attach(1, &a);
  w.attach(2, &b);
  w.record_trace(true);
  w.transmit_at(5'000'000, 1, 2, packet(1).data(), 16);
  EXPECT_EQ(w.stats().sent, 0u) << "not decided before it leaves";
  w.deliver_until(10'000);
  EXPECT_EQ(w.stats().sent, 1u);
  EXPECT_EQ(w.stats().dropped, 1u);
  ASSERT_EQ(w.trace().size(), 1u);
  EXPECT_EQ(w.trace()[0].rfind("t=5000 ", 0), 0u) << w.trace()[0];
  EXPECT_TRUE(b.got.empty());
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
