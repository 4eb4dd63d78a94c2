// The emulated RNIC with its timing model (emulator/rnic: nic_timing.h, network.h), driven
// through driver/rdma as a host would, in virtual time: a 4 KiB SEND and READ take exactly
// the sum of their parts (doorbell, WQE fetch, payload DMA, pipelines, serialisation, switch,
// DMA writes, CQE); a completion is invisible until its CQE lands; READ responses leave at the
// link's pace; a stream of 4 KiB WRITEs runs at line rate; an incast with PFC loses nothing
// and without PFC drops and retransmits; and the same seed gives the same packet trace and end
// time over a faulty, flapping network.
#include <cstdlib>
#include <random>
#include <string>

#include "emulator/rnic/nic_profile.h"
#include "tests/rdma/rdma_test_util.h"

namespace pollux::rdma::testing {
namespace {

using emu::rnic::Cluster;
using emu::rnic::NicProfile;
using emu::rnic::WireFaults;

NicProfile profile(const char* name) {
  auto p = emu::rnic::load_nic_profile(name);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error());
  return p.ok() ? p.value() : NicProfile{};
}

// Steps the cluster from event to event until `cq` has a completion; returns the virtual
// time (ns) at which the host's poll first saw it.
uint64_t until_completion(Cluster& c, Cq& cq, WorkCompletion* wc) {
  for (int i = 0; i < 1'000'000; ++i) {
    while (c.step()) {
    }
    if (cq.poll(wc, 1) == 1) return c.now_ns();
    const uint64_t next = c.next_event_ns();
    if (next == UINT64_MAX) return UINT64_MAX;
    c.step_at(next);
  }
  return UINT64_MAX;
}

QpOptions mtu4k() {
  QpOptions o;
  o.mtu = Mtu::k4096;
  o.max_rd_atomic = o.max_dest_rd_atomic = 16;
  o.cap = QpCap{256, 256, 1, 1};
  o.cq_entries = 1024;
  return o;
}

// RdmaTest's helpers in the open, for tests that build clusters of their own.
struct Bed : RdmaTest {
  Bed(uint64_t seed, const NicProfile& p, WireFaults f = {}) : RdmaTest(seed, p, f) {}
  void TestBody() override {}
  using RdmaTest::a_;
  using RdmaTest::b_;
  using RdmaTest::cluster_;
  using RdmaTest::connect;
  using RdmaTest::fill;
  using RdmaTest::make_qp;
  using RdmaTest::open;
  using RdmaTest::post_recv;
  using RdmaTest::post_send;
};

class Cx5 : public RdmaTest {
 protected:
  Cx5() : RdmaTest(1, profile("cx5-100g")) {}
};

// cx5-100g's parts for one 4 KiB SEND, by hand (PCIe 3.0 x16: 15,753,846,153 B/s; TLPs of 256
// B carry 24 B each; reads of 512 B):
//   doorbell (MMIO)                                               150 ns
//   WQE read: 24 B up 1,524 ps + 500 ns + 152 B down 9,649 ps
//             + 50 ns WQE stage                                    561,173 ps
//   payload read: 8 requests up 12,188 ps + 500 ns
//             + 4,480 B down 284,376 ps                            796,564 ps
//   transmit pipeline                                             100 ns
//   cable to the switch, cut-through port latency                  10 + 300 ns
//   switch egress: 4,178 B at 100 Gb/s                             334,240 ps
//   cable to the NIC                                               10 ns
//   receive pipeline                                              100 ns
//   (the transport acts at the next whole ns: 2,361,977 ps -> 2,362 ns)
//   receive WQE prefetch request 1,524 ps, payload write 284,376 ps, CQE 32 + 24 B 3,555 ps
//             on the upstream link, visible 150 ns after            439,455 ps
// = 2,801,455 ps: the host's next poll, at 2,802 ns, sees the receive completion.
TEST_F(Cx5, FourKiBSendTakesTheSumOfItsParts) {
  open_pair(mtu4k());
  cluster_.run_until_idle();
  const uint64_t t0 = cluster_.now_ns();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  fill(a_.at(0), 4096, 3);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 4096)}, 2), 0);
  WorkCompletion wc;
  const uint64_t rx = until_completion(cluster_, *b_.cq, &wc) - t0;
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(rx, 2'802u);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(0), 4096), 0);
  // The requester's completion needs the ACK: transmit pipeline from 2,362 ns, 310 ns to and
  // through the switch, 86 B at 100 Gb/s (6.88 ns), 10 ns of cable, the receive pipeline,
  // then its CQE's write (3,555 ps + 150 ns) from the next whole ns.
  const uint64_t tx = until_completion(cluster_, *a_.cq, &wc) - t0;
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(tx, 2'889u + 154u);
}

// READ 4 KiB: the request goes out without a payload read; the responder reads the data by
// DMA when the request has come through its pipeline; the response (4,116 B: BTH, AETH, ICRC)
// crosses the switch and is written to the requester's memory, then its CQE.
//   doorbell 150 ns, WQE 561,173 ps, transmit 100 ns                  = 811,173 ps
//   request 98 B through the switch: 10 + 300 ns + 7,840 ps + 10 ns   = 1,139,013 ps
//   receive pipeline -> 1,239,013 ps, acted on at 1,240 ns
//   payload read 796,564 ps, transmit 100 ns                          = 2,136,564 ps
//   response 4,182 B: 10 + 300 ns + 334,560 ps + 10 ns, receive 100 ns = 2,891,124 ps
//   acted on at 2,892 ns: write 284,376 ps, CQE 3,555 ps, 150 ns       = 3,329,931 ps
TEST_F(Cx5, FourKiBReadTakesTheSumOfItsParts) {
  open_pair(mtu4k());
  cluster_.run_until_idle();
  const uint64_t t0 = cluster_.now_ns();
  fill(b_.at(8192), 4096, 5);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kRdmaRead, {a_.sge(0, 4096)}, 7, b_.addr(8192),
                      b_.mr->rkey()),
            0);
  WorkCompletion wc;
  const uint64_t t = until_completion(cluster_, *a_.cq, &wc) - t0;
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(t, 3'330u);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(8192), 4096), 0);
}

TEST_F(Cx5, ACompletionIsInvisibleUntilItsCqeLands) {
  open_pair(mtu4k());
  cluster_.run_until_idle();
  const uint64_t t0 = cluster_.now_ns();
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(0, 4096)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 4096)}, 2), 0);
  cluster_.run_for(2'801);  // the CQE lands at 2,801.455 ns
  WorkCompletion wc;
  EXPECT_EQ(b_.cq->poll(&wc, 1), 0);
  EXPECT_EQ(b_.device->nic().counters().rx_packets, 1u) << "the data are there already";
  cluster_.run_for(1);
  EXPECT_EQ(b_.cq->poll(&wc, 1), 1);
  EXPECT_EQ(cluster_.now_ns() - t0, 2'802u);
}

// A stream of 4 KiB RDMA WRITEs, 32 in flight, for 2 ms of virtual time: the sender's port is
// the limit. Each WRITE is one packet of 4,128 B (BTH, RETH, payload, ICRC), 4,194 on the
// wire: 4096 / 4194 of 100 Gb/s = 97.66 Gb/s of payload at most.
TEST_F(Cx5, FourKiBWritesRunAtLineRate) {
  open_pair(mtu4k());
  cluster_.run_until_idle();
  SendWr w;
  Sge sge = a_.sge(0, 4096);
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = send_flag::kSignaled;
  w.remote_addr = b_.addr(0);
  w.rkey = b_.mr->rkey();
  for (int i = 0; i < 32; ++i) ASSERT_EQ(a_.qp->post_send(w, nullptr), 0);
  const uint64_t warm = cluster_.now_ns() + 100'000, end = warm + 2'000'000;
  uint64_t done = 0, at_warm = 0;
  WorkCompletion wc[64];
  while (cluster_.now_ns() < end) {
    while (cluster_.step()) {
    }
    const int n = a_.cq->poll(wc, 64);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wc[i].status, WcStatus::kSuccess);
      ASSERT_EQ(a_.qp->post_send(w, nullptr), 0);
    }
    done += n;
    if (cluster_.now_ns() < warm) at_warm = done;
    cluster_.step_at(std::min(cluster_.next_event_ns(), end));
  }
  const double gbps = static_cast<double>(done - at_warm) * 4096 * 8 / 2'000'000;
  std::printf("4 KiB WRITE stream: %.2f Gb/s of payload\n", gbps);
  EXPECT_GT(gbps, 97.66 * 0.99);
  EXPECT_LE(gbps, 97.66 * 1.001);
}

// READ responses leave at the link's pace, one MTU after another, not all at once: a 64 KiB
// READ over cx4lx-25g's 25 Gb/s is 16 responses of 4,182 or 4,178 bytes, 1.34 us apart.
TEST(TimedRead, ResponsesArePacedByTheLink) {
  Bed t(1, profile("cx4lx-25g"));
  t.open(t.a_, mtu4k());
  t.open(t.b_, mtu4k());
  t.connect(t.a_, *t.a_.qp, t.b_, *t.b_.qp, mtu4k());
  t.connect(t.b_, *t.b_.qp, t.a_, *t.a_.qp, mtu4k());
  t.cluster_.run_until_idle();
  t.cluster_.wire().record_trace(true);
  const uint64_t t0 = t.cluster_.now_ns();
  t.fill(t.b_.at(0), 65536, 11);
  ASSERT_EQ(t.post_send(*t.a_.qp, WrOpcode::kRdmaRead, {t.a_.sge(131072, 65536)}, 1,
                        t.b_.addr(0), t.b_.mr->rkey()),
            0);
  WorkCompletion wc;
  const uint64_t done = until_completion(t.cluster_, *t.a_.cq, &wc) - t0;
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(t.a_.at(131072), t.b_.at(0), 65536), 0);
  std::vector<uint64_t> departures;  // of the responses (opcodes 0x0d-0x0f), in ns
  for (const std::string& line : t.cluster_.wire().trace()) {
    unsigned long long at = 0;
    unsigned op = 0;
    if (std::sscanf(line.c_str(), "t=%llu %*u->%*u op=0x%x", &at, &op) == 2 && op >= 0x0d &&
        op <= 0x0f)
      departures.push_back(at);
  }
  ASSERT_EQ(departures.size(), 16u);
  for (std::size_t i = 1; i < departures.size(); ++i) {
    EXPECT_GE(departures[i] - departures[i - 1], 1'336u) << i;
    EXPECT_LE(departures[i] - departures[i - 1], 1'338u) << i;
  }
  EXPECT_GT(done, 16 * 1'336u) << "the last response waited for the fifteen before it";
}

// Two senders, one receiver: a 2:1 incast through the switch for 1 ms. With PFC the switch
// pauses the senders and drops nothing (no retransmission); the receiver's port runs at line
// rate. Without PFC and with the same buffer, frames are tail-dropped and go-back-N resends.
struct Incast {
  uint64_t drops = 0, pauses = 0, retransmitted = 0, completed = 0;
  double gbps = 0;
};
Incast run_incast(bool pfc) {
  NicProfile p = profile("cx5-100g");
  p.sw.pfc = pfc;
  p.sw.buffer_bytes = 128 << 10;
  p.sw.xoff_bytes = pfc ? 96 << 10 : 0;
  p.sw.xon_bytes = pfc ? 64 << 10 : 0;
  EXPECT_TRUE(emu::rnic::validate(p).ok());
  Bed t(1, p);
  Host c;
  QpOptions o = mtu4k();
  o.timeout = 8;  // 1 ms
  t.open(t.a_, o);
  t.open(t.b_, o);
  t.open(c, o);
  auto b2 = t.make_qp(t.b_, o);
  t.connect(t.a_, *t.a_.qp, t.b_, *t.b_.qp, o);
  t.connect(t.b_, *t.b_.qp, t.a_, *t.a_.qp, o);
  t.connect(c, *c.qp, t.b_, *b2, o);
  t.connect(t.b_, *b2, c, *c.qp, o);
  t.cluster_.run_until_idle();
  Sge sa = t.a_.sge(0, 4096), sc = c.sge(0, 4096);
  SendWr wa, wc_;
  for (auto [w, s, off] : {std::tuple{&wa, &sa, 0}, std::tuple{&wc_, &sc, 1 << 19}}) {
    w->opcode = WrOpcode::kRdmaWrite;
    w->sg_list = s;
    w->num_sge = 1;
    w->send_flags = send_flag::kSignaled;
    w->remote_addr = t.b_.addr(off);
    w->rkey = t.b_.mr->rkey();
  }
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(t.a_.qp->post_send(wa, nullptr), 0);
    EXPECT_EQ(c.qp->post_send(wc_, nullptr), 0);
  }
  const uint64_t end = t.cluster_.now_ns() + 1'000'000;
  const uint64_t rx0 = t.b_.device->nic().counters().rx_bytes;
  Incast r;
  WorkCompletion wc[64];
  while (t.cluster_.now_ns() < end) {
    while (t.cluster_.step()) {
    }
    for (auto [h, w] : {std::pair{&t.a_, &wa}, std::pair{&c, &wc_}}) {
      const int n = h->cq->poll(wc, 64);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
        EXPECT_EQ(h->qp->post_send(*w, nullptr), 0);
      }
      r.completed += n;
    }
    t.cluster_.step_at(std::min(t.cluster_.next_event_ns(), end));
  }
  const auto* s = t.cluster_.wire().network_stats();
  r.drops = s->buffer_drops;
  r.pauses = s->pause_frames;
  r.retransmitted = t.a_.device->nic().counters().retransmitted_packets +
                    c.device->nic().counters().retransmitted_packets;
  r.gbps = static_cast<double>(t.b_.device->nic().counters().rx_bytes - rx0) * 8 / 1'000'000;
  std::printf("incast, PFC %s: %llu completions, %.2f Gb/s into the receiver, %llu drops, "
              "%llu XOFF, %llu retransmitted\n",
              pfc ? "on" : "off", (unsigned long long)r.completed, r.gbps,
              (unsigned long long)r.drops, (unsigned long long)r.pauses,
              (unsigned long long)r.retransmitted);
  return r;
}

TEST(TimedIncast, PfcPausesInsteadOfDropping) {
  const Incast r = run_incast(true);
  EXPECT_GT(r.pauses, 0u);
  EXPECT_EQ(r.drops, 0u);
  EXPECT_EQ(r.retransmitted, 0u);
  // The receiver's port is busy all the time: 4,128-byte packets of 4,194 on the wire.
  EXPECT_GT(r.gbps, 100.0 * 4128 / 4194 * 0.99);
}

TEST(TimedIncast, WithoutPfcTheSwitchDropsAndTheTransportResends) {
  const Incast r = run_incast(false);
  EXPECT_GT(r.drops, 0u);
  EXPECT_GT(r.retransmitted, 0u);
  EXPECT_GT(r.completed, 0u);
}

// ------------------------------------------------------------------- determinism ---

uint64_t fnv(const std::vector<std::string>& lines) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string& l : lines)
    for (char c : l + "\n") h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

struct Replay {
  std::vector<std::string> trace;
  uint64_t end_ns = 0;
  uint64_t retransmitted = 0;
  uint64_t dropped = 0;
};

// 200 random SENDs, WRITEs and READs of up to 20 KiB, eight at a time, over the timed cx5
// network with loss, corruption, duplication, reordering and seeded link flaps; every byte
// checked. Returns the packet trace and the end time.
Replay timed_run(uint64_t seed) {
  WireFaults f{0.01, 0.01, 0.01, 0.02, 3000, 150'000, 20'000};
  Bed t(seed, profile("cx5-100g"), f);
  QpOptions o = mtu4k();
  o.mtu = Mtu::k1024;
  o.timeout = 8;
  t.open(t.a_, o);
  t.open(t.b_, o);
  t.connect(t.a_, *t.a_.qp, t.b_, *t.b_.qp, o);
  t.connect(t.b_, *t.b_.qp, t.a_, *t.a_.qp, o);
  t.cluster_.wire().record_trace(true);
  std::mt19937_64 rng(seed);
  constexpr std::size_t kSlot = 20480;
  for (int round = 0; round < 25; ++round) {
    int kinds[8];
    uint32_t lens[8];
    for (int i = 0; i < 8; ++i) {
      kinds[i] = static_cast<int>(rng() % 3);
      lens[i] = 1 + static_cast<uint32_t>(rng() % kSlot);
      const std::size_t src = i * kSlot, dst = 200000 + i * kSlot;
      t.fill(t.a_.at(src), lens[i], static_cast<uint32_t>(rng()));
      t.fill(t.b_.at(dst), lens[i], static_cast<uint32_t>(rng()));
      if (kinds[i] == 0) {
        EXPECT_EQ(t.post_recv(*t.b_.qp, {t.b_.sge(dst, lens[i])}, i), 0);
        EXPECT_EQ(t.post_send(*t.a_.qp, WrOpcode::kSend, {t.a_.sge(src, lens[i])}, i), 0);
      } else {
        const WrOpcode op = kinds[i] == 1 ? WrOpcode::kRdmaWrite : WrOpcode::kRdmaRead;
        EXPECT_EQ(t.post_send(*t.a_.qp, op, {t.a_.sge(src, lens[i])}, i, t.b_.addr(dst),
                              t.b_.mr->rkey()),
                  0);
      }
    }
    t.cluster_.run_until_idle(60'000'000'000ull);
    WorkCompletion wc[16];
    const int n = t.a_.cq->poll(wc, 16);
    EXPECT_EQ(n, 8) << "round " << round;
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess) << "round " << round << ": "
                                                   << to_string(wc[i].status);
    while (t.b_.cq->poll(wc, 16) > 0) {
    }
    for (int i = 0; i < 8; ++i) {
      const std::size_t src = i * kSlot, dst = 200000 + i * kSlot;
      EXPECT_EQ(std::memcmp(t.a_.at(src), t.b_.at(dst), lens[i]), 0)
          << "round " << round << " op " << i << " kind " << kinds[i];
    }
  }
  Replay r;
  r.trace = t.cluster_.wire().trace();
  r.end_ns = t.cluster_.now_ns();
  r.retransmitted = t.a_.device->nic().counters().retransmitted_packets;
  r.dropped = t.cluster_.wire().stats().dropped;
  return r;
}

uint64_t test_seed() {
  const char* env = std::getenv("POLLUX_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 0x19;
}

TEST(TimedDeterminism, SameSeedSameTraceAndEndTime) {
  const uint64_t seed = test_seed();
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed));
  const Replay a = timed_run(seed), b = timed_run(seed), c = timed_run(seed + 1);
  std::printf("%zu packets, end %llu ns, %llu dropped, %llu retransmitted, trace %016llx\n",
              a.trace.size(), (unsigned long long)a.end_ns, (unsigned long long)a.dropped,
              (unsigned long long)a.retransmitted, (unsigned long long)fnv(a.trace));
  EXPECT_GT(a.dropped, 0u);
  EXPECT_GT(a.retransmitted, 0u);
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_NE(fnv(a.trace), fnv(c.trace)) << "another seed, another run";
}

}  // namespace
}  // namespace pollux::rdma::testing
