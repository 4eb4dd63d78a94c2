// SimNetwork: timing arithmetic (latency, serialisation, segmentation), in-order delivery,
// flow control, connection set-up, end of stream, and every fault (loss, corruption,
// partition, user timeout, drop) — and the same seed giving the same delivery trace.
#include "fabric/net/sim_network.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace pollux::fabric::net {
namespace {

LinkConfig plain() {
  LinkConfig c;
  c.latency_ns = 10'000;
  c.bandwidth_bps = 10'000'000'000;  // 10 Gb/s: (1460 + 40) bytes take 1200 ns
  c.mtu = 1500;
  c.rto_ns = 0;
  return c;
}

struct Pair {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Socket> client, server;
};

class SimNetworkTest : public ::testing::Test {
 protected:
  SimNetworkTest() : net_(clock_, 7) { net_.set_default_link(plain()); }

  // Connects and accepts, advancing time as a lockstep engine would (to the next event).
  Pair open(const std::string& addr = "10.0.0.1") {
    Pair p;
    auto l = net_.listen("ipv4", addr, "4420");
    EXPECT_TRUE(l.ok());
    p.listener = std::move(l).value();
    auto c = net_.connect(addr, "4420");
    EXPECT_TRUE(c.ok());
    p.client = std::move(c).value();
    int err = 0;
    while (!p.client->connected(&err) || !p.server) {
      EXPECT_EQ(err, 0);
      if (!p.server) p.server = p.listener->accept();
      if (p.client->connected(&err) && p.server) break;
      clock_.set(net_.next_event_ns());
    }
    return p;
  }
  ssize_t send(Socket& s, const std::vector<uint8_t>& b) {
    const iovec v{const_cast<uint8_t*>(b.data()), b.size()};
    return s.send(&v, 1);
  }
  std::vector<uint8_t> pattern(std::size_t n, uint8_t seed = 1) {
    std::vector<uint8_t> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 31 + seed);
    return b;
  }

  env::VirtualClock clock_{1'000'000'000};
  SimNetwork net_;
};

TEST_F(SimNetworkTest, ConnectTakesARoundTripAndRefusalIsReported) {
  auto l = net_.listen("ipv4", "10.0.0.1", "4420").value();
  auto c = net_.connect("10.0.0.1", "4420").value();
  int err = 0;
  EXPECT_FALSE(c->connected(&err));
  EXPECT_EQ(l->accept(), nullptr);  // the SYN is on its way
  EXPECT_EQ(net_.next_event_ns(), 10'000u);
  clock_.set(10'000);
  EXPECT_NE(l->accept(), nullptr);
  EXPECT_FALSE(c->connected(&err));
  EXPECT_EQ(net_.next_event_ns(), 20'000u);  // the SYN-ACK
  clock_.set(20'000);
  EXPECT_TRUE(c->connected(&err));

  auto r = net_.connect("10.0.0.1", "9999").value();  // nobody listens there
  clock_.set(40'000);
  EXPECT_FALSE(r->connected(&err));
  EXPECT_EQ(err, ECONNREFUSED);
  EXPECT_EQ(net_.stats().refused, 1u);
}

TEST_F(SimNetworkTest, LatencyAndSerialisationArithmetic) {
  Pair p = open();
  const uint64_t t0 = clock_.now();
  // 3000 bytes: segments of 1460, 1460 and 80 bytes, back to back on the wire.
  ASSERT_EQ(send(*p.client, pattern(3000)), 3000);
  uint8_t buf[4000];
  EXPECT_EQ(p.server->recv(buf, sizeof buf), kAgain);
  EXPECT_EQ(net_.next_event_ns(), t0 + 1200 + 10'000);
  clock_.set(t0 + 1200 + 10'000 - 1);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), kAgain);
  clock_.set(t0 + 1200 + 10'000);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 1460);
  EXPECT_EQ(net_.next_event_ns(), t0 + 2400 + 10'000);
  clock_.set(t0 + 2400 + 10'000);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 1460);
  // (80 + 40) * 8 bits at 10 Gb/s = 96 ns.
  EXPECT_EQ(net_.next_event_ns(), t0 + 2496 + 10'000);
  clock_.set(t0 + 2496 + 10'000);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 80);
  EXPECT_EQ(net_.next_event_ns(), UINT64_MAX);
  EXPECT_EQ(net_.stats().segments, 3u);
}

TEST_F(SimNetworkTest, BytesArriveInOrderAndIntact) {
  Pair p = open();
  const auto data = pattern(100'000, 9);
  std::vector<uint8_t> got;
  std::size_t sent = 0;
  while (got.size() < data.size()) {
    if (sent < data.size()) {
      const iovec v[2] = {{const_cast<uint8_t*>(data.data() + sent),
                           std::min<std::size_t>(7000, data.size() - sent)},
                          {nullptr, 0}};
      const ssize_t n = p.client->send(v, 1);
      ASSERT_GE(n, 0);
      sent += static_cast<std::size_t>(n);
    }
    uint8_t a[3000], b[5000];
    const iovec rv[2] = {{a, sizeof a}, {b, sizeof b}};
    const ssize_t n = p.server->recv(rv, 2);
    ASSERT_GE(n, 0);
    for (ssize_t i = 0; i < n; ++i) got.push_back(i < 3000 ? a[i] : b[i - 3000]);
    if (n == kAgain) clock_.set(net_.next_event_ns());
  }
  EXPECT_EQ(got, data);
}

TEST_F(SimNetworkTest, TheWindowBoundsWhatIsUnread) {
  LinkConfig c = plain();
  c.window_bytes = 8192;
  net_.set_default_link(c);
  Pair p = open();
  EXPECT_EQ(send(*p.client, pattern(20'000)), 8192);
  EXPECT_EQ(send(*p.client, pattern(10)), kAgain);
  clock_.set(clock_.now() + 1'000'000);
  uint8_t buf[5000];
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 5000);
  EXPECT_EQ(send(*p.client, pattern(20'000)), 5000);
}

TEST_F(SimNetworkTest, CloseGivesEndOfStreamAfterTheData) {
  Pair p = open();
  ASSERT_EQ(send(*p.client, pattern(100)), 100);
  p.client.reset();
  uint8_t buf[200];
  EXPECT_EQ(p.server->recv(buf, sizeof buf), kAgain);
  clock_.set(net_.next_event_ns());
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 100);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), kEof);
}

TEST_F(SimNetworkTest, ALostSegmentArrivesAfterItsRetransmissionTimeouts) {
  LinkConfig c = plain();
  c.loss = 1.0;  // every transmission lost: the most back-off there is
  c.rto_ns = 1'000;
  net_.set_default_link(c);
  Pair p = open();
  const uint64_t t0 = clock_.now();
  ASSERT_EQ(send(*p.client, pattern(100)), 100);
  // 8 losses: 1 + 2 + ... + 128 RTOs late.
  EXPECT_EQ(net_.next_event_ns(), t0 + 112 + 10'000 + 255 * 1'000);
  EXPECT_EQ(net_.stats().lost, 8u);
}

TEST_F(SimNetworkTest, CorruptionFlipsOneByteOfASegment) {
  LinkConfig c = plain();
  c.corrupt = 1.0;
  net_.set_default_link(c);
  Pair p = open();
  const auto data = pattern(1000);
  ASSERT_EQ(send(*p.client, data), 1000);
  clock_.set(net_.next_event_ns());
  std::vector<uint8_t> got(1000);
  ASSERT_EQ(p.server->recv(got.data(), got.size()), 1000);
  int differ = 0;
  for (std::size_t i = 0; i < data.size(); ++i) differ += data[i] != got[i];
  EXPECT_EQ(differ, 1);
  EXPECT_EQ(net_.stats().corrupted, 1u);
}

TEST_F(SimNetworkTest, ACorruptionWindowEnds) {
  Pair p = open();
  net_.corrupt("10.0.0.1", 1.0, 5'000);
  ASSERT_EQ(send(*p.client, pattern(10)), 10);
  clock_.set(clock_.now() + 5'000);
  ASSERT_EQ(send(*p.client, pattern(10)), 10);
  EXPECT_EQ(net_.stats().corrupted, 1u);
}

TEST_F(SimNetworkTest, APartitionHoldsTrafficUntilItHeals) {
  Pair p = open();
  const uint64_t t0 = clock_.now();
  ASSERT_EQ(send(*p.client, pattern(100)), 100);  // in flight when the partition starts
  net_.partition("10.0.0.1", 1'000'000);
  ASSERT_EQ(send(*p.server, pattern(100)), 100);  // sent during it
  EXPECT_EQ(net_.next_event_ns(), t0 + 1'000'000 + 10'000);
  clock_.set(t0 + 1'000'000 + 9'999);
  uint8_t buf[200];
  EXPECT_EQ(p.server->recv(buf, sizeof buf), kAgain);
  EXPECT_EQ(p.client->recv(buf, sizeof buf), kAgain);
  clock_.set(t0 + 1'000'000 + 10'000);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), 100);
  EXPECT_EQ(p.client->recv(buf, sizeof buf), 100);
  // Another link is not affected.
  Pair q = open("10.0.0.2");
  net_.partition("10.0.0.1", 1'000'000);
  const uint64_t t1 = clock_.now();
  ASSERT_EQ(send(*q.client, pattern(10)), 10);
  EXPECT_EQ(net_.next_event_ns(), t1 + 40 + 10'000);  // (10 + 40) * 8 bits at 10 Gb/s
}

TEST_F(SimNetworkTest, ALongPartitionEndsTheConnectionLikeAUserTimeout) {
  Pair p = open();
  const uint64_t t0 = clock_.now();
  net_.partition("", 200'000'000);  // longer than the 50 ms user timeout
  EXPECT_EQ(net_.next_event_ns(), t0 + 50'000'000);
  clock_.set(t0 + 50'000'000);
  uint8_t buf[10];
  EXPECT_EQ(p.client->recv(buf, sizeof buf), -ETIMEDOUT);
  EXPECT_EQ(p.server->recv(buf, sizeof buf), -ETIMEDOUT);
  // Connects during the partition complete only after it.
  auto c = net_.connect("10.0.0.1", "4420").value();
  int err = 0;
  clock_.set(t0 + 199'000'000);
  EXPECT_FALSE(c->connected(&err));
  clock_.set(t0 + 200'000'000 + 20'000);
  EXPECT_TRUE(c->connected(&err));
}

TEST_F(SimNetworkTest, ADropResetsBothEndsAtOnce) {
  Pair p = open();
  ASSERT_EQ(send(*p.client, pattern(100)), 100);
  EXPECT_EQ(net_.drop("10.0.0.1"), 1u);
  uint8_t buf[200];
  EXPECT_EQ(p.server->recv(buf, sizeof buf), -ECONNRESET);
  EXPECT_EQ(p.client->recv(buf, sizeof buf), -ECONNRESET);
  EXPECT_EQ(send(*p.client, pattern(1)), -ECONNRESET);
  EXPECT_EQ(net_.stats().resets, 1u);
}

TEST_F(SimNetworkTest, AddedLatencyAppliesForItsDuration) {
  Pair p = open();
  net_.add_latency("10.0.0.1", 40'000, 100'000);
  uint64_t t = clock_.now();
  ASSERT_EQ(send(*p.client, pattern(10)), 10);
  EXPECT_EQ(net_.next_event_ns(), t + 40 + 50'000);
  clock_.set(t + 100'000);
  uint8_t buf[20];
  ASSERT_EQ(p.server->recv(buf, sizeof buf), 10);
  t = clock_.now();
  ASSERT_EQ(send(*p.client, pattern(10)), 10);
  EXPECT_EQ(net_.next_event_ns(), t + 40 + 10'000);
}

TEST_F(SimNetworkTest, TheReadinessGroupReportsReadableSockets) {
  Pair p = open();
  Pair q = open("10.0.0.2");
  auto g = net_.readiness_group();
  int a = 1, b = 2;
  g->add(*p.server, &a);
  g->add(*q.server, &b);
  void* ready[4];
  EXPECT_EQ(g->poll(ready, 4), 0);
  ASSERT_EQ(send(*q.client, pattern(10)), 10);
  clock_.set(net_.next_event_ns());
  ASSERT_EQ(g->poll(ready, 4), 1);
  EXPECT_EQ(ready[0], &b);
  q.client.reset();
  uint8_t buf[20];
  ASSERT_EQ(q.server->recv(buf, sizeof buf), 10);
  clock_.set(net_.next_event_ns());
  EXPECT_EQ(g->poll(ready, 4), 1);  // end of stream is readable too
  g->remove(*q.server);
  EXPECT_EQ(g->poll(ready, 4), 0);
}

// Traffic with loss, jitter and corruption from one seed: the delivery trace (every arrival
// instant, every flipped byte) is a function of the seed alone.
uint64_t run_traffic(uint64_t seed, uint64_t* arrivals_sum) {
  env::VirtualClock clock(1'000'000'000);
  SimNetwork net(clock, seed);
  LinkConfig c = plain();
  c.loss = 0.05;
  c.jitter_ns = 3'000;
  c.corrupt = 0.01;
  c.rto_ns = 20'000;
  net.set_default_link(c);
  auto l = net.listen("ipv4", "10.0.0.1", "4420").value();
  auto cl = net.connect("10.0.0.1", "4420").value();
  std::unique_ptr<Socket> sv;
  int err = 0;
  while (!sv || !cl->connected(&err)) {
    if (!sv) sv = l->accept();
    clock.set(net.next_event_ns());
  }
  std::vector<uint8_t> data(64 * 1024, 0x5a);
  uint8_t buf[16384];
  uint64_t received = 0;
  *arrivals_sum = 0;
  for (int round = 0; round < 200; ++round) {
    const iovec v{data.data(), data.size()};
    (void)cl->send(&v, 1);
    const ssize_t n = sv->recv(buf, sizeof buf);
    if (n > 0) {
      received += static_cast<uint64_t>(n);
      (void)sv->send(&v, 1);  // an answer the other way
    }
    (void)cl->recv(buf, sizeof buf);
    const uint64_t next = net.next_event_ns();
    if (next != UINT64_MAX) {
      clock.set(next);
      *arrivals_sum += next;
    }
  }
  EXPECT_GT(received, 0u);
  return net.trace_hash();
}

TEST(SimNetworkDeterminism, SameSeedSameTraceOtherSeedDiffers) {
  const uint64_t seed = std::random_device{}() | 1;
  std::printf("seed %lu\n", static_cast<unsigned long>(seed));
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  const uint64_t a = run_traffic(seed, &s1);
  const uint64_t b = run_traffic(seed, &s2);
  const uint64_t c = run_traffic(seed + 1, &s3);
  EXPECT_EQ(a, b) << "seed " << seed;
  EXPECT_EQ(s1, s2) << "seed " << seed;
  EXPECT_NE(a, c) << "seed " << seed;
}

}  // namespace
}  // namespace pollux::fabric::net
