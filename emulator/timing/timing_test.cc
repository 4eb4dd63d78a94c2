// The plain C++ cores of the timed emulator: Timeline, PcieLink, DataPath, WriteCache and
// OptaneMedia. No SystemC here (see timed_ssd_test.cc for the modules; profile_test.cc for
// profile loading).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "emulator/timing/media.h"
#include "emulator/timing/pcie_link.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"
#include "emulator/timing/timeline.h"

namespace pollux::emu::timing {
namespace {

using ::testing::HasSubstr;

// ------------------------------------------------------------------------------ Timeline ---

TEST(Timeline, BackToBackReservationsQueueAndMerge) {
  Timeline t;
  EXPECT_EQ(t.reserve(0, 0, 10), 10u);
  EXPECT_EQ(t.reserve(0, 0, 10), 20u);  // queued behind the first
  EXPECT_EQ(t.reserve(0, 5, 10), 30u);
  EXPECT_EQ(t.periods(), 1u);  // [0, 30): touching periods are one
  EXPECT_EQ(t.busy_until(), 30u);
}

TEST(Timeline, ZeroDurationCostsNothing) {
  Timeline t;
  EXPECT_EQ(t.reserve(0, 0, 100), 100u);
  EXPECT_EQ(t.reserve(0, 50, 0), 50u);
  EXPECT_EQ(t.periods(), 1u);
}

TEST(Timeline, OutOfOrderReservationUsesAnEarlierGap) {
  Timeline t;
  // Command A's data goes over the link far in the future...
  EXPECT_EQ(t.reserve(0, 1000, 100), 1100u);
  // ...command B's transfer, reserved afterwards for now, does not wait behind it.
  EXPECT_EQ(t.reserve(0, 0, 100), 100u);
  EXPECT_EQ(t.periods(), 2u);
  // A reservation that does not fit in the gap [100, 1000) goes after A.
  EXPECT_EQ(t.reserve(0, 950, 100), 1200u);
  EXPECT_EQ(t.periods(), 2u);  // merged into [1000, 1200)
  EXPECT_EQ(t.busy_until(), 1200u);
}

TEST(Timeline, GapFillingSkipsGapsThatAreTooSmall) {
  Timeline t;
  EXPECT_EQ(t.reserve(0, 0, 10), 10u);     // [0, 10)
  EXPECT_EQ(t.reserve(0, 20, 10), 30u);    // [20, 30)
  EXPECT_EQ(t.reserve(0, 100, 10), 110u);  // [100, 110)
  EXPECT_EQ(t.periods(), 3u);
  // 15 does not fit in [10, 20) but fits in [30, 100).
  EXPECT_EQ(t.reserve(0, 0, 15), 45u);  // [30, 45), joined to [20, 30)
  EXPECT_EQ(t.periods(), 3u);
  // Exactly fills [10, 20): the first three periods become one.
  EXPECT_EQ(t.reserve(0, 10, 10), 20u);
  EXPECT_EQ(t.periods(), 2u);  // [0, 45), [100, 110)
  // Exactly fills [45, 100): everything is one period.
  EXPECT_EQ(t.reserve(0, 0, 55), 100u);
  EXPECT_EQ(t.periods(), 1u);
  EXPECT_EQ(t.busy_until(), 110u);
  EXPECT_EQ(t.reserve(0, 0, 1), 111u);
}

TEST(Timeline, MergesWithTheNextPeriod) {
  Timeline t;
  EXPECT_EQ(t.reserve(0, 50, 50), 100u);  // [50, 100)
  EXPECT_EQ(t.reserve(0, 30, 20), 50u);   // [30, 50) touches it
  EXPECT_EQ(t.periods(), 1u);
  EXPECT_EQ(t.reserve(0, 0, 30), 30u);  // [0, 30)
  EXPECT_EQ(t.periods(), 1u);
  EXPECT_EQ(t.busy_until(), 100u);
}

TEST(Timeline, ForgetsThePast) {
  Timeline t;
  for (SimTime s = 0; s < 1000; s += 100) t.reserve(0, s, 10);
  EXPECT_EQ(t.periods(), 10u);
  // Periods that ended at or before `now` are dropped; [500, 510) onwards remain.
  EXPECT_EQ(t.reserve(500, 2000, 10), 2010u);
  EXPECT_EQ(t.periods(), 6u);  // 500..900 and the new one
  EXPECT_EQ(t.reserve(3000, 3000, 10), 3010u);
  EXPECT_EQ(t.periods(), 1u);
  EXPECT_EQ(t.busy_until(), 3010u);
  // A start in the past (before anything remembered) is still honoured as given.
  EXPECT_EQ(t.reserve(3000, 2990, 5), 2995u);
}

// Time moving on: forgotten periods leave room at the front, which inserts use. Every
// reservation is the one a plain list of the periods not yet over gives.
TEST(Timeline, MatchesAPlainListAsTimeMovesOn) {
  const uint64_t seed = 11;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  Timeline t;
  std::vector<std::pair<SimTime, SimTime>> ref;  // [start, end), sorted, disjoint
  SimTime now = 0;
  for (int i = 0; i < 20000; ++i) {
    now += rng() % 8;
    const SimTime start = now + (rng() % 4 == 0 ? rng() % 2000 : rng() % 40);
    const SimTime dur = 1 + rng() % 12;
    std::erase_if(ref, [&](const auto& p) { return p.second <= now; });
    SimTime at = start;
    for (const auto& p : ref)
      if (p.second > at && p.first < at + dur) at = p.second;
    ref.emplace_back(at, at + dur);
    std::sort(ref.begin(), ref.end());
    ASSERT_EQ(t.reserve(now, start, dur), at + dur) << "reservation " << i;
  }
}

TEST(Timeline, ManyRandomReservationsNeverOverlap) {
  // Reference: a bitmap of busy picoseconds.
  std::mt19937_64 rng(7);
  Timeline t;
  std::vector<bool> busy(20000, false);
  for (int i = 0; i < 400; ++i) {
    const SimTime start = rng() % 15000, dur = 1 + rng() % 40;
    const SimTime end = t.reserve(0, start, dur);
    ASSERT_GE(end, start + dur);
    ASSERT_LT(end, busy.size());
    // The earliest fit: every earlier candidate window overlaps something.
    for (SimTime s = start; s + dur < end; ++s) {
      bool free = true;
      for (SimTime k = s; k < s + dur; ++k) free = free && !busy[k];
      ASSERT_FALSE(free) << "a gap at " << s << " was skipped";
    }
    for (SimTime k = end - dur; k < end; ++k) {
      ASSERT_FALSE(busy[k]) << "overlap at " << k;
      busy[k] = true;
    }
  }
}

// ------------------------------------------------------------------------------- PcieLink ---

PcieProfile gen3x4() {
  PcieProfile p;
  p.generation = 3;
  p.lanes = 4;
  p.max_payload = 256;
  p.max_read_request = 512;
  p.tlp_overhead = 24;
  p.mmio_write_latency = 300 * kNs;
  p.dma_read_latency = 700 * kNs;
  p.dma_write_latency = 300 * kNs;
  return p;
}

TEST(PcieLink, Bandwidth) {
  // Gen 3: 8 GT/s per lane, 128b/130b.
  EXPECT_EQ(PcieLink(gen3x4()).raw_bytes_per_second(),
            uint64_t{8'000'000'000} * 4 * 128 / 130 / 8);
  EXPECT_NEAR(double(PcieLink(gen3x4()).raw_bytes_per_second()), 3.938e9, 1e6);
  PcieProfile p = gen3x4();
  p.generation = 4;
  EXPECT_EQ(PcieLink(p).raw_bytes_per_second(), uint64_t{16'000'000'000} * 4 * 128 / 130 / 8);
  p.generation = 5;
  p.lanes = 16;
  EXPECT_EQ(PcieLink(p).raw_bytes_per_second(), uint64_t{32'000'000'000} * 16 * 128 / 130 / 8);
  // Gen 1-2: 8b/10b.
  p.generation = 1;
  p.lanes = 1;
  EXPECT_EQ(PcieLink(p).raw_bytes_per_second(), 250'000'000u);
  p.generation = 2;
  p.lanes = 8;
  EXPECT_EQ(PcieLink(p).raw_bytes_per_second(), 4'000'000'000u);
}

TEST(PcieLink, DmaWriteIsPostedWithTlpOverheadPerMaxPayload) {
  const PcieProfile p = gen3x4();
  PcieLink link(p);
  const uint64_t bps = link.raw_bytes_per_second();
  // 4096 bytes in 256-byte TLPs: 16 TLPs of 24 bytes overhead each.
  const SimTime wire = transfer_time(4096 + 16 * 24, bps);
  EXPECT_EQ(link.dma_write(0, 0, 4096), wire + p.dma_write_latency);
  // The second write queues on the upstream wire, not behind the first one's latency.
  EXPECT_EQ(link.dma_write(0, 0, 4096), 2 * wire + p.dma_write_latency);
  EXPECT_EQ(link.upstream_bytes(), 8192u);
  EXPECT_EQ(link.downstream_bytes(), 0u);
  // A 16-byte CQE is one TLP.
  PcieLink fresh(p);
  EXPECT_EQ(fresh.dma_write(0, 1000, 16), 1000 + transfer_time(16 + 24, bps) + p.dma_write_latency);
  // A partial last TLP still costs a whole TLP's overhead.
  PcieLink partial(p);
  EXPECT_EQ(partial.dma_write(0, 0, 257), transfer_time(257 + 2 * 24, bps) + p.dma_write_latency);

  // A smaller max payload means more TLPs, so more overhead for the same bytes.
  PcieProfile small = p;
  small.max_payload = 128;
  PcieLink link128(small);
  EXPECT_EQ(link128.dma_write(0, 0, 4096), transfer_time(4096 + 32 * 24, bps) + p.dma_write_latency);
  PcieProfile no_overhead = p;
  no_overhead.tlp_overhead = 0;
  PcieLink bare(no_overhead);
  EXPECT_EQ(bare.dma_write(0, 0, 4096), transfer_time(4096, bps) + p.dma_write_latency);
}

TEST(PcieLink, DmaReadIsRequestPlusLatencyPlusData) {
  const PcieProfile p = gen3x4();
  PcieLink link(p);
  const uint64_t bps = link.raw_bytes_per_second();
  // 4096 bytes: 8 read requests (MRRS 512) up, 16 completion TLPs (MPS 256) down.
  const SimTime requests = transfer_time(8 * 24, bps);
  const SimTime data = transfer_time(4096 + 16 * 24, bps);
  EXPECT_EQ(link.dma_read(0, 0, 4096), requests + p.dma_read_latency + data);
  EXPECT_EQ(link.upstream_bytes(), 8u * 24);
  EXPECT_EQ(link.downstream_bytes(), 4096u);
  // An SQE fetch: one request, one completion.
  PcieLink fresh(p);
  EXPECT_EQ(fresh.dma_read(0, 500, 64),
            500 + transfer_time(24, bps) + p.dma_read_latency + transfer_time(64 + 24, bps));
  // Two reads at once: the second request queues behind the first on the upstream wire and
  // its data behind the first's on the downstream wire.
  PcieLink two(p);
  const SimTime a = two.dma_read(0, 0, 4096);
  const SimTime b = two.dma_read(0, 0, 4096);
  EXPECT_EQ(a, requests + p.dma_read_latency + data);
  EXPECT_EQ(b, a + data);
  // A read request waits behind a posted write's upstream traffic.
  PcieLink mixed(p);
  const SimTime w = mixed.dma_write(0, 0, 4096) - p.dma_write_latency;
  EXPECT_EQ(mixed.dma_read(0, 0, 64), w + transfer_time(24, bps) + p.dma_read_latency +
                                          transfer_time(64 + 24, bps));
}

TEST(PcieLink, MmioWriteAddsLatency) {
  PcieLink link(gen3x4());
  EXPECT_EQ(link.mmio_write(1000), 1000 + 300 * kNs);
}

TEST(PcieLink, IdealLinkCostsNothing) {
  PcieProfile p;  // latencies 0
  p.generation = 0;
  PcieLink link(p);
  EXPECT_EQ(link.raw_bytes_per_second(), 0u);
  EXPECT_EQ(link.dma_read(0, 5, 1 << 20), 5u);
  EXPECT_EQ(link.dma_write(0, 7, 1 << 20), 7u);
  EXPECT_EQ(link.dma_write(0, 7, 1 << 20), 7u);  // nothing is reserved
  EXPECT_EQ(link.mmio_write(9), 9u);
  // The null profile's link.
  auto null = load_profile("null");
  ASSERT_TRUE(null.ok()) << null.error();
  PcieLink nl(null.value().pcie);
  EXPECT_EQ(nl.dma_read(0, 123, 4096), 123u);
  EXPECT_EQ(nl.dma_write(0, 123, 4096), 123u);
  EXPECT_EQ(nl.mmio_write(123), 123u);
}

// ----------------------------------------------------------------------------- WriteCache ---

// ---- DataPath ----

TEST(DataPath, NoLimitCostsNothing) {
  DataPath d(DataPathProfile{});
  const DataPath::Slot s = d.to_host(0, 5 * kUs, 1 << 20);
  EXPECT_EQ(s.begin, 5 * kUs);
  EXPECT_EQ(s.end, 5 * kUs);
}

TEST(DataPath, EachDirectionIsABandwidthOfItsOwn) {
  DataPath d(DataPathProfile{2'000'000'000, 1'000'000'000});  // 2 GB/s out, 1 GB/s in
  // 64 KiB to the host: 32.768 us; a second transfer offered at the same time queues behind.
  DataPath::Slot a = d.to_host(0, 0, 65536);
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(a.end, 32'768 * kNs);
  DataPath::Slot b = d.to_host(0, 0, 65536);
  EXPECT_EQ(b.begin, 32'768 * kNs);
  EXPECT_EQ(b.end, 65'536 * kNs);
  // The other direction is independent: 64 KiB from the host at 1 GB/s.
  DataPath::Slot w = d.from_host(0, 0, 65536);
  EXPECT_EQ(w.begin, 0u);
  EXPECT_EQ(w.end, 65'536 * kNs);
  // An idle gap is used: a transfer offered later than the booked ones starts at once.
  DataPath::Slot c = d.to_host(0, 1 * kMs, 4096);
  EXPECT_EQ(c.begin, 1 * kMs);
  EXPECT_EQ(c.end, 1 * kMs + 2'048 * kNs);
}

TEST(DataPath, SustainedRateIsTheConfiguredOne) {
  DataPath d(DataPathProfile{2'400'000'000, 0});
  SimTime end = 0;
  for (int i = 0; i < 1000; ++i) end = d.to_host(0, 0, 65536).end;  // all offered at once
  EXPECT_NEAR(1000.0 * 65536 / (double(end) / kSec) / 1e6, 2400.0, 0.01);
}

TEST(WriteCache, DisabledWithoutCapacity) {
  WriteCache c(0);
  EXPECT_FALSE(c.enabled());
  EXPECT_TRUE(WriteCache(1).enabled());
}

TEST(WriteCache, AdmitsUpToCapacityWithoutWaiting) {
  WriteCache c(4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(c.admit(100), 100u);
    c.release_pending(1, 1000 + 100 * i);
  }
  EXPECT_EQ(c.stalls(), 0u);
  EXPECT_EQ(c.occupancy_at_last_admit(), 4u);
  EXPECT_EQ(c.drained_at(), 1300u);
}

TEST(WriteCache, OccupancyAtATimeCountsWhatIsNotYetReleased) {
  WriteCache c(4);
  EXPECT_EQ(c.capacity(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.admit(0), 0u);
  c.release_pending(1, 100);  // one released at 100, one at 200, one still pending
  c.release_pending(1, 200);
  EXPECT_EQ(c.occupancy_at(50), 3u);
  EXPECT_EQ(c.occupancy_at(100), 2u);  // released at 100: free from then on
  EXPECT_EQ(c.occupancy_at(250), 1u);  // the pending one has no release time yet
}

TEST(WriteCache, FullCacheStallsUntilTheEarliestRelease) {
  WriteCache c(2);
  EXPECT_EQ(c.admit(0), 0u);
  EXPECT_EQ(c.admit(0), 0u);
  // Released out of order: the slot freed first (300) is the one a stalled write gets.
  c.release_pending(1, 500);
  c.release_pending(1, 300);
  EXPECT_EQ(c.admit(10), 300u);
  EXPECT_EQ(c.stalls(), 1u);
  c.release_pending(1, 900);
  EXPECT_EQ(c.admit(10), 500u);
  EXPECT_EQ(c.stalls(), 2u);
  c.release_pending(1, 950);
  // Slots whose release time has passed are free again: no stall.
  EXPECT_EQ(c.admit(2000), 2000u);
  EXPECT_EQ(c.stalls(), 2u);
  EXPECT_EQ(c.occupancy_at_last_admit(), 1u);
  c.release_pending(1, 2500);
  EXPECT_EQ(c.drained_at(), 2500u);
}

TEST(WriteCache, ReleasePendingTakesTheOldestAndClamps) {
  WriteCache c(3);
  EXPECT_EQ(c.admit(0), 0u);
  EXPECT_EQ(c.admit(0), 0u);
  EXPECT_EQ(c.admit(0), 0u);
  // A NAND page program makes several buffered units durable at once.
  c.release_pending(3, 700);
  EXPECT_EQ(c.drained_at(), 700u);
  EXPECT_EQ(c.admit(0), 700u);
  EXPECT_EQ(c.admit(0), 700u);
  EXPECT_EQ(c.admit(0), 700u);
  EXPECT_EQ(c.stalls(), 3u);
  // Asking to release more than is pending releases what there is.
  c.release_pending(10, 800);
  EXPECT_EQ(c.occupancy_at_last_admit(), 3u);
  EXPECT_EQ(c.admit(0), 800u);
  // drained_at never goes backwards.
  c.release_pending(1, 100);
  EXPECT_EQ(c.drained_at(), 800u);
}

// ---------------------------------------------------------------------------- OptaneMedia ---

OptaneProfile optane() {
  OptaneProfile p;
  p.units = 16;
  p.interleave_bytes = 4096;
  p.read = 4300 * kNs;
  p.read_stddev = 500 * kNs;
  p.write = 5000 * kNs;
  p.write_stddev = 600 * kNs;
  return p;
}

// Service times of `n` reads of one unit, each started when the previous one ended.
std::vector<SimTime> service_times(uint64_t seed, const OptaneProfile& p, int n) {
  std::mt19937_64 rng(seed);
  OptaneMedia m(p, rng);
  std::vector<SimTime> out;
  SimTime t = 0;
  for (int i = 0; i < n; ++i) {
    const SimTime done = i % 2 ? m.write(t, 3).done : m.read(t, 3);
    out.push_back(done - t);
    t = done;
  }
  return out;
}

TEST(OptaneMedia, SameSeedSameServiceTimes) {
  const auto a = service_times(42, optane(), 200);
  EXPECT_EQ(a, service_times(42, optane(), 200));
  EXPECT_NE(a, service_times(43, optane(), 200));
  // There is jitter, and it is centred on the mean.
  std::set<SimTime> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 150u);
  double reads = 0;
  for (size_t i = 0; i < a.size(); i += 2) reads += double(a[i]);
  EXPECT_NEAR(reads / 100, 4300.0 * kNs, 200.0 * kNs);
}

TEST(OptaneMedia, NoJitterWithoutStddev) {
  OptaneProfile p = optane();
  p.read_stddev = p.write_stddev = 0;
  for (SimTime s : service_times(1, p, 20)) {
    EXPECT_TRUE(s == p.read || s == p.write) << s;
  }
}

TEST(OptaneMedia, JitterIsClippedAtAQuarterOfTheMean) {
  OptaneProfile p = optane();
  p.read_stddev = 40 * p.read;  // almost every other draw would be negative
  p.write_stddev = 40 * p.write;
  const auto s = service_times(9, p, 2000);
  size_t clipped = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const SimTime floor = (i % 2 ? p.write : p.read) / 4;
    ASSERT_GE(s[i], floor) << i;
    clipped += s[i] == floor;
  }
  EXPECT_GT(clipped, 500u);  // ~49% of the draws are below a quarter of the mean
}

TEST(OptaneMedia, PartitionsSpreadAndSerialise) {
  const OptaneProfile p = [] {
    OptaneProfile o = optane();
    o.read_stddev = o.write_stddev = 0;
    return o;
  }();
  std::mt19937_64 rng(1);
  // Consecutive units, all at time 0: one read per partition finishes after one service
  // time, the others queue behind it on their partition.
  {
    OptaneMedia m(p, rng);
    std::map<SimTime, int> finish;
    for (uint64_t u = 0; u < 64; ++u) ++finish[m.read(0, u)];
    EXPECT_EQ(finish[p.read], 16);  // all 16 partitions in use
    EXPECT_EQ(finish.rbegin()->first % p.read, 0u);
    EXPECT_LT(finish.rbegin()->first, 64 * p.read / 2);  // far from serial
  }
  // A stride equal to the partition count still spreads (the address bits are mixed).
  for (const uint64_t stride : {16u, 256u, 4096u}) {
    OptaneMedia m(p, rng);
    int first_round = 0;
    for (uint64_t i = 0; i < 64; ++i) first_round += m.read(0, i * stride) == p.read;
    EXPECT_GE(first_round, 12) << "stride " << stride;
  }
  // The same unit twice: one partition, serialised.
  {
    OptaneMedia m(p, rng);
    EXPECT_EQ(m.read(0, 5), p.read);
    EXPECT_EQ(m.read(0, 5), 2 * p.read);
    EXPECT_EQ(m.write(0, 5).done, 2 * p.read + p.write);
    EXPECT_EQ(m.write(0, 5).units, 1u);
    // A later start is not delayed.
    EXPECT_EQ(m.read(100 * p.read, 5), 101 * p.read);
  }
  // With an 8 KiB interleave, units 2k and 2k+1 share a partition.
  {
    OptaneProfile wide = p;
    wide.interleave_bytes = 8192;
    OptaneMedia m(wide, rng);
    EXPECT_EQ(m.read(0, 10), p.read);
    EXPECT_EQ(m.read(0, 11), 2 * p.read);
  }
}

TEST(OptaneMedia, FlushWaitsForTheLastWrite) {
  OptaneProfile p = optane();
  p.read_stddev = p.write_stddev = 0;
  std::mt19937_64 rng(1);
  OptaneMedia m(p, rng);
  EXPECT_EQ(m.flush(50).done, 50u);
  const SimTime w = m.write(0, 1).done;
  EXPECT_EQ(w, p.write);
  EXPECT_EQ(m.flush(0).done, w);
  EXPECT_EQ(m.flush(w + 1).done, w + 1);
  (void)m.read(0, 2);  // reads do not matter
  EXPECT_EQ(m.flush(0).done, w);
}

TEST(NullMedia, ZeroLatency) {
  NullMedia m;
  EXPECT_EQ(m.read(10, 1), 10u);
  EXPECT_EQ(m.write(10, 1).done, 10u);
  EXPECT_EQ(m.write(10, 1).units, 1u);
  EXPECT_EQ(m.flush(10).done, 10u);
}

}  // namespace
}  // namespace pollux::emu::timing
