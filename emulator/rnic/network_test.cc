// The timed Ethernet under the wire, against hand-computed arithmetic: serialisation and
// propagation on a direct cable, back-to-back frames paced by the port, frames ordered by
// when their data is ready, the switch's port latency (cut-through and store-and-forward),
// tail drop without PFC, and PFC: XOFF holds a sender's frames (none starts while paused),
// nothing is dropped, and XON lets them go.
#include "emulator/rnic/network.h"

#include <gtest/gtest.h>

#include <vector>

namespace pollux::emu::rnic {
namespace {

using timing::kNs;

constexpr uint64_t kA = 1, kB = 2, kC = 3;
constexpr std::size_t kMtuPacket = 4112;  // SEND only at MTU 4096: 4,178 bytes on the wire
constexpr SimTime kMtuAt100 = 334'240;    // 4,178 * 8 / 100 Gb/s

struct Recorder : Network::Sink {
  struct Event {
    SimTime t;
    uint64_t src, dst;
    uint8_t tag;
  };
  Network* net = nullptr;
  std::vector<Event> departed, arrived;
  bool lose_all = false;
  uint64_t departed_while_paused = 0;
  Fate depart(SimTime t, Network::Frame& f) override {
    if (net != nullptr && net->paused(f.src)) ++departed_while_paused;
    departed.push_back({t, f.src, f.dst, f.bytes[0]});
    return Fate{lose_all, false, 0};
  }
  void arrive(SimTime t, Network::Frame& f) override {
    arrived.push_back({t, f.src, f.dst, f.bytes[0]});
  }
};

NicProfile direct(uint32_t gbps = 100) {
  NicProfile p;
  p.port.rate_gbps = gbps;
  p.port.propagation = 10 * kNs;
  return p;
}

NicProfile switched(bool cut_through, bool pfc, uint64_t buffer) {
  NicProfile p = direct();
  p.sw.present = true;
  p.sw.port_latency = 300 * kNs;
  p.sw.cut_through = cut_through;
  p.sw.buffer_bytes = buffer;
  p.sw.pfc = pfc;
  if (pfc) {
    p.sw.xoff_bytes = buffer - pfc_headroom_bytes(p, 4132);
    p.sw.xon_bytes = p.sw.xoff_bytes / 2;
  }
  return p;
}

void send(Network& n, SimTime ready, uint64_t src, uint64_t dst, uint8_t tag,
          std::size_t len = kMtuPacket) {
  std::vector<uint8_t> bytes(len, 0);
  bytes[0] = tag;
  n.send(ready, src, dst, bytes.data(), bytes.size());
}

struct Bed {
  Recorder sink;
  Network net;
  explicit Bed(const NicProfile& p) : net(p, &sink) {
    sink.net = &net;
    for (uint64_t a : {kA, kB, kC}) net.add_port(a);
  }
};

TEST(Network, DirectCableIsSerialisationPlusPropagation) {
  Bed b(direct());
  send(b.net, 1000 * kNs, kA, kB, 1);
  EXPECT_EQ(b.net.queued(kA), 1u);
  b.net.run_until(UINT64_MAX);
  ASSERT_EQ(b.sink.arrived.size(), 1u);
  EXPECT_EQ(b.sink.departed[0].t, 1000 * kNs);
  EXPECT_EQ(b.sink.arrived[0].t, 1000 * kNs + kMtuAt100 + 10 * kNs);
  EXPECT_EQ(b.net.queued(kA), 0u);
  EXPECT_EQ(b.net.stats().bytes, 4178u);
}

TEST(Network, BackToBackFramesArePacedByThePort) {
  Bed b(direct(25));
  for (uint8_t i = 0; i < 5; ++i) send(b.net, 0, kA, kB, i);
  b.net.run_until(UINT64_MAX);
  ASSERT_EQ(b.sink.arrived.size(), 5u);
  for (uint8_t i = 0; i < 5; ++i) {
    EXPECT_EQ(b.sink.arrived[i].tag, i);
    EXPECT_EQ(b.sink.arrived[i].t, (i + 1) * SimTime{1'336'960} + 10 * kNs) << int(i);
  }
}

TEST(Network, FramesLeaveInTheOrderTheirDataIsReady) {
  Bed b(direct());
  send(b.net, 5000 * kNs, kA, kB, 1);  // a payload still being read
  send(b.net, 100 * kNs, kA, kB, 2, 20);  // an ACK made meanwhile
  b.net.run_until(UINT64_MAX);
  ASSERT_EQ(b.sink.arrived.size(), 2u);
  EXPECT_EQ(b.sink.arrived[0].tag, 2);
  EXPECT_EQ(b.sink.departed[0].t, 100 * kNs);
  EXPECT_EQ(b.sink.departed[1].t, 5000 * kNs);
}

TEST(Network, RunUntilStopsAtTheGivenTime) {
  Bed b(direct());
  send(b.net, 0, kA, kB, 1);
  const SimTime arrival = kMtuAt100 + 10 * kNs;
  b.net.run_until(arrival - 1);
  EXPECT_TRUE(b.sink.arrived.empty());
  EXPECT_EQ(b.net.next_event(), arrival);
  b.net.run_until(arrival);
  EXPECT_EQ(b.sink.arrived.size(), 1u);
  EXPECT_TRUE(b.net.idle());
}

TEST(Network, LostFramesStillOccupyThePort) {
  Bed b(direct());
  b.sink.lose_all = true;
  send(b.net, 0, kA, kB, 1);
  send(b.net, 0, kA, kB, 2);
  b.net.run_until(UINT64_MAX);
  EXPECT_TRUE(b.sink.arrived.empty());
  ASSERT_EQ(b.sink.departed.size(), 2u);
  EXPECT_EQ(b.sink.departed[1].t, kMtuAt100);
}

TEST(Network, CutThroughSwitchAddsItsPortLatency) {
  Bed b(switched(true, false, 1 << 20));
  send(b.net, 0, kA, kB, 1);
  b.net.run_until(UINT64_MAX);
  ASSERT_EQ(b.sink.arrived.size(), 1u);
  // Header in after 10 ns, forwarded 300 ns later, serialised again, 10 ns of cable.
  EXPECT_EQ(b.sink.arrived[0].t, 10 * kNs + 300 * kNs + kMtuAt100 + 10 * kNs);
}

TEST(Network, StoreAndForwardWaitsForTheWholeFrame) {
  Bed b(switched(false, false, 1 << 20));
  send(b.net, 0, kA, kB, 1);
  b.net.run_until(UINT64_MAX);
  ASSERT_EQ(b.sink.arrived.size(), 1u);
  EXPECT_EQ(b.sink.arrived[0].t, kMtuAt100 + 10 * kNs + 300 * kNs + kMtuAt100 + 10 * kNs);
}

TEST(Network, IncastWithoutPfcDropsAtTheFullBuffer) {
  // Two senders at line rate into one port: the egress drains half as fast as frames come.
  Bed b(switched(true, false, 64 << 10));
  constexpr int kFrames = 100;
  for (int i = 0; i < kFrames; ++i) {
    send(b.net, 0, kA, kC, 1);
    send(b.net, 0, kB, kC, 2);
  }
  b.net.run_until(UINT64_MAX);
  EXPECT_GT(b.net.stats().buffer_drops, 0u);
  EXPECT_EQ(b.sink.arrived.size() + b.net.stats().buffer_drops, 2u * kFrames);
  EXPECT_LE(b.net.stats().max_buffered, 64u << 10);
}

TEST(Network, PfcPauseHoldsFramesAndDropsNothing) {
  Bed b(switched(true, true, 64 << 10));
  constexpr int kFrames = 100;
  for (int i = 0; i < kFrames; ++i) {
    send(b.net, 0, kA, kC, 1);
    send(b.net, 0, kB, kC, 2);
  }
  b.net.run_until(UINT64_MAX);
  const NetworkStats& s = b.net.stats();
  EXPECT_EQ(s.buffer_drops, 0u);
  EXPECT_EQ(s.headroom_exceeded, 0u);
  EXPECT_LE(s.max_buffered, 64u << 10);
  EXPECT_GT(s.pause_frames, 0u);
  EXPECT_EQ(s.pause_frames, s.resume_frames) << "every XOFF was followed by an XON";
  EXPECT_GT(s.paused_ps, 0u);
  EXPECT_EQ(b.sink.departed_while_paused, 0u) << "a paused port starts no frame";
  ASSERT_EQ(b.sink.arrived.size(), 2u * kFrames);
  // The receiver's port is the bottleneck and stays busy: 200 frames back to back after the
  // first frame's way through the switch.
  const SimTime last = b.sink.arrived.back().t;
  const SimTime ideal = 10 * kNs + 300 * kNs + 200 * kMtuAt100 + 10 * kNs;
  EXPECT_GE(last, ideal);
  EXPECT_LT(last, ideal + 2 * kMtuAt100);
}

TEST(Network, PausedPortResumesWhenTheBufferDrains) {
  Bed b(switched(true, true, 64 << 10));
  for (int i = 0; i < 60; ++i) {
    send(b.net, 0, kA, kC, 1);
    send(b.net, 0, kB, kC, 2);
  }
  // Run until the first XOFF has reached a sender.
  SimTime t = 0;
  while (!b.net.paused(kA) && !b.net.paused(kB) && !b.net.idle()) {
    t = b.net.next_event();
    b.net.run_until(t);
  }
  const uint64_t held = b.net.paused(kA) ? kA : kB;
  ASSERT_TRUE(b.net.paused(held));
  const std::size_t departed = b.sink.departed.size();
  const uint32_t queued = b.net.queued(held);
  EXPECT_GT(queued, 0u) << "frames wait on the paused port";
  // Nothing leaves the held port until its XON arrives.
  SimTime resumed = t;
  while (b.net.paused(held)) {
    resumed = b.net.next_event();
    b.net.run_until(resumed);
  }
  EXPECT_GT(resumed, t);
  for (std::size_t i = departed; i < b.sink.departed.size(); ++i) {
    if (b.sink.departed[i].src == held) {
      EXPECT_GE(b.sink.departed[i].t, resumed);
    }
  }
  b.net.run_until(UINT64_MAX);
  EXPECT_EQ(b.net.queued(held), 0u);
  EXPECT_EQ(b.sink.arrived.size(), 120u);
}

}  // namespace
}  // namespace pollux::emu::rnic
