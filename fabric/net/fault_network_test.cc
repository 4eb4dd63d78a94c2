// FaultNetwork over the kernel's TCP on loopback: with no fault a socket call is the kernel
// socket's call alone (no clock read, no extra call); a drop resets both ends (an end outside
// the layer sees the kernel's RST); a partition holds what is sent, defers connects and
// accepts, and ends connections after the user timeout; added latency delays in order;
// corruption flips the bytes the seed says, never the caller's buffer. Fault time is a manual
// clock the test moves; the kernel's deliveries are waited for with a deadline.
#include "fabric/net/fault_network.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "fabric/net/posix.h"

namespace pollux::fabric::net {
namespace {

constexpr char kLink[] = "127.0.0.1";

// Fault time: moved by the test; every read counted.
class ManualClock final : public env::Clock {
 public:
  uint64_t ticks_per_second() const override { return 1'000'000'000; }
  void set(uint64_t t) { now_ = t; }
  void advance(uint64_t d) { now_ += d; }
  mutable uint64_t reads = 0;

 private:
  uint64_t read() const override {
    ++reads;
    return now_;
  }
  uint64_t now_ = 1'000'000'000;
};

// The kernel's TCP, every call the fault layer makes into it counted.
struct Counts {
  uint64_t connects = 0, sends = 0, sent_bytes = 0, recvs = 0, polls = 0;
};
class CountingSocket final : public Socket {
 public:
  CountingSocket(std::unique_ptr<Socket> s, Counts& c) : s_(std::move(s)), c_(c) {}
  ssize_t send(const iovec* iov, int n) override { return count(s_->send(iov, n)); }
  ssize_t send_more(const iovec* iov, int n) override { return count(s_->send_more(iov, n)); }
  void push() override { s_->push(); }
  ssize_t recv(const iovec* iov, int n) override {
    ++c_.recvs;
    return s_->recv(iov, n);
  }
  void shutdown_write() override { s_->shutdown_write(); }
  void reset_on_close() override { s_->reset_on_close(); }
  bool connected(int* e) override { return s_->connected(e); }
  void wait(bool w, uint64_t d) override { s_->wait(w, d); }
  std::string peer() const override { return s_->peer(); }
  Socket& inner() { return *s_; }

 private:
  ssize_t count(ssize_t r) {
    ++c_.sends;
    if (r > 0) c_.sent_bytes += static_cast<uint64_t>(r);
    return r;
  }
  std::unique_ptr<Socket> s_;
  Counts& c_;
};
class CountingGroup final : public ReadinessGroup {
 public:
  CountingGroup(std::unique_ptr<ReadinessGroup> g, Counts& c) : g_(std::move(g)), c_(c) {}
  void add(Socket& s, void* ctx) override { g_->add(static_cast<CountingSocket&>(s).inner(), ctx); }
  void remove(Socket& s) override { g_->remove(static_cast<CountingSocket&>(s).inner()); }
  int poll(void** ready, int max) override {
    ++c_.polls;
    return g_->poll(ready, max);
  }

 private:
  std::unique_ptr<ReadinessGroup> g_;
  Counts& c_;
};
class CountingListener final : public Listener {
 public:
  CountingListener(std::unique_ptr<Listener> l, Counts& c) : l_(std::move(l)), c_(c) {}
  std::unique_ptr<Socket> accept() override {
    auto s = l_->accept();
    return s ? std::make_unique<CountingSocket>(std::move(s), c_) : nullptr;
  }
  uint16_t port() const override { return l_->port(); }

 private:
  std::unique_ptr<Listener> l_;
  Counts& c_;
};
class CountingNetwork final : public Network {
 public:
  Result<std::unique_ptr<Socket>> connect(const std::string& a, const std::string& p) override {
    ++c.connects;
    auto s = posix_network().connect(a, p);
    if (!s) return s.error();
    return std::unique_ptr<Socket>(std::make_unique<CountingSocket>(std::move(s).value(), c));
  }
  Result<std::unique_ptr<Listener>> listen(const std::string& f, const std::string& a,
                                           const std::string& p) override {
    auto l = posix_network().listen(f, a, p);
    if (!l) return l.error();
    return std::unique_ptr<Listener>(std::make_unique<CountingListener>(std::move(l).value(), c));
  }
  std::unique_ptr<ReadinessGroup> readiness_group() override {
    return std::make_unique<CountingGroup>(posix_network().readiness_group(), c);
  }
  uint64_t now_ns() const override { return posix_network().now_ns(); }
  Counts c;
};

using Wall = std::chrono::steady_clock;
bool before(Wall::time_point t) {
  return Wall::now() < t;
}
Wall::time_point in_5s() {
  return Wall::now() + std::chrono::seconds(5);
}

struct Fixture : ::testing::Test {
  explicit Fixture(uint64_t seed = 7, FaultConfig cfg = {}) : net(counting, seed, &clock, cfg) {}
  // A connection through the layer: client (connect) and server (accept) ends.
  void pair(std::unique_ptr<Socket>* client, std::unique_ptr<Socket>* server) {
    if (!listener) {
      auto l = net.listen("ipv4", kLink, "0");
      ASSERT_TRUE(l.ok()) << l.error().message;
      listener = std::move(l).value();
    }
    auto c = net.connect(kLink, std::to_string(listener->port()));
    ASSERT_TRUE(c.ok()) << c.error().message;
    *client = std::move(c).value();
    const auto dl = in_5s();
    int err = 0;
    while (!(*client)->connected(&err) && before(dl)) ASSERT_EQ(err, 0);
    while (!*server && before(dl)) *server = listener->accept();
    ASSERT_NE(*server, nullptr);
  }
  // Reads exactly n bytes (the kernel's delivery waited for, up to 5 s).
  std::string read(Socket& s, std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    for (const auto dl = in_5s(); got < n && before(dl);) {
      const ssize_t r = s.recv(out.data() + got, n - got);
      if (r < 0) {
        ADD_FAILURE() << "recv: " << r;
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
  }
  ssize_t send(Socket& s, const std::string& what) {
    const iovec v{const_cast<char*>(what.data()), what.size()};
    return s.send(&v, 1);
  }
  // The first error recv reports (the kernel's RST may take a moment to arrive).
  ssize_t error_of(Socket& s) {
    char b[64];
    ssize_t r = kAgain;
    for (const auto dl = in_5s(); before(dl);) {
      r = s.recv(b, sizeof b);
      if (r < 0) break;
    }
    return r;
  }

  ManualClock clock;
  CountingNetwork counting;
  FaultNetwork net;
  std::unique_ptr<Listener> listener;
};

TEST_F(Fixture, WithNoFaultEachCallIsTheKernelSocketsCallAlone) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  auto group = net.readiness_group();
  int ctx = 0;
  group->add(*server, &ctx);
  void* ready[4];
  EXPECT_EQ(group->poll(ready, 4), 0);
  ASSERT_EQ(send(*client, "warm"), 4);  // the first call of each end looks, then no more
  ASSERT_EQ(read(*server, 4), "warm");
  ASSERT_EQ(send(*server, "back"), 4);
  ASSERT_EQ(read(*client, 4), "back");

  const Counts before_io = counting.c;
  const uint64_t reads = clock.reads;
  uint64_t app_recvs = 0, app_polls = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(send(*client, "ping"), 4);
    int n = 0;
    for (const auto dl = in_5s(); n == 0 && before(dl); ++app_polls) n = group->poll(ready, 4);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(ready[0], &ctx);
    char b[4];
    ASSERT_EQ(server->recv(b, 4), 4);
    ++app_recvs;
    ASSERT_EQ(send(*server, "pong"), 4);
    for (ssize_t r = kAgain; r == kAgain; ++app_recvs) r = client->recv(b, 4);
  }
  EXPECT_EQ(clock.reads, reads) << "the quiet path read the clock";
  EXPECT_EQ(counting.c.sends - before_io.sends, 200u) << "one kernel send per send";
  EXPECT_EQ(counting.c.recvs - before_io.recvs, app_recvs) << "one kernel recv per recv";
  EXPECT_EQ(counting.c.polls - before_io.polls, app_polls) << "one epoll_wait per poll";
  EXPECT_EQ(net.stats().held_bytes.load(), 0u);
  group->remove(*server);
}

TEST_F(Fixture, DropResetsBothEndsAndAnEndOutsideSeesTheKernelsReset) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  auto group = net.readiness_group();
  int ctx = 0;
  group->add(*server, &ctx);
  // A second connection whose server end is outside the layer (a plain kernel socket).
  auto plain = posix_network().listen("ipv4", kLink, "0");
  ASSERT_TRUE(plain.ok());
  auto c2 = net.connect(kLink, std::to_string(plain.value()->port()));
  ASSERT_TRUE(c2.ok());
  std::unique_ptr<Socket> outside;
  for (const auto dl = in_5s(); !outside && before(dl);) outside = plain.value()->accept();
  ASSERT_NE(outside, nullptr);
  int err = 0;
  for (const auto dl = in_5s(); !c2.value()->connected(&err) && before(dl);) ASSERT_EQ(err, 0);

  EXPECT_EQ(net.drop(kLink), 3u);  // client, server, and the second client
  EXPECT_EQ(client->recv(&err, 1), -ECONNRESET);
  EXPECT_EQ(send(*client, "x"), -ECONNRESET);
  void* ready[4];
  ASSERT_EQ(group->poll(ready, 4), 1) << "a reset end reads as readable";
  EXPECT_EQ(ready[0], &ctx);
  EXPECT_EQ(server->recv(&err, 1), -ECONNRESET);
  EXPECT_EQ(c2.value()->recv(&err, 1), -ECONNRESET);  // its close sent the RST
  EXPECT_EQ(error_of(*outside), -ECONNRESET) << "the peer outside got the kernel's RST";
  EXPECT_EQ(group->poll(ready, 4), 1) << "and stays readable until removed";
  group->remove(*server);
  EXPECT_EQ(net.stats().resets.load(), 3u);
}

TEST_F(Fixture, APartitionHoldsSendsDefersConnectsAndDeliversInOrderAfter) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  auto group = net.readiness_group();
  int ctx = 0;
  group->add(*server, &ctx);
  void* ready[4];
  group->poll(ready, 4);
  net.partition(kLink, 10'000'000);
  const uint64_t kernel_bytes = counting.c.sent_bytes;
  ASSERT_EQ(send(*client, "abc"), 3);
  ASSERT_EQ(send(*server, "xyz"), 3);
  EXPECT_EQ(group->poll(ready, 4), 0);
  EXPECT_EQ(client->recv(ready, 1), kAgain);
  EXPECT_EQ(counting.c.sent_bytes, kernel_bytes) << "something crossed the partition";
  // A new connect does not complete, and the listener takes nothing, until the end.
  const uint64_t connects = counting.c.connects;
  auto late = net.connect(kLink, std::to_string(listener->port()));
  ASSERT_TRUE(late.ok());
  int err = 0;
  EXPECT_FALSE(late.value()->connected(&err));
  EXPECT_EQ(err, 0);
  EXPECT_EQ(counting.c.connects, connects) << "a SYN left during the partition";
  EXPECT_EQ(listener->accept(), nullptr);
  EXPECT_EQ(net.stats().deferred_connects.load(), 1u);

  clock.advance(9'999'999);
  EXPECT_EQ(send(*client, "def"), 3);
  EXPECT_EQ(client->recv(ready, 1), kAgain);
  EXPECT_EQ(counting.c.sent_bytes, kernel_bytes);
  clock.advance(1);  // healed: the client's next call sends what it held, in order
  EXPECT_EQ(client->recv(ready, 1), kAgain);
  EXPECT_EQ(read(*server, 6), "abcdef");
  group->poll(ready, 4);  // the server's group sends what its end held
  EXPECT_EQ(read(*client, 3), "xyz");
  for (const auto dl = in_5s(); !late.value()->connected(&err) && before(dl);) ASSERT_EQ(err, 0);
  EXPECT_EQ(counting.c.connects, connects + 1);
  std::unique_ptr<Socket> late_server;
  for (const auto dl = in_5s(); !late_server && before(dl);) late_server = listener->accept();
  EXPECT_NE(late_server, nullptr);
  EXPECT_EQ(net.stats().timeouts.load(), 0u) << "shorter than the user timeout";
  group->remove(*server);
}

TEST_F(Fixture, APartitionHoldsNoMoreThanItsBufferThenSendsWouldBlock) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  net.partition(kLink, 1'000'000);
  std::string big(net.config().hold_bytes + 4096, 'q');
  EXPECT_EQ(send(*client, big), static_cast<ssize_t>(net.config().hold_bytes));
  EXPECT_EQ(send(*client, "z"), kAgain);
  clock.advance(1'000'000);
  // The client's calls send what it holds as the kernel's buffers make room.
  std::string got(net.config().hold_bytes, '\0');
  std::size_t n = 0;
  for (const auto dl = in_5s(); n < got.size() && before(dl);) {
    char b;
    ASSERT_EQ(client->recv(&b, 1), kAgain);
    const ssize_t r = server->recv(got.data() + n, got.size() - n);
    ASSERT_GE(r, 0);
    n += static_cast<std::size_t>(r);
  }
  EXPECT_EQ(got, big.substr(0, net.config().hold_bytes));
}

struct ShortUserTimeout : Fixture {
  ShortUserTimeout() : Fixture(7, FaultConfig{.user_timeout_ns = 5'000'000}) {}
};

TEST_F(ShortUserTimeout, APartitionAsLongAsTheUserTimeoutEndsBothEndsThen) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  net.partition(kLink, 10'000'000);
  char b;
  clock.advance(4'999'999);
  EXPECT_EQ(client->recv(&b, 1), kAgain);
  EXPECT_EQ(server->recv(&b, 1), kAgain);
  clock.advance(1);
  EXPECT_EQ(client->recv(&b, 1), -ETIMEDOUT);
  EXPECT_EQ(server->recv(&b, 1), -ETIMEDOUT);
  EXPECT_EQ(net.stats().timeouts.load(), 2u);
  // After the partition, a new connection works.
  clock.advance(5'000'000);
  std::unique_ptr<Socket> c2, s2;
  pair(&c2, &s2);
  ASSERT_EQ(send(*c2, "ok"), 2);
  EXPECT_EQ(read(*s2, 2), "ok");
}

TEST_F(Fixture, AddedLatencyDelaysWhatIsSentInTheWindowAndWhatFollowsIt) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  auto group = net.readiness_group();
  int ctx = 0;
  group->add(*server, &ctx);
  void* ready[4];
  net.add_latency(kLink, 2'000'000, 1'000'000);
  const uint64_t kernel_bytes = counting.c.sent_bytes;
  ASSERT_EQ(send(*server, "a"), 1);  // leaves at +2 ms
  clock.advance(1'500'000);          // the window is over; "b" waits behind "a"
  ASSERT_EQ(send(*server, "b"), 1);
  clock.advance(499'999);
  group->poll(ready, 4);
  EXPECT_EQ(counting.c.sent_bytes, kernel_bytes) << "left before its time";
  clock.advance(1);
  group->poll(ready, 4);  // the group's poll sends what is due
  EXPECT_EQ(read(*client, 2), "ab");
  ASSERT_EQ(send(*server, "c"), 1);  // nothing held, no fault: straight through
  EXPECT_EQ(read(*client, 1), "c");
  group->remove(*server);
}

// What a corrupted stream looks like at the receiver: offset -> mask.
std::map<uint64_t, uint8_t> corrupted_stream(uint64_t seed, uint64_t* flips_counted) {
  struct Run : Fixture {
    explicit Run(uint64_t s) : Fixture(s) {}
    void TestBody() override {}
  } f(seed);
  std::unique_ptr<Socket> client, server;
  f.pair(&client, &server);
  f.net.corrupt(kLink, 0.25, 1'000'000);
  std::string sent(64 * 1024, '\0');
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7 + 1);
  const std::string copy = sent;
  for (std::size_t off = 0; off < sent.size(); off += 1000) {  // in pieces of 1000
    const std::string piece = sent.substr(off, 1000);
    EXPECT_EQ(f.send(*client, piece), static_cast<ssize_t>(piece.size()));
  }
  EXPECT_EQ(sent, copy) << "the caller's buffer was touched";
  const std::string got = f.read(*server, sent.size());
  EXPECT_EQ(got.size(), sent.size());
  std::map<uint64_t, uint8_t> flips;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != sent[i]) flips[i] = static_cast<uint8_t>(got[i] ^ sent[i]);
  *flips_counted = f.net.stats().corrupted.load();
  return flips;
}

TEST(FaultNetworkCorruption, FlipsOneByteInAboutRateOfSegmentsAsTheSeedSays) {
  uint64_t counted = 0, counted_again = 0, counted_other = 0;
  const auto flips = corrupted_stream(11, &counted);
  EXPECT_EQ(flips.size(), counted);
  // 45 segments of 1460 bytes at 0.25: about 11; a bound no seed should miss.
  EXPECT_GE(flips.size(), 3u);
  EXPECT_LE(flips.size(), 25u);
  std::map<uint64_t, int> per_segment;
  for (const auto& [off, mask] : flips) ++per_segment[off / 1460];
  for (const auto& [seg, n] : per_segment) EXPECT_EQ(n, 1) << "segment " << seg;
  EXPECT_EQ(corrupted_stream(11, &counted_again), flips) << "the same seed, other flips";
  EXPECT_NE(corrupted_stream(12, &counted_other), flips) << "another seed, the same flips";
}

TEST_F(Fixture, FaultsOnOneLinkLeaveAnotherAlone) {
  std::unique_ptr<Socket> client, server;
  pair(&client, &server);
  net.partition("127.0.0.2", 10'000'000);
  EXPECT_EQ(net.drop("127.0.0.2"), 0u);
  ASSERT_EQ(send(*client, "free"), 4);
  EXPECT_EQ(read(*server, 4), "free");
  EXPECT_EQ(net.stats().held_bytes.load(), 0u);
}

TEST(FaultNetworkSchedule, TheSameScheduleAndSeedHashTheSame) {
  auto run = [](uint64_t seed) {
    ManualClock clock;
    FaultNetwork net(posix_network(), seed, &clock);
    net.partition("10.0.0.1", 5'000'000);
    clock.advance(1'000'000);
    net.add_latency("", 100'000, 2'000'000);
    net.corrupt("10.0.0.2", 0.01, 3'000'000);
    net.drop("");
    return net.fault_hash();
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

}  // namespace
}  // namespace pollux::fabric::net
