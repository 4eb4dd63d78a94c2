// Differential test: the verilated RTL and the reference model get identical random, host-like
// inputs (stimulus.h) and must give identical outputs at every edge. Prints "seed=N"; replay a
// failure with POLLUX_SEED=N (POLLUX_DIFF_CYCLES=M changes the length). Coverage counters make
// sure the run exercised every rule, so it cannot pass by doing nothing.
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "emulator/rtl/queue_engine.h"
#include "emulator/rtl/queue_engine_ref.h"
#include "emulator/rtl/rtl_queue_engine.h"
#include "emulator/rtl/stimulus.h"
#include "gtest/gtest.h"

namespace pollux::emu::rtl {
namespace {

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kDefaultCycles = 1'000'000;  // TSan is ~30x slower, and this test has one thread
#else
constexpr uint64_t kDefaultCycles = 4'000'000;
#endif

#define COVERAGE(X)                                                                   \
  X(grants_rr) X(grants_admin) X(grants_urgent) X(grants_high) X(grants_medium)       \
  X(grants_low) X(admin_preempts) X(urgent_starves_wrr) X(wrr_contended)              \
  X(burst_continued) X(burst_limit_reached) X(unlimited_burst_grants) X(sq_wraps)     \
  X(cq_wraps) X(cq_full_stalls) X(fetch_not_ready_stalls) X(big_queue_grants)         \
  X(completions) X(completions_refused) X(grant_and_cpl_same_cq) X(db_to_granted_sq)  \
  X(cfg_to_granted_queue) X(invalid_doorbells) X(sq_deletes) X(cq_deletes)            \
  X(arb_writes) X(resets)

struct Coverage {
#define FIELD(name) uint64_t name = 0;
  COVERAGE(FIELD)
#undef FIELD
};

// What the reference model's state says before an edge, for the coverage counters.
struct Before {
  uint32_t elig = 0;
  uint32_t cls[RefQueueEngine::kRings] = {};  // eligible SQs by priority (SQ 0 excluded)
  RefQueueEngine::Arb arb;
  int grant = -1;  // SQ that wins if fetch_ready
  unsigned grant_prio = 0, grant_cq = 0, grant_sq_size = 0;
  bool cq_full_stall = false;
  unsigned cpl_cq_size = 0;
  bool invalid_db = false, sq_delete = false, cq_delete = false;
};

Before Observe(const RefQueueEngine& ref, const QueueEngineInputs& in) {
  Before b;
  b.elig = ref.eligible();
  b.arb = ref.arb();
  for (uint32_t m = b.elig & ~1u; m != 0; m &= m - 1) {
    const unsigned q = std::countr_zero(m);
    b.cls[ref.sq(q).prio] |= 1u << q;
  }
  if (b.elig != 0) {
    b.grant = int(ref.next_grant());
    const RefQueueEngine::Sq& s = ref.sq(b.grant);
    b.grant_prio = s.prio;
    b.grant_cq = s.cqid;
    b.grant_sq_size = s.size;
  }
  for (unsigned q = 0; q < kQueues && in.fetch_ready; ++q) {
    const RefQueueEngine::Sq& s = ref.sq(q);
    const bool cq_full = ref.cq(s.cqid).en && !(ref.cq_room() >> s.cqid & 1);
    b.cq_full_stall |= s.en && s.head != s.tail && cq_full;
  }
  if (in.cpl_valid && in.cpl_cqid < kQueues) b.cpl_cq_size = ref.cq(in.cpl_cqid).size;
  if (in.db_valid) {
    const unsigned q = in.db_qid;
    b.invalid_db = q >= kQueues || (in.db_cq ? !ref.cq(q).en || in.db_value > ref.cq(q).size
                                             : !ref.sq(q).en || in.db_value > ref.sq(q).size);
  }
  if (in.cfg_valid && !in.cfg_enable && in.cfg_qid < kQueues) {
    b.sq_delete = !in.cfg_cq && ref.sq(in.cfg_qid).en;
    b.cq_delete = in.cfg_cq && ref.cq(in.cfg_qid).en;
  }
  return b;
}

void Count(Coverage& c, const Before& b, const QueueEngineInputs& in, const QueueEngineOutputs& o) {
  c.resets += in.reset;
  c.arb_writes += in.arb_valid;
  c.invalid_doorbells += b.invalid_db;
  c.sq_deletes += b.sq_delete;
  c.cq_deletes += b.cq_delete;
  c.fetch_not_ready_stalls += !in.fetch_ready && !in.reset && b.elig != 0;
  c.cq_full_stalls += b.cq_full_stall && !in.reset;
  if (in.cpl_valid) (o.cpl_valid ? c.completions : c.completions_refused) += 1;
  c.cq_wraps += o.cpl_valid && o.cpl_slot == b.cpl_cq_size;
  if (!o.fetch_valid) return;

  const unsigned sq = o.fetch_sqid;
  c.sq_wraps += o.fetch_slot == b.grant_sq_size;
  c.big_queue_grants += b.grant_sq_size >= 1023;
  c.grant_and_cpl_same_cq += o.cpl_valid && o.cpl_cqid == b.grant_cq;
  c.db_to_granted_sq += in.db_valid && !in.db_cq && in.db_qid == sq;
  c.cfg_to_granted_queue += in.cfg_valid && in.cfg_qid == (in.cfg_cq ? b.grant_cq : sq);
  c.unlimited_burst_grants += b.arb.burst == 7;
  const uint32_t wrr_classes = b.cls[1] | b.cls[2] | b.cls[3];
  uint32_t ring_mask;
  unsigned ring;
  if (!b.arb.wrr) {
    ++c.grants_rr;
    ring = 0;
    ring_mask = b.elig;
  } else if (sq == 0) {
    ++c.grants_admin;
    c.admin_preempts += (b.elig & ~1u) != 0;
    return;
  } else {
    ring = b.grant_prio;
    ring_mask = b.cls[ring];
    uint64_t* by_class[] = {&c.grants_urgent, &c.grants_high, &c.grants_medium, &c.grants_low};
    ++*by_class[ring];
    c.urgent_starves_wrr += ring == 0 && wrr_classes != 0;
    c.wrr_contended += ring != 0 && (wrr_classes & ~b.cls[ring]) != 0;
  }
  // Burst: the turn holder kept its turn against competition, or lost it to the limit.
  const unsigned holder = b.arb.ptr[ring];
  const bool in_turn = b.arb.count[ring] != 0 && (ring_mask >> holder & 1);
  c.burst_continued += in_turn && sq == holder && std::popcount(ring_mask) > 1;
  c.burst_limit_reached += in_turn && sq != holder;
}

TEST(QueueEngineDiffTest, RtlMatchesReferenceCycleByCycle) {
  const uint64_t seed = EnvOr("POLLUX_SEED", 20261122);
  const uint64_t cycles = EnvOr("POLLUX_DIFF_CYCLES", kDefaultCycles);
  std::printf("seed=%" PRIu64 " cycles=%" PRIu64 "\n", seed, cycles);
  std::fflush(stdout);

  RefQueueEngine ref;
  RtlQueueEngine rtl;
  Stimulus stimulus(seed);
  Coverage cov;
  constexpr unsigned kHistory = 16;
  QueueEngineInputs history[kHistory];
  for (uint64_t cycle = 0; cycle < cycles; ++cycle) {
    const QueueEngineInputs in = stimulus.next(ref);
    history[cycle % kHistory] = in;
    const Before before = Observe(ref, in);
    const QueueEngineOutputs& want = ref.tick(in);
    const QueueEngineOutputs& got = rtl.tick(in);
    if (!SameOutputs(want, got)) {
      for (uint64_t c = cycle >= kHistory ? cycle - kHistory + 1 : 0; c < cycle; ++c) {
        std::printf("  cycle %" PRIu64 ": %s\n", c, Describe(history[c % kHistory]).c_str());
      }
      FAIL() << "mismatch at cycle " << cycle << " (seed=" << seed << ")\n  inputs: "
             << Describe(in) << "\n  ref:    " << Describe(want) << "\n  rtl:    "
             << Describe(got);
    }
    Count(cov, before, in, want);
  }

#define CHECK(name)                                                        \
  std::printf("  %-24s %" PRIu64 "\n", #name, cov.name);                  \
  EXPECT_GT(cov.name, 0u) << #name " never happened: the stimulus misses it";
  COVERAGE(CHECK)
#undef CHECK
}

}  // namespace
}  // namespace pollux::emu::rtl
