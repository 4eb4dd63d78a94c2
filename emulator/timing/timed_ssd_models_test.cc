// The fidelity ledger's models on the timed SSD, in SystemC time (timed_ssd_fixture.h): data
// path bandwidth, firmware turnaround and jitter, read-ahead, program suspend, the SLC cache,
// NAND read latency spread, a protected cache's flush, garbage collection.
#include "emulator/timing/timed_ssd_fixture.h"

namespace pollux::emu::timing::timed_ssd_testing {
namespace {

// With power-loss protection the cache is durable already: Flush costs the firmware only.
// ---- the ledger's models, on the device in SystemC time ------------------------------------

// Submits every command at once (one doorbell) and runs until all have completed: the time
// from the doorbell to the last completion.
SimTime run_batch(Rig& r, Queue& q, const std::vector<sp::SubmissionEntry>& cmds) {
  std::vector<uint16_t> cids;
  for (const auto& c : cmds) cids.push_back(r.submit(q, c, /*ring=*/false));
  r.ring_sq(q);
  r.sim().scan();
  const SimTime t0 = r.now();
  for (uint16_t cid : cids) {
    auto c = r.await(q, cid, 100 * kMs);
    EXPECT_TRUE(c.has_value() && ok(*c)) << "cid " << cid;
  }
  return r.now() - t0;
}

// The controller's data path caps read bandwidth at its rate (p4800x: 2,400 MB/s) although the
// link and the firmware could carry more: 48 reads of 8 KiB at once take 48 x 8 KiB / 2.4 GB/s.
TEST_F(TimedSsdTest, DataPathCapsReadBandwidth) {
  Rig& r = make(small_p4800x());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(8192);
  std::vector<sp::SubmissionEntry> cmds;
  for (int i = 0; i < 48; ++i) cmds.push_back(rw(sp::nvm::kRead, uint64_t(i) * 64, 16, buf, buf + 4096));
  const SimTime t = run_batch(r, q, cmds);
  const double mb_s = 48.0 * 8192 / (double(t) / kSec) / 1e6;
  std::printf("48 x 8 KiB reads at once: %.1f us, %.0f MB/s\n", double(t) / kUs, mb_s);
  // The path moves 393 KB in 163.8 us; the first read's media time and the last CQE add ~10 us.
  EXPECT_GE(t, transfer_time(48 * 8192, 2'400'000'000));
  EXPECT_LE(t, transfer_time(48 * 8192, 2'400'000'000) + 15 * kUs);
}

// A firmware core switching between reads and writes pays the turnaround (p4800x: 0.47 us):
// 64 commands alternating read/write take 62 turnarounds more than the same commands grouped
// (all reads, then all writes: one switch). The core is the bottleneck in both.
TEST_F(TimedSsdTest, FirmwareTurnaroundCostsMixedCommands) {
  uint8_t* buf;
  auto batch = [&](bool alternate) {
    Profile p = small_p4800x();
    p.datapath = DataPathProfile{};  // the core alone is the bottleneck
    Rig& r = make(p);
    EXPECT_TRUE(r.enable());
    EXPECT_TRUE(r.create_io_queue_pair(1, 128));
    buf = r.alloc(4096);
    std::vector<sp::SubmissionEntry> cmds;
    for (int i = 0; i < 64; ++i) {
      const bool write = alternate ? (i % 2 == 1) : (i >= 32);
      cmds.push_back(rw(write ? sp::nvm::kWrite : sp::nvm::kRead, uint64_t(i) * 8, 8, buf));
    }
    return run_batch(r, r.io(1), cmds);
  };
  const SimTime grouped = batch(false), alternating = batch(true);
  std::printf("64 commands: grouped %.2f us, alternating %.2f us\n", double(grouped) / kUs,
              double(alternating) / kUs);
  const SimTime expected = 62 * 470 * kNs;
  EXPECT_GE(alternating - grouped, expected - 1 * kUs);
  EXPECT_LE(alternating - grouped, expected + 1 * kUs);
}

// Firmware jitter: with jitter 1 a command's core time is exponential with the same mean, so
// the core still does 64 reads in about 64 x 1.72 us, but not in exactly that.
TEST_F(TimedSsdTest, FirmwareJitterKeepsTheMeanAndSpreadsTheTimes) {
  auto batch = [&](double jitter, uint64_t seed) {
    Profile p = small_p4800x();
    p.datapath = DataPathProfile{};
    p.firmware.jitter = jitter;
    Rig& r = make(p, seed);
    EXPECT_TRUE(r.enable());
    EXPECT_TRUE(r.create_io_queue_pair(1, 512));
    uint8_t* buf = r.alloc(4096);
    std::vector<sp::SubmissionEntry> cmds;
    for (int i = 0; i < 400; ++i) cmds.push_back(rw(sp::nvm::kRead, uint64_t(i) * 8, 8, buf));
    return run_batch(r, r.io(1), cmds);
  };
  const SimTime fixed = batch(0, 1), a = batch(1.0, 1), b = batch(1.0, 2);
  std::printf("400 reads: %.1f us fixed, %.1f / %.1f us with jitter (seeds 1, 2)\n",
              double(fixed) / kUs, double(a) / kUs, double(b) / kUs);
  EXPECT_NE(a, fixed);
  EXPECT_NE(a, b);  // the simulation's seed drives it
  EXPECT_NEAR(double(a) / double(fixed), 1.0, 0.15);  // 400 draws: the sum is within ~5% sd
  EXPECT_NEAR(double(b) / double(fixed), 1.0, 0.15);
}

// A small NAND drive with gen4-tlc's read-ahead and register hits: sequential 4 KiB reads at
// QD1 find their page sensed ahead, so they take far less than tR; random ones do not.
TEST_F(TimedSsdTest, ReadAheadServesASequentialStreamFromThePageRegister) {
  Rig& r = make(small_nand());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(4096);
  for (int i = 0; i < 128; ++i) {  // 32 page groups of 4 units, then flushed
    auto c = r.await(q, r.submit(q, rw(sp::nvm::kWrite, uint64_t(i) * 8, 8, buf)));
    ASSERT_TRUE(c.has_value() && ok(*c));
  }
  ASSERT_TRUE(r.await(q, r.submit(q, flush())).has_value());
  r.sim().run_until(r.now() + 10 * kMs);  // every program done
  auto qd1 = [&](uint64_t lba) {
    const SimTime t0 = r.now();
    auto c = r.await(q, r.submit(q, rw(sp::nvm::kRead, lba, 8, buf)));
    EXPECT_TRUE(c.has_value() && ok(*c));
    return r.now() - t0;
  };
  SimTime seq = 0;
  for (int i = 16; i < 112; ++i) seq += qd1(uint64_t(i) * 8);
  const TimedSsdStats s = r.stats();
  const SimTime tr = r.profile().nand_timing.t_read;
  std::printf("sequential QD1 4 KiB reads: mean %.2f us (tR %.0f us), %" PRIu64
              " read-ahead senses, %" PRIu64 " register hits\n",
              double(seq) / 96 / kUs, double(tr) / kUs, s.read_ahead_senses, s.nand_register_hits);
  EXPECT_LT(seq / 96, tr / 2);
  EXPECT_GT(s.read_ahead_senses, 15u);
  EXPECT_GT(s.nand_register_hits, 80u);
  // A random read (no stream) senses: at least tR.
  EXPECT_GE(qd1(3 * 8), tr);
}

// Program suspend: a read to a die that is programming does not wait for tPROG.
TEST_F(TimedSsdTest, ProgramSuspendLetsAReadThrough) {
  auto read_behind_program = [&](bool suspend) {
    Profile p = small_nand();
    p.nand_timing.suspend = suspend;
    Rig& r = make(p);
    EXPECT_TRUE(r.enable());
    EXPECT_TRUE(r.create_io_queue_pair(1, 64));
    Queue& q = r.io(1);
    uint8_t* buf = r.alloc(4096);
    // Groups of 4 units stripe over the 4 dies: LBAs of units 0-3 on die 0 (channel 0).
    for (int i = 0; i < 16; ++i) r.await(q, r.submit(q, rw(sp::nvm::kWrite, uint64_t(i) * 8, 8, buf)));
    r.await(q, r.submit(q, flush()));
    r.sim().run_until(r.now() + 10 * kMs);
    // Group 4 goes to die 0 again: its program starts with the 4th write; then read unit 0.
    for (int i = 16; i < 20; ++i) r.await(q, r.submit(q, rw(sp::nvm::kWrite, uint64_t(i) * 8, 8, buf)));
    const SimTime t0 = r.now();
    auto c = r.await(q, r.submit(q, rw(sp::nvm::kRead, 0, 8, buf)));
    EXPECT_TRUE(c.has_value() && ok(*c));
    return std::pair(r.now() - t0, r.stats().nand_suspends);
  };
  const auto [with, suspends] = read_behind_program(true);
  const auto [without, none] = read_behind_program(false);
  const Profile p = small_nand();
  std::printf("read behind a program: %.1f us with suspend, %.1f us without\n",
              double(with) / kUs, double(without) / kUs);
  EXPECT_EQ(suspends, 1u);
  EXPECT_EQ(none, 0u);
  EXPECT_LT(with, p.nand_timing.t_suspend + p.nand_timing.t_read + 30 * kUs);
  EXPECT_GT(without, p.nand_timing.t_prog_slc / 2);
}

// The SLC cache on the device: host page groups go to SLC until its bytes are used, then TLC.
TEST_F(TimedSsdTest, SlcCacheFillsThenWritesGoToTlc) {
  Profile p = small_nand();
  p.ftl.slc_bytes = 8 * 16384;  // 8 page groups of 16 KiB
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(4096);
  for (int i = 0; i < 64; ++i) {  // 16 groups, back to back (no idle time to fold)
    auto c = r.await(q, r.submit(q, rw(sp::nvm::kWrite, uint64_t(i) * 8, 8, buf)));
    ASSERT_TRUE(c.has_value() && ok(*c));
  }
  const TimedSsdStats s = r.stats();
  EXPECT_EQ(s.slc_programs, 8u);
  EXPECT_EQ(s.tlc_programs, 8u);
  EXPECT_EQ(s.slc_used_bytes, 8u * 16384);
}

// Read latency spread on the device: with jitter and retries, QD1 reads of one die vary.
TEST_F(TimedSsdTest, NandReadLatencyVaries) {
  Profile p = small_nand();
  p.nand_timing.t_read_jitter = 5 * kUs;
  p.nand_timing.read_retry_rate = 0.05;
  p.nand_timing.register_hits = false;
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(4096);
  for (int i = 0; i < 4; ++i) r.await(q, r.submit(q, rw(sp::nvm::kWrite, uint64_t(i) * 8, 8, buf)));
  r.await(q, r.submit(q, flush()));
  r.sim().run_until(r.now() + 10 * kMs);
  std::vector<SimTime> lat;
  for (int i = 0; i < 400; ++i) {
    const SimTime t0 = r.now();
    r.await(q, r.submit(q, rw(sp::nvm::kRead, uint64_t(i % 4) * 8, 8, buf)));
    lat.push_back(r.now() - t0);
  }
  std::sort(lat.begin(), lat.end());
  EXPECT_GE(lat.front(), p.nand_timing.t_read);
  EXPECT_GT(lat[396], lat[200] + 2 * kUs) << "p99 above the median";
  EXPECT_GE(lat.back(), lat.front() + p.nand_timing.t_read) << "a retried read";
  EXPECT_GT(r.stats().nand_read_retries, 5u);
}

TEST_F(TimedSsdTest, FlushOfAProtectedCacheDoesNotWaitForTheMedia) {
  Profile p = small_nand();
  p.cache.power_loss_protection = true;
  p.controller.volatile_write_cache = false;
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* wbuf = r.alloc(4096);
  fill(wbuf, 4096, 5);
  auto w = r.await(q, r.submit(q, rw(sp::nvm::kWrite, 800, 8, wbuf)), kMs);
  ASSERT_TRUE(w.has_value());
  const SimTime t0 = r.now();
  auto f = r.await(q, r.submit(q, flush()), 10 * kMs);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(ok(*f));
  EXPECT_LT(r.now() - t0, 50 * kUs);  // tPROG is 500 us
}

TEST_F(TimedSsdTest, NandFillsAndGarbageCollects) {
  // Overwrite the 32 MiB namespace twice at QD 32 in random 4 KiB writes: GC must run, the
  // cache stalls, and everything completes with the engine in agreement.
  Rig& r = make(small_nand());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  constexpr int kQd = 32;
  uint8_t* bufs = r.alloc(kQd * 4096);
  const uint64_t units = (32u << 20) / 4096;
  const uint64_t total = 2 * units;
  uint64_t submitted = 0, completed = 0;
  std::vector<int> free_bufs;
  for (int i = 0; i < kQd; ++i) free_bufs.push_back(i);
  std::vector<std::pair<uint16_t, int>> busy;
  std::mt19937_64 rng(3);
  while (completed < total) {
    while (!free_bufs.empty() && submitted < total) {
      const int b = free_bufs.back();
      free_bufs.pop_back();
      const uint64_t unit = rng() % units;
      busy.emplace_back(r.submit(q, rw(sp::nvm::kWrite, unit * 8, 8, bufs + size_t(b) * 4096)), b);
      ++submitted;
    }
    r.sim().scan();
    r.sim().run_until(r.now() + 100 * kMs, /*stop_at_completion=*/true);
    r.drain(q);
    for (auto& [c, t] : q.stash) {
      ASSERT_TRUE(ok(c));
      auto it = std::find_if(busy.begin(), busy.end(),
                             [&](const auto& e) { return e.first == c.cid; });
      ASSERT_NE(it, busy.end());
      free_bufs.push_back(it->second);
      busy.erase(it);
      ++completed;
    }
    q.stash.clear();
    ASSERT_LT(r.now(), 60 * kSec) << "stuck at " << completed;
  }
  const TimedSsdStats s = r.stats();
  EXPECT_GT(s.ftl.gc_relocations, 0u) << "no garbage collection";
  EXPECT_GT(s.nand_erases, 0u);
  EXPECT_GT(s.cache_stalls, 0u);
  EXPECT_EQ(s.ftl.host_units_written, total);
  EXPECT_EQ(s.in_flight, 0u);
}

}  // namespace
}  // namespace pollux::emu::timing::timed_ssd_testing
