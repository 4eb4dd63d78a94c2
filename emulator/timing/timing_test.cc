// The plain C++ cores of the timed emulator: Timeline, PcieLink, WriteCache, OptaneMedia and
// profile loading. No SystemC here (see timed_ssd_test.cc for the modules).
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

// -------------------------------------------------------------------------------- profiles ---

TEST(Profile, EveryBuiltinLoadsAndValidates) {
  for (const char* name : {"p4800x", "p3700", "gen4-tlc", "null"}) {
    auto p = load_profile(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.error();
    EXPECT_EQ(p.value().name, name);
    EXPECT_TRUE(validate(p.value()).ok()) << name << ": " << validate(p.value()).error();
    EXPECT_EQ(p.value().fidelity, Fidelity::kTimed) << name;
    EXPECT_FALSE(p.value().description.empty()) << name;
    EXPECT_FALSE(p.value().sources.empty()) << name;
    ASSERT_EQ(p.value().controller.namespaces.size(), 1u) << name;
  }
}

TEST(Profile, BuiltinFigures) {
  auto p = load_profile("p4800x");
  ASSERT_TRUE(p.ok()) << p.error();
  const Profile& o = p.value();
  EXPECT_EQ(o.media, MediaKind::kOptane);
  EXPECT_EQ(o.pcie.generation, 3u);
  EXPECT_EQ(o.pcie.lanes, 4u);
  EXPECT_EQ(o.pcie.dma_read_latency, 700 * kNs);
  EXPECT_EQ(o.firmware.read, 1720 * kNs);
  EXPECT_EQ(o.optane.read, 2150 * kNs);
  EXPECT_EQ(o.optane.units, 16u);
  EXPECT_EQ(o.firmware.turnaround, 470 * kNs);
  EXPECT_EQ(o.datapath.read_bytes_per_second, 2'400'000'000u);
  EXPECT_EQ(o.datapath.write_bytes_per_second, 2'020'000'000u);
  EXPECT_EQ(o.controller.namespaces[0].size_bytes, uint64_t{732585168} * 512);
  EXPECT_FALSE(o.controller.volatile_write_cache);

  auto t = load_profile("gen4-tlc");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t.value().media, MediaKind::kNand);
  EXPECT_EQ(t.value().cache.bytes, uint64_t{64} << 20);
  EXPECT_FALSE(t.value().cache.power_loss_protection);
  EXPECT_TRUE(t.value().controller.volatile_write_cache);
  EXPECT_EQ(t.value().nand_timing.t_erase, 3500 * kUs);
  EXPECT_EQ(t.value().nand_timing.channel_bytes_per_second, 1'200'000'000u);
  EXPECT_EQ(t.value().ftl.logical_bytes, t.value().controller.namespaces[0].size_bytes);
  EXPECT_EQ(t.value().ftl.precondition, Precondition::kSequential);
  EXPECT_EQ(t.value().ftl.slc_bytes, uint64_t{108719} << 20);
  EXPECT_EQ(t.value().nand_timing.t_prog_slc, 400 * kUs);
  EXPECT_TRUE(t.value().nand_timing.suspend);

  auto m = load_profile("p3700");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.value().nand_timing.t_read_jitter, 5300 * kNs);
  EXPECT_DOUBLE_EQ(m.value().nand_timing.t_read_die_spread, 0.03);
  EXPECT_DOUBLE_EQ(m.value().nand_timing.read_retry_rate, 0.001);
  EXPECT_TRUE(m.value().nand_timing.register_hits);
  EXPECT_FALSE(m.value().nand_timing.suspend);
  EXPECT_EQ(m.value().ftl.read_ahead_groups, 4u);
  EXPECT_EQ(m.value().firmware.read_latency, 2800 * kNs);

  auto n = load_profile("null");
  ASSERT_TRUE(n.ok()) << n.error();
  EXPECT_EQ(n.value().media, MediaKind::kNone);
  EXPECT_EQ(n.value().pcie.generation, 0u);
}

// A minimal valid profile; `extra` is appended (top-level keys).
std::string base_yaml(const std::string& extra = "") {
  return "name: t\n"
         "controller: {max_io_queue_pairs: 8, volatile_write_cache: false}\n"
         "namespaces:\n"
         "  - {size: 1MiB, lba_size: 512}\n" +
         extra;
}

std::string parse_error(const std::string& yaml) {
  auto r = parse_profile(yaml);
  if (r.ok()) return "(parsed)";
  return r.error();
}

TEST(Profile, MinimalProfileParses) {
  auto r = parse_profile(base_yaml());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().name, "t");
  EXPECT_EQ(r.value().media, MediaKind::kNone);
  EXPECT_EQ(r.value().fidelity, Fidelity::kTimed);
  // Durations in every unit.
  auto d = parse_profile(base_yaml(
      "firmware: {read: 8.9us, write: 70 us, flush: 3ms, admin: 250ns, other: 0, per_unit: 12ps}\n"));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().firmware.read, 8900 * kNs);
  EXPECT_EQ(d.value().firmware.write, 70 * kUs);
  EXPECT_EQ(d.value().firmware.flush, 3 * kMs);
  EXPECT_EQ(d.value().firmware.admin, 250 * kNs);
  EXPECT_EQ(d.value().firmware.other, 0u);
  EXPECT_EQ(d.value().firmware.per_unit, 12u);
}

TEST(Profile, UnknownKeysAreNamed) {
  std::string e = parse_error(base_yaml("nmae: x\n"));
  EXPECT_THAT(e, HasSubstr("nmae"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
  e = parse_error(base_yaml("pcie: {lanez: 4}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.lanez"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
  EXPECT_THAT(e, HasSubstr("lanes"));  // the expected keys are listed
  for (const char* section : {"frontend", "firmware", "optane", "nand", "cache"}) {
    e = parse_error(base_yaml(std::string(section) + ": {bogus_key: 1}\n"));
    EXPECT_THAT(e, HasSubstr(std::string(section) + ".bogus_key")) << section;
  }
  // The functional controller's own keys are checked by its parser.
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: false, serail: x}\n"
      "namespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("serail"));
  // A section that is not a mapping.
  e = parse_error(base_yaml("pcie: 4\n"));
  EXPECT_THAT(e, HasSubstr("pcie: expected a mapping"));
}

TEST(Profile, BadDurations) {
  std::string e = parse_error(base_yaml("firmware: {read: 5 parsecs}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.read"));
  EXPECT_THAT(e, HasSubstr("5 parsecs"));
  EXPECT_THAT(e, HasSubstr("not a duration"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: 5}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: -1us}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: us}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: [1us]}\n")), HasSubstr("firmware.read"));
  // Above the field's maximum (10 s; 1 ms for link latencies).
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: 11s}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("pcie: {dma_read_latency: 2ms}\n")),
              HasSubstr("pcie.dma_read_latency"));
  EXPECT_TRUE(parse_profile(base_yaml("pcie: {dma_read_latency: 1ms}\n")).ok());
}

TEST(Profile, BadIntegers) {
  std::string e = parse_error(base_yaml("pcie: {lanes: 32}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.lanes"));
  EXPECT_THAT(e, HasSubstr("out of range"));
  e = parse_error(base_yaml("pcie: {generation: 6}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.generation"));
  EXPECT_THAT(e, HasSubstr("out of range [0, 5]"));
  e = parse_error(base_yaml("frontend: {clock_mhz: 0}\n"));
  EXPECT_THAT(e, HasSubstr("frontend.clock_mhz"));
  e = parse_error(base_yaml("frontend: {max_outstanding: -1}\n"));
  EXPECT_THAT(e, HasSubstr("frontend.max_outstanding"));
  EXPECT_THAT(e, HasSubstr("not an integer"));
  e = parse_error(base_yaml("firmware: {cores: two}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.cores"));
  EXPECT_THAT(e, HasSubstr("not an integer"));
  e = parse_error(base_yaml("firmware: {cores: 1.5}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.cores"));
  // Powers of two.
  EXPECT_THAT(parse_error(base_yaml("pcie: {lanes: 3}\n")), HasSubstr("pcie.lanes"));
  EXPECT_THAT(parse_error(base_yaml("pcie: {max_payload: 384}\n")), HasSubstr("max_payload"));
  // The timed device's own limits.
  EXPECT_THAT(parse_error("name: t\ncontroller: {volatile_write_cache: false, max_io_queue_pairs: 32}\n"
                          "namespaces:\n  - {size: 1MiB}\n"),
              HasSubstr("controller.max_io_queue_pairs"));
  EXPECT_THAT(parse_error("name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: false}\n"
                          "namespaces:\n  - {size: 1MiB}\n  - {size: 1MiB}\n"),
              HasSubstr("one namespace"));
}

TEST(Profile, BadMedia) {
  std::string e = parse_error(base_yaml("media: tape\n"));
  EXPECT_THAT(e, HasSubstr("media"));
  EXPECT_THAT(e, HasSubstr("'tape'"));
  // Optane needs its read time; NAND its timings.
  EXPECT_THAT(parse_error(base_yaml("media: optane\n")), HasSubstr("optane.read"));
  EXPECT_TRUE(parse_profile(base_yaml("media: optane\noptane: {read: 4us}\n")).ok());
  EXPECT_THAT(parse_error(base_yaml("media: nand\nnand: {precondition: full}\n")),
              HasSubstr("nand.precondition"));
}

// The ledger's model keys: parsed, and checked.
TEST(Profile, ModelKeys) {
  const std::string nand =
      "media: nand\nnand: {channels: 2, dies_per_channel: 2, planes_per_die: 1, "
      "blocks_per_plane: 64, pages_per_block: 16, t_read: 50us, t_prog: 600us, t_erase: 3ms, ";
  auto r = parse_profile(base_yaml(
      "firmware: {read: 2us, turnaround: 0.5us, jitter: 0.25, read_latency: 3us, write_latency: 15us}\n"
      "datapath: {read_mb_s: 2800, write_mb_s: 1900}\n" +
      nand +
      "t_read_die_spread: 0.03, t_read_jitter: 5us, read_retry_rate: 1e-3, read_retry_steps: 2, "
      "register_hits: true, read_ahead_groups: 4, suspend: true, t_suspend: 20us, t_resume: 10us, "
      "t_prog_slc: 150us, slc_bytes: 64KiB, slc_fold_after_idle: 2ms}\n"));
  ASSERT_TRUE(r.ok()) << r.error();
  const Profile& p = r.value();
  EXPECT_EQ(p.firmware.turnaround, 500 * kNs);
  EXPECT_DOUBLE_EQ(p.firmware.jitter, 0.25);
  EXPECT_EQ(p.firmware.read_latency, 3 * kUs);
  EXPECT_EQ(p.firmware.write_latency, 15 * kUs);
  EXPECT_EQ(p.datapath.read_bytes_per_second, 2'800'000'000u);
  EXPECT_EQ(p.datapath.write_bytes_per_second, 1'900'000'000u);
  EXPECT_DOUBLE_EQ(p.nand_timing.t_read_die_spread, 0.03);
  EXPECT_EQ(p.nand_timing.t_read_jitter, 5 * kUs);
  EXPECT_DOUBLE_EQ(p.nand_timing.read_retry_rate, 0.001);
  EXPECT_EQ(p.nand_timing.read_retry_steps, 2u);
  EXPECT_TRUE(p.nand_timing.register_hits);
  EXPECT_EQ(p.ftl.read_ahead_groups, 4u);
  EXPECT_TRUE(p.nand_timing.suspend);
  EXPECT_EQ(p.nand_timing.t_suspend, 20 * kUs);
  EXPECT_EQ(p.nand_timing.t_resume, 10 * kUs);
  EXPECT_EQ(p.nand_timing.t_prog_slc, 150 * kUs);
  EXPECT_EQ(p.ftl.slc_bytes, 65536u);
  EXPECT_EQ(p.ftl.slc_fold_after_idle, 2 * kMs);
  // Without the keys: off.
  auto off = parse_profile(base_yaml());
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.value().datapath.read_bytes_per_second, 0u);
  EXPECT_EQ(off.value().firmware.turnaround, 0u);
  // Errors name the field.
  EXPECT_THAT(parse_error(base_yaml(nand + "t_read_die_spread: 0.9}\n")),
              HasSubstr("nand.t_read_die_spread: 0.9 is out of range"));
  EXPECT_THAT(parse_error(base_yaml(nand + "read_retry_rate: often}\n")),
              HasSubstr("nand.read_retry_rate: 'often' is not a number"));
  EXPECT_THAT(parse_error(base_yaml(nand + "slc_bytes: 1MiB}\n")), HasSubstr("t_prog_slc"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {jitter: 2}\n")), HasSubstr("firmware.jitter"));
  EXPECT_THAT(parse_error(base_yaml("datapath: {read_mb_s: 0}\n")), HasSubstr("datapath.read_mb_s"));
  EXPECT_THAT(parse_error(base_yaml("datapath: {rate: 1}\n")), HasSubstr("datapath.rate: unknown key"));
}

TEST(Profile, ScaleCapacityScalesTheSlcCache) {
  auto p = load_profile("gen4-tlc");
  ASSERT_TRUE(p.ok());
  Profile q = p.value();
  const double before = double(q.controller.namespaces[0].size_bytes);
  const uint64_t slc = q.ftl.slc_bytes;
  ASSERT_TRUE(scale_capacity(q, 64, 48).ok());
  const double ratio = double(q.controller.namespaces[0].size_bytes) / before;
  EXPECT_NEAR(double(q.ftl.slc_bytes) / double(slc), ratio, 0.001);
  EXPECT_EQ(q.ftl.slc_bytes % 4096, 0u);
}

TEST(Profile, NameIsRequired) {
  const std::string e = parse_error(
      "controller: {max_io_queue_pairs: 8, volatile_write_cache: false}\nnamespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("name: required"));
  EXPECT_THAT(parse_error("- a\n- b\n"), HasSubstr("mapping"));
  EXPECT_THAT(parse_error("name: [unclosed\n"), HasSubstr("YAML"));
}

TEST(Profile, VolatileWriteCacheMustMatchTheCache) {
  // A DRAM cache without power-loss protection is volatile: Identify VWC must say so.
  std::string e = parse_error(base_yaml("cache: {bytes: 1MiB, power_loss_protection: false}\n"));
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  auto ok = parse_profile(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n"
      "cache: {bytes: 1MiB, power_loss_protection: false}\n");
  EXPECT_TRUE(ok.ok()) << ok.error();
  // Protected cache, or no cache: not volatile.
  EXPECT_TRUE(parse_profile(base_yaml("cache: {bytes: 1MiB, power_loss_protection: true}\n")).ok());
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n"
      "cache: {bytes: 1MiB, power_loss_protection: true}\n");
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  // validate() checks a profile changed in code the same way.
  Profile p = parse_profile(base_yaml()).value();
  p.cache.bytes = 4096;
  p.cache.power_loss_protection = false;
  EXPECT_THAT(validate(p).error(), HasSubstr("controller.volatile_write_cache"));
  p.controller.volatile_write_cache = true;
  EXPECT_TRUE(validate(p).ok()) << validate(p).error();
  p.cache.bytes = 4097;
  EXPECT_THAT(validate(p).error(), HasSubstr("cache.bytes"));
  EXPECT_THAT(parse_error(base_yaml("cache: {bytes: 3 apples}\n")), HasSubstr("cache.bytes"));
  EXPECT_THAT(parse_error(base_yaml("cache: {power_loss_protection: maybe}\n")),
              HasSubstr("cache.power_loss_protection"));
}

TEST(Profile, Fidelity) {
  EXPECT_EQ(parse_fidelity("functional").value(), Fidelity::kFunctional);
  EXPECT_EQ(parse_fidelity("timed").value(), Fidelity::kTimed);
  EXPECT_EQ(parse_fidelity("rtl").value(), Fidelity::kRtl);
  auto bad = parse_fidelity("exact");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("'exact'"));
  EXPECT_THAT(bad.error(), HasSubstr("functional, timed, rtl"));
  for (Fidelity f : {Fidelity::kFunctional, Fidelity::kTimed, Fidelity::kRtl}) {
    EXPECT_EQ(parse_fidelity(to_string(f)).value(), f);
  }
  EXPECT_EQ(parse_profile(base_yaml("fidelity: rtl\n")).value().fidelity, Fidelity::kRtl);
  EXPECT_EQ(parse_profile(base_yaml("fidelity: functional\n")).value().fidelity,
            Fidelity::kFunctional);
  const std::string e = parse_error(base_yaml("fidelity: exact\n"));
  EXPECT_THAT(e, HasSubstr("fidelity"));
  EXPECT_THAT(e, HasSubstr("'exact'"));
}

std::string temp_dir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

TEST(Profile, LoadFromPath) {
  const std::string path = temp_dir() + "/timing_test_profile.yaml";
  {
    std::ofstream out(path);
    out << base_yaml("media: optane\noptane: {read: 4us}\n");
  }
  auto r = load_profile(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().media, MediaKind::kOptane);
  EXPECT_EQ(r.value().optane.read, 4 * kUs);
  // Errors inside the file name the file.
  {
    std::ofstream out(path);
    out << base_yaml("pcie: {lanez: 4}\n");
  }
  r = load_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr(path));
  EXPECT_THAT(r.error(), HasSubstr("pcie.lanez"));
  std::remove(path.c_str());
}

TEST(Profile, MissingPathIsNamed) {
  const std::string path = temp_dir() + "/no/such/dir/profile.yaml";
  auto r = load_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr(path));
  auto f = load_profile_file("missing.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error(), HasSubstr("missing.yaml"));
  // A bare name ending in .yaml is taken as a path too.
  r = load_profile("missing.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("missing.yaml"));
  EXPECT_THAT(r.error(), HasSubstr("cannot open"));
}

TEST(Profile, UnknownBuiltinListsTheBuiltins) {
  auto r = load_profile("p4800");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("'p4800'"));
  for (const char* name : {"p4800x", "p3700", "gen4-tlc", "null"}) {
    EXPECT_THAT(r.error(), HasSubstr(name));
  }
}

// Raw NAND bytes over logical bytes.
double spare_ratio(const Profile& p) {
  const NandGeometry& g = p.nand_geometry;
  const double raw = double(g.channels) * g.dies_per_channel * g.planes_per_die *
                     g.blocks_per_plane * g.pages_per_block * g.page_bytes;
  return raw / double(p.controller.namespaces[0].size_bytes);
}

TEST(Profile, ScaleCapacityKeepsTheSpareRatio) {
  for (const char* name : {"p3700", "gen4-tlc"}) {
    Profile p = load_profile(name).value();
    const Profile full = p;
    const double ratio = spare_ratio(p);
    {
      const auto s = scale_capacity(p, 128);
      ASSERT_TRUE(s.ok()) << name << ": " << s.error();
    }
    EXPECT_EQ(p.nand_geometry.blocks_per_plane, 128u);
    EXPECT_EQ(p.nand_geometry.pages_per_block, full.nand_geometry.pages_per_block);
    EXPECT_EQ(p.nand_geometry.channels, full.nand_geometry.channels);
    EXPECT_EQ(p.nand_geometry.dies_per_channel, full.nand_geometry.dies_per_channel);
    EXPECT_EQ(p.nand_geometry.planes_per_die, full.nand_geometry.planes_per_die);
    EXPECT_EQ(p.nand_timing.t_erase, full.nand_timing.t_erase);  // same block size
    EXPECT_EQ(p.nand_timing.t_read, full.nand_timing.t_read);
    EXPECT_EQ(p.nand_timing.t_prog, full.nand_timing.t_prog);
    const uint64_t ns = p.controller.namespaces[0].size_bytes;
    EXPECT_EQ(ns % 4096, 0u);
    EXPECT_EQ(p.ftl.logical_bytes, ns);
    // The namespace shrinks in proportion, in whole 4 KiB units.
    EXPECT_NEAR(double(ns),
                double(full.controller.namespaces[0].size_bytes) * 128 /
                    full.nand_geometry.blocks_per_plane,
                4096.0);
    EXPECT_NEAR(spare_ratio(p), ratio, ratio * 1e-3) << name;
    EXPECT_TRUE(validate(p).ok()) << validate(p).error();
  }
}

TEST(Profile, ScaleCapacityScalesEraseTimeWithTheBlock) {
  Profile p = load_profile("p3700").value();
  const double ratio = spare_ratio(p);
  ASSERT_EQ(p.nand_geometry.pages_per_block, 256u);
  ASSERT_EQ(p.nand_timing.t_erase, 3 * kMs);
  {
    const auto s = scale_capacity(p, 128, 64);
    ASSERT_TRUE(s.ok()) << s.error();
  }
  EXPECT_EQ(p.nand_geometry.blocks_per_plane, 128u);
  EXPECT_EQ(p.nand_geometry.pages_per_block, 64u);
  EXPECT_EQ(p.nand_timing.t_erase, 3 * kMs / 4);  // a quarter of the block, a quarter of tBERS
  EXPECT_NEAR(spare_ratio(p), ratio, ratio * 1e-3);
}

TEST(Profile, ScaleCapacityErrors) {
  Profile o = load_profile("p4800x").value();
  EXPECT_THAT(scale_capacity(o, 16).error(), HasSubstr("NAND"));
  Profile n = load_profile("p3700").value();
  EXPECT_THAT(scale_capacity(n, 1).error(), HasSubstr("2 blocks"));
  // So few blocks that GC's reserve eats the spare area: validation says so.
  EXPECT_THAT(scale_capacity(n, 16).error(), HasSubstr("over-provisioning"));
}

}  // namespace
}  // namespace pollux::emu::timing
