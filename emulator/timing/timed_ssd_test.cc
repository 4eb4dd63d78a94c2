// The timed SSD driven as a host would (timed_ssd_fixture.h): completions at their simulated
// time, writes, resets and queue deletion with commands in flight, errors, the write cache;
// determinism by seed. The ledger's models: timed_ssd_models_test.cc; queue mechanics:
// timed_ssd_queue_test.cc.
#include "emulator/timing/timed_ssd_fixture.h"

namespace pollux::emu::timing::timed_ssd_testing {
namespace {

// ------------------------------------------------------------------------------- tests ---

TEST_F(TimedSsdTest, ReadCompletionIsVisibleOnlyAtItsSimulatedTime) {
  Rig& r = make(small_p4800x());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);

  uint8_t* wbuf = r.alloc(4096);
  uint8_t* rbuf = r.alloc(4096);
  fill(wbuf, 4096, 1);
  const uint16_t wcid = r.submit(q, rw(sp::nvm::kWrite, 64, 8, wbuf));
  auto w = r.await(q, wcid);
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE(ok(*w));

  const uint64_t reads_before = r.ctrl().counters().io_reads;
  const uint16_t rcid = r.submit(q, rw(sp::nvm::kRead, 64, 8, rbuf));
  r.sim().scan();
  const SimTime t0 = r.now();
  r.sim().run_until(t0 + 1 * kUs);
  EXPECT_FALSE(Rig::visible(q)) << "a QD1 read on a p4800x takes microseconds";
  EXPECT_EQ(r.ctrl().counters().io_reads, reads_before) << "executed before its time";
  EXPECT_EQ(r.stats().in_flight, 1u);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(rbuf[i], 0) << "data moved early at " << i;

  auto c = r.await(q, rcid, 49 * kUs);  // until t0 + 50 us at most
  ASSERT_TRUE(c.has_value()) << "no completion within 50 us";
  EXPECT_TRUE(ok(*c));
  EXPECT_EQ(c->sqid, 1u);
  const SimTime latency = r.now() - t0;
  // Firmware 1.72 us + media 2.15 us (jitter clipped at 1.075 us) + link: the SPDK paper's 7 us.
  EXPECT_GT(latency, 3 * kUs);
  EXPECT_LT(latency, 20 * kUs);
  EXPECT_EQ(std::memcmp(rbuf, wbuf, 4096), 0);
  EXPECT_EQ(r.ctrl().counters().io_reads, reads_before + 1);

  const TimedSsdStats s = r.stats();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.dropped_by_reset, 0u);
  EXPECT_EQ(s.completions, s.commands);
  EXPECT_GT(s.engine_cycles, 0u);
  EXPECT_GT(s.link_upstream_bytes, 4096u);    // read data + CQEs + requests
  EXPECT_GT(s.link_downstream_bytes, 4096u);  // write data + SQEs
  EXPECT_GT(r.sim().trace().records(), 0u);
}

TEST_F(TimedSsdTest, QueueDepthOneLatencyIsStable) {
  // Every QD1 read lands in a plausible window and the CQE is never seen a microsecond in.
  Rig& r = make(small_p4800x(), 5);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(4096);
  SimTime total = 0;
  constexpr int kReads = 40;
  for (int i = 0; i < kReads; ++i) {
    const uint16_t cid = r.submit(q, rw(sp::nvm::kRead, uint64_t(i) * 8, 8, buf));
    r.sim().scan();
    const SimTime t0 = r.now();
    r.sim().run_until(t0 + kUs);
    ASSERT_FALSE(Rig::visible(q)) << i;
    auto c = r.await(q, cid, 100 * kUs);
    ASSERT_TRUE(c.has_value()) << i;
    ASSERT_TRUE(ok(*c));
    total += r.now() - t0;
  }
  const double mean_us = double(total) / kReads / kUs;
  std::printf("[figure] p4800x QD1 4 KiB read, %d reads: mean %.2f us\n", kReads, mean_us);
  EXPECT_GT(mean_us, 6.0);
  EXPECT_LT(mean_us, 12.0);
}

TEST_F(TimedSsdTest, WriteTakesEffectAtItsCompletionTime) {
  Rig& r = make(small_p4800x());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  nvme::NamespaceStore* store = r.ctrl().namespace_store(1);
  ASSERT_NE(store, nullptr);

  uint8_t* wbuf = r.alloc(8192);
  fill(wbuf, 8192, 2);
  std::vector<uint8_t> stored(8192);
  const uint16_t cid = r.submit(q, rw(sp::nvm::kWrite, 100, 16, wbuf, wbuf + 4096));
  r.sim().scan();
  const SimTime t0 = r.now();
  r.sim().run_until(t0 + 1 * kUs);
  ASSERT_TRUE(store->read(100 * 512, stored.data(), stored.size()));
  EXPECT_TRUE(std::all_of(stored.begin(), stored.end(), [](uint8_t b) { return b == 0; }))
      << "the write's data reached the namespace before its completion time";
  EXPECT_FALSE(Rig::visible(q));
  EXPECT_EQ(r.ctrl().counters().io_writes, 0u);

  auto c = r.await(q, cid, 100 * kUs);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(ok(*c));
  // Two 4 KiB units on the Optane media (5 us each, in parallel partitions) + firmware 2 us.
  EXPECT_GT(r.now() - t0, 3 * kUs);
  ASSERT_TRUE(store->read(100 * 512, stored.data(), stored.size()));
  EXPECT_EQ(std::memcmp(stored.data(), wbuf, 8192), 0);
  EXPECT_EQ(r.ctrl().counters().io_writes, 1u);
}

TEST_F(TimedSsdTest, ControllerResetDropsCommandsInFlight) {
  Rig& r = make(small_p4800x());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  nvme::NamespaceStore* store = r.ctrl().namespace_store(1);

  constexpr int kN = 8;
  uint8_t* bufs = r.alloc(kN * 4096);
  for (int i = 0; i < kN; ++i) {
    fill(bufs + i * 4096, 4096, 10 + i);
    r.submit(q, rw(i % 2 ? sp::nvm::kWrite : sp::nvm::kRead, 8 * uint64_t(i), 8, bufs + i * 4096));
  }
  ASSERT_TRUE(r.run_until_in_flight(kN)) << "in flight: " << r.stats().in_flight;
  EXPECT_FALSE(Rig::visible(q));
  const uint64_t posted = r.ctrl().counters().completions_posted;
  const uint64_t completions = r.stats().completions;

  r.disable();  // CC.EN = 0 with all of them in flight
  EXPECT_EQ(r.stats().dropped_by_reset, uint64_t{kN});
  EXPECT_EQ(r.stats().in_flight, 0u);
  r.sim().run_until(r.now() + 200 * kUs);
  EXPECT_FALSE(Rig::visible(q)) << "a CQE was posted after the reset";
  EXPECT_FALSE(Rig::visible(r.admin_q()));
  EXPECT_EQ(r.ctrl().counters().completions_posted, posted);
  EXPECT_EQ(r.stats().completions, completions);
  EXPECT_EQ(r.ctrl().counters().io_reads + r.ctrl().counters().io_writes, 0u);
  // The dropped writes never took effect.
  std::vector<uint8_t> stored(kN * 4096);
  ASSERT_TRUE(store->read(0, stored.data(), stored.size()));
  EXPECT_TRUE(std::all_of(stored.begin(), stored.end(), [](uint8_t b) { return b == 0; }));

  // The device works again after re-enabling, with fresh queues.
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q2 = r.io(1);
  uint8_t* wbuf = r.alloc(4096);
  uint8_t* rbuf = r.alloc(4096);
  fill(wbuf, 4096, 99);
  auto w = r.await(q2, r.submit(q2, rw(sp::nvm::kWrite, 8, 8, wbuf)));
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE(ok(*w));
  auto rd = r.await(q2, r.submit(q2, rw(sp::nvm::kRead, 8, 8, rbuf)));
  ASSERT_TRUE(rd.has_value());
  EXPECT_TRUE(ok(*rd));
  EXPECT_EQ(std::memcmp(rbuf, wbuf, 4096), 0);
  EXPECT_EQ(r.stats().dropped_by_reset, uint64_t{kN});
  EXPECT_EQ(r.stats().in_flight, 0u);
}

TEST_F(TimedSsdTest, ResetAndReenableBetweenScans) {
  // CC.EN 1 -> 0 -> 1 (and then an NVM subsystem reset) with commands in flight, the device
  // noticing only afterwards: the old commands are dropped, the new queues work.
  Rig& r = make(small_p4800x());
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  uint8_t* buf = r.alloc(4096);
  for (int i = 0; i < 4; ++i) r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf));
  ASSERT_TRUE(r.run_until_in_flight(4));
  r.ctrl().write32(sp::reg::kCc, r.ctrl().read32(sp::reg::kCc) & ~sp::cc::kEn);
  ASSERT_TRUE(r.enable());  // re-enabled before the device's next scan
  EXPECT_EQ(r.stats().dropped_by_reset, 4u);
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  for (int i = 0; i < 4; ++i) r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf));
  ASSERT_TRUE(r.run_until_in_flight(4));
  r.ctrl().write32(sp::reg::kNssr, sp::reg::kNssrReset);
  r.sim().scan();
  EXPECT_EQ(r.stats().dropped_by_reset, 8u);
  r.sim().run_until(r.now() + 100 * kUs);
  EXPECT_FALSE(Rig::visible(r.io(1)));
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  for (int i = 0; i < 20; ++i) {
    auto c = r.await(r.io(1), r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf)));
    ASSERT_TRUE(c.has_value()) << i;
    EXPECT_TRUE(ok(*c));
  }
  EXPECT_EQ(r.stats().in_flight, 0u);
}

TEST_F(TimedSsdTest, ResetWithCommandsQueuedButNotFetched) {
  // A one-command fetch window: the rest wait in the SQ when the reset comes.
  Profile p = small_p4800x();
  p.max_outstanding = 1;
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* buf = r.alloc(4096);
  for (int i = 0; i < 10; ++i) r.submit(q, rw(sp::nvm::kRead, 8 * uint64_t(i), 8, buf));
  ASSERT_TRUE(r.run_until_in_flight(1));
  r.sim().run_until(r.now() + 30 * kUs);  // a few complete
  r.drain(q);
  const size_t done = q.stash.size();
  EXPECT_GT(done, 0u);
  EXPECT_LT(done, 10u);
  r.disable();
  EXPECT_LE(r.stats().dropped_by_reset, 1u);
  r.sim().run_until(r.now() + 200 * kUs);
  EXPECT_FALSE(Rig::visible(q));
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 8));
  Queue& q2 = r.io(1);
  for (int i = 0; i < 20; ++i) {  // wraps the 8-entry queues twice
    auto c = r.await(q2, r.submit(q2, rw(sp::nvm::kRead, 0, 8, buf)));
    ASSERT_TRUE(c.has_value()) << i;
    EXPECT_TRUE(ok(*c));
  }
}

TEST_F(TimedSsdTest, DeleteSqWithACommandInFlight) {
  // A slow read (50 us of media) is in flight when the host deletes its SQ (and then its
  // CQ). The read must not complete into another queue, and the device must go on working.
  Profile p = small_p4800x();
  p.optane.read = 50 * kUs;
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  ASSERT_TRUE(r.create_io_queue_pair(2, 16));
  uint8_t* buf = r.alloc(4096);
  const uint16_t slow = r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf));
  ASSERT_TRUE(r.run_until_in_flight(1));
  sp::SubmissionEntry del{};
  del.opcode = sp::admin::kDeleteIoSq;
  del.cdw10 = 1;
  auto d = r.admin(del);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(ok(*d));
  del.opcode = sp::admin::kDeleteIoCq;
  d = r.admin(del);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(ok(*d));
  r.sim().run_until(r.now() + 200 * kUs);  // past the read's completion time
  EXPECT_FALSE(r.take(r.io(1), slow).has_value());
  EXPECT_FALSE(Rig::visible(r.admin_q())) << "the dropped read completed into the admin CQ";
  EXPECT_EQ(r.stats().in_flight, 0u);
  // Admin and the other pair still work.
  for (int i = 0; i < 40; ++i) {
    auto c = r.admin(get_features(sp::feature::kArbitration));
    ASSERT_TRUE(c.has_value()) << i;
    ASSERT_TRUE(ok(*c));
  }
  auto c = r.await(r.io(2), r.submit(r.io(2), rw(sp::nvm::kRead, 0, 8, buf)));
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(ok(*c));
  // The pair can be created again and used.
  ASSERT_TRUE(r.create_io_queue_pair(1, 16));
  for (int i = 0; i < 20; ++i) {
    auto e = r.await(r.io(1), r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf)), kMs);
    ASSERT_TRUE(e.has_value()) << i;
    EXPECT_TRUE(ok(*e));
  }
}

TEST_F(TimedSsdTest, DeleteSqKeepCqWithACommandInFlight) {
  // As above, but the CQ stays and a new SQ is bound to it.
  Profile p = small_p4800x();
  p.optane.read = 50 * kUs;
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 4));
  uint8_t* buf = r.alloc(4096);
  r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf));
  ASSERT_TRUE(r.run_until_in_flight(1));
  sp::SubmissionEntry del{};
  del.opcode = sp::admin::kDeleteIoSq;
  del.cdw10 = 1;
  auto d = r.admin(del);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(ok(*d));
  r.sim().run_until(r.now() + 200 * kUs);
  EXPECT_FALSE(Rig::visible(r.io(1)));
  EXPECT_FALSE(Rig::visible(r.admin_q()));
  // A new SQ 1 on the same CQ: a 4-entry CQ holds 3 entries; a leaked reservation would
  // leave room for fewer.
  Queue& q = r.io(1);
  q.sq = reinterpret_cast<sp::SubmissionEntry*>(r.alloc(4 * 64));
  q.sq_tail = 0;
  sp::SubmissionEntry sq{};
  sq.opcode = sp::admin::kCreateIoSq;
  sq.dptr.prp.prp1 = Rig::iova(q.sq);
  sq.cdw10 = 3u << 16 | 1;
  sq.cdw11 = 1u | 1u << 16;
  auto cs = r.admin(sq);
  ASSERT_TRUE(cs.has_value());
  ASSERT_TRUE(ok(*cs));
  // (The dropped read's CQ slot stays reserved, in the engine and in the controller alike,
  // until the CQ is deleted: the engine has no input that cancels a reservation.)
  std::vector<uint16_t> cids;
  for (int i = 0; i < 3; ++i) cids.push_back(r.submit(q, rw(sp::nvm::kRead, 0, 8, buf)));
  for (uint16_t cid : cids) {
    auto e = r.await(q, cid, kMs);
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(ok(*e));
  }
  for (int i = 0; i < 10; ++i) {
    auto e = r.await(q, r.submit(q, rw(sp::nvm::kRead, 0, 8, buf)), kMs);
    ASSERT_TRUE(e.has_value()) << i;
  }
}

TEST_F(TimedSsdTest, DeleteSqBetweenExecutionAndPosting) {
  // The read executes, then (at the same simulated time, later in the same step) the Delete
  // I/O SQ does, before the queue engine has posted the read's entry. The read has taken
  // effect: its entry must still land in the CQ, ahead of the Delete's, in the slot the
  // engine chose.
  Profile p = small_null();
  p.firmware.cores = 2;
  p.firmware.read = 10 * kUs;
  p.firmware.admin = 10 * kUs - 50 * kNs;  // fetched 50 ns after the read: due with it
  Rig& r = make(p);
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 8));
  uint8_t* buf = r.alloc(4096);
  FILE* dump = std::tmpfile();
  ASSERT_NE(dump, nullptr);
  r.sim().trace().dump_to(dump);
  const SimTime start = (r.now() / kUs + 1) * kUs;
  r.sim().run_until(start);
  const uint16_t rd = r.submit(r.io(1), rw(sp::nvm::kRead, 0, 8, buf));
  r.sim().scan();
  r.sim().run_until(start + 50 * kNs);
  sp::SubmissionEntry del{};
  del.opcode = sp::admin::kDeleteIoSq;
  del.cdw10 = 1;
  const uint16_t dc = r.submit(r.admin_q(), del);
  r.sim().scan();
  auto d = r.await(r.admin_q(), dc);
  r.sim().trace().dump_to(nullptr);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(ok(*d));
  // Both fetched 50 ns apart, so due at the same time.
  std::rewind(dump);
  unsigned long long t;
  unsigned dev, kind, a, b, c;
  std::vector<unsigned long long> fetch_times;
  while (std::fscanf(dump, "%llu %u %u %u %u %u", &t, &dev, &kind, &a, &b, &c) == 6) {
    if (kind == static_cast<unsigned>(TraceKind::kFetch)) fetch_times.push_back(t);
  }
  std::fclose(dump);
  ASSERT_EQ(fetch_times.size(), 2u);
  EXPECT_EQ(fetch_times[1] - fetch_times[0], 50 * kNs);
  EXPECT_EQ(r.ctrl().counters().io_reads, 1u) << "the read executed";
  auto e = r.take(r.io(1), rd);
  ASSERT_TRUE(e.has_value()) << "an executed command's entry was lost";
  EXPECT_TRUE(ok(*e));
  EXPECT_EQ(r.stats().engine_mismatches, 0u);
  // A new SQ on the same CQ: engine and controller agree on its slots.
  Queue& q = r.io(1);
  q.sq = reinterpret_cast<sp::SubmissionEntry*>(r.alloc(8 * 64));
  q.sq_tail = 0;
  sp::SubmissionEntry sq{};
  sq.opcode = sp::admin::kCreateIoSq;
  sq.dptr.prp.prp1 = Rig::iova(q.sq);
  sq.cdw10 = 7u << 16 | 1;
  sq.cdw11 = 1u | 1u << 16;
  auto cs = r.admin(sq);
  ASSERT_TRUE(cs.has_value());
  ASSERT_TRUE(ok(*cs));
  for (int i = 0; i < 20; ++i) {
    auto x = r.await(q, r.submit(q, rw(sp::nvm::kRead, 0, 8, buf)), kMs);
    ASSERT_TRUE(x.has_value()) << i;
  }
  EXPECT_EQ(r.stats().engine_mismatches, 0u);
}

TEST_F(TimedSsdTest, LbaOutOfRangeIsAnErrorNotACrash) {
  // The timing model sees a command before the controller checks it: an LBA past the end
  // must still come back as LBA Out of Range, on every kind of media.
  for (const Profile& p : {small_nand(), small_p4800x(), small_null()}) {
    SCOPED_TRACE(p.name);
    Rig& r = make(p);
    ASSERT_TRUE(r.enable());
    ASSERT_TRUE(r.create_io_queue_pair(1, 16));
    Queue& q = r.io(1);
    uint8_t* buf = r.alloc(4096);
    const uint64_t blocks = p.controller.namespaces[0].size_bytes / 512;
    for (const uint64_t slba : {blocks, blocks - 4, blocks + 1000, uint64_t{1} << 40}) {
      for (uint8_t opc : {sp::nvm::kRead, sp::nvm::kWrite}) {
        auto c = r.await(q, r.submit(q, rw(opc, slba, 8, buf)), 10 * kMs);
        ASSERT_TRUE(c.has_value()) << "slba " << slba;
        EXPECT_EQ(sp::status::sct(c->status), sp::sct::kGeneric);
        EXPECT_EQ(sp::status::sc(c->status), sp::sc::kLbaOutOfRange) << "slba " << slba;
      }
    }
    // And the last 4 KiB in range works.
    auto c = r.await(q, r.submit(q, rw(sp::nvm::kWrite, blocks - 8, 8, buf)), 10 * kMs);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(ok(*c));
    c = r.await(q, r.submit(q, rw(sp::nvm::kRead, blocks - 8, 8, buf)), 10 * kMs);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(ok(*c));
    EXPECT_EQ(r.stats().engine_mismatches, 0u);
  }
}

TEST_F(TimedSsdTest, NandWriteCacheAndFlush) {
  Rig& r = make(small_nand());  // gen4-tlc's volatile cache: Flush must reach the media
  ASSERT_TRUE(r.enable());
  ASSERT_TRUE(r.create_io_queue_pair(1, 64));
  Queue& q = r.io(1);
  uint8_t* wbuf = r.alloc(4096);
  uint8_t* rbuf = r.alloc(4096);
  fill(wbuf, 4096, 5);
  // A write is acknowledged from the DRAM cache, long before a 500 us program.
  r.sim().scan();
  SimTime t0 = r.now();
  auto w = r.await(q, r.submit(q, rw(sp::nvm::kWrite, 800, 8, wbuf)), kMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE(ok(*w));
  EXPECT_LT(r.now() - t0, 50 * kUs);
  // A flush waits for the media: the buffered unit must be programmed (into the fresh drive's
  // SLC cache: tPROG of an SLC-mode program).
  t0 = r.now();
  auto f = r.await(q, r.submit(q, flush()), 10 * kMs);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(ok(*f));
  ASSERT_GT(r.profile().nand_timing.t_prog_slc, 0u);
  EXPECT_GE(r.now() - t0, r.profile().nand_timing.t_prog_slc);
  // Read back (from NAND: tR 38 us).
  t0 = r.now();
  auto rd = r.await(q, r.submit(q, rw(sp::nvm::kRead, 800, 8, rbuf)), kMs);
  ASSERT_TRUE(rd.has_value());
  EXPECT_TRUE(ok(*rd));
  EXPECT_EQ(std::memcmp(rbuf, wbuf, 4096), 0);
  EXPECT_GE(r.now() - t0, 38 * kUs);
  const TimedSsdStats s = r.stats();
  EXPECT_GE(s.nand_programs, 1u);
  EXPECT_GE(s.nand_reads, 1u);
  EXPECT_EQ(s.ftl.host_units_written, 1u);
}

// ----------------------------------------------------------------------- determinism ---

struct RunResult {
  uint64_t hash = 0, records = 0;
  SimTime end = 0;
};

// A fixed host workload (its own RNG): 2 queue pairs at QD 8, 300 mixed 4 KiB reads and
// writes; the host submits the next command when it sees a completion.
RunResult run_workload(const Profile& p, uint64_t seed) {
  Rig r(p, seed);
  RunResult out;
  if (!r.enable() || !r.create_io_queue_pair(1, 32) || !r.create_io_queue_pair(2, 32)) {
    ADD_FAILURE() << "set-up failed";
    return out;
  }
  std::mt19937_64 host_rng(1234);
  constexpr int kQd = 8, kTotal = 300;
  uint8_t* bufs = r.alloc(2 * kQd * 4096);
  const uint64_t units = p.controller.namespaces[0].size_bytes / 4096;
  int submitted = 0, completed = 0;
  std::vector<std::vector<int>> free_bufs(3);
  for (int i = 0; i < kQd; ++i) {
    free_bufs[1].push_back(i);
    free_bufs[2].push_back(kQd + i);
  }
  std::vector<std::vector<std::pair<uint16_t, int>>> busy(3);
  auto submit_some = [&] {
    for (uint16_t q = 1; q <= 2; ++q) {
      while (!free_bufs[q].empty() && submitted < kTotal) {
        const int b = free_bufs[q].back();
        free_bufs[q].pop_back();
        const bool write = host_rng() % 3 == 0;
        const uint64_t lba = (host_rng() % units) * 8;
        if (write) fill(bufs + b * 4096, 4096, uint32_t(lba));
        busy[q].emplace_back(
            r.submit(r.io(q), rw(write ? sp::nvm::kWrite : sp::nvm::kRead, lba, 8, bufs + b * 4096)),
            b);
        ++submitted;
      }
    }
    r.sim().scan();
  };
  submit_some();
  while (completed < kTotal && r.now() < 100 * kMs) {
    r.sim().run_until(r.now() + 100 * kUs, /*stop_at_completion=*/true);
    for (uint16_t q = 1; q <= 2; ++q) {
      r.drain(r.io(q));
      for (auto& [c, t] : r.io(q).stash) {
        EXPECT_TRUE(ok(c));
        auto it = std::find_if(busy[q].begin(), busy[q].end(),
                               [&](const auto& e) { return e.first == c.cid; });
        if (it == busy[q].end()) {
          ADD_FAILURE() << "unknown cid " << c.cid;
          continue;
        }
        free_bufs[q].push_back(it->second);
        busy[q].erase(it);
        ++completed;
      }
      r.io(q).stash.clear();
    }
    submit_some();
  }
  EXPECT_EQ(completed, kTotal);
  EXPECT_EQ(r.stats().engine_mismatches, 0u);
  out.hash = r.sim().trace().hash();
  out.records = r.sim().trace().records();
  out.end = r.now();
  return out;
}

TEST(TimedSsdDeterminism, SameSeedSameTrace) {
  const Profile p = small_p4800x();
  const RunResult a = run_workload(p, 7);
  const RunResult b = run_workload(p, 7);
  EXPECT_GT(a.records, 600u);  // fetches + completions + doorbells
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.records, b.records);
  EXPECT_EQ(a.end, b.end);
}

TEST(TimedSsdDeterminism, DifferentSeedsDifferentTrace) {
  const Profile p = small_p4800x();
  ASSERT_GT(p.optane.read_stddev, 0u);
  const RunResult a = run_workload(p, 7);
  const RunResult b = run_workload(p, 8);
  EXPECT_NE(a.hash, b.hash);
}

TEST(TimedSsdDeterminism, SeedDoesNotMatterWithoutJitter) {
  Profile p = small_p4800x();
  p.optane.read_stddev = p.optane.write_stddev = 0;
  EXPECT_EQ(run_workload(p, 7).hash, run_workload(p, 8).hash);
}

TEST(TimedSsdDeterminism, RtlEngineIsCycleEquivalent) {
  for (const Profile& timed : {small_p4800x(), small_null()}) {
    SCOPED_TRACE(timed.name);
    Profile rtl = timed;
    rtl.fidelity = Fidelity::kRtl;
    const RunResult a = run_workload(timed, 11);
    const RunResult b = run_workload(rtl, 11);
    EXPECT_EQ(a.hash, b.hash);
    EXPECT_EQ(a.records, b.records);
    EXPECT_EQ(a.end, b.end);
  }
}

TEST(TimedSsdSimulation, AddDeviceChecks) {
  Profile p = small_null();
  nvme::RegionDmaSpace dma;
  auto c = nvme::Controller::create(p.controller, dma);
  ASSERT_TRUE(c.ok()) << c.error();
  {
    Simulation sim(1);
    Profile f = p;
    f.fidelity = Fidelity::kFunctional;
    auto r = sim.add_device(f, *c.value());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("functional"), std::string::npos) << r.error();
    Profile bad = p;
    bad.controller.max_io_queue_pairs = 40;
    EXPECT_FALSE(sim.add_device(bad, *c.value()).ok());
    auto ok_dev = sim.add_device(p, *c.value());
    ASSERT_TRUE(ok_dev.ok()) << ok_dev.error();
    EXPECT_EQ(ok_dev.value(), 0u);
    EXPECT_EQ(sim.device_count(), 1u);
    sim.run_until(kUs);
    EXPECT_EQ(sim.now(), kUs);
    EXPECT_FALSE(sim.add_device(p, *c.value()).ok()) << "added after the simulation ran";
  }
}

}  // namespace
}  // namespace pollux::emu::timing::timed_ssd_testing
