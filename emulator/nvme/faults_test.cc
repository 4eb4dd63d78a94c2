// Device-side fault injection: the FaultInjector's rule matching and bad blocks on their own,
// then each fault action through the functional controller, driven by the test host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emulator/nvme/faults.h"
#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

constexpr uint16_t kUnrecovered =
    sp::status::make(sp::sct::kMediaError, sp::sc_media::kUnrecoveredReadError);
constexpr uint16_t kWriteFault = sp::status::make(sp::sct::kMediaError, sp::sc_media::kWriteFault);

sp::SubmissionEntry read_cmd(uint64_t slba, uint32_t nlb, uint32_t nsid = 1) {
  return TestHost::rw(sp::nvm::kRead, nsid, slba, nlb, 0);
}
sp::SubmissionEntry write_cmd(uint64_t slba, uint32_t nlb, uint32_t nsid = 1) {
  return TestHost::rw(sp::nvm::kWrite, nsid, slba, nlb, 0);
}

FaultRule status_rule(int opcode, uint64_t lo, uint64_t hi, uint16_t status = kUnrecovered) {
  FaultRule r;
  r.action = FaultAction::kStatus;
  r.opcode = opcode;
  r.lba_lo = lo;
  r.lba_hi = hi;
  r.status = status;
  return r;
}

// ------------------------------------------------------------------ FaultInjector ---

TEST(FaultInjector, OpcodeNsidAndLbaOverlap) {
  FaultInjector f;
  ASSERT_TRUE(f.add(status_rule(sp::nvm::kRead, 100, 199)).ok());
  EXPECT_FALSE(f.match(read_cmd(90, 10)).has_value());   // 90..99: just below
  EXPECT_TRUE(f.match(read_cmd(90, 11)).has_value());    // 90..100: overlaps the first LBA
  EXPECT_TRUE(f.match(read_cmd(150, 1)).has_value());
  EXPECT_TRUE(f.match(read_cmd(199, 8)).has_value());    // 199..206: overlaps the last LBA
  EXPECT_TRUE(f.match(read_cmd(50, 256)).has_value());   // 50..305: covers the range
  EXPECT_FALSE(f.match(read_cmd(200, 1)).has_value());   // just above
  EXPECT_FALSE(f.match(write_cmd(150, 1)).has_value());  // other opcode
  EXPECT_EQ(f.hits(), 4u);
  EXPECT_EQ(f.hits(FaultAction::kStatus), 4u);  // by class: all four were status rules
  EXPECT_EQ(f.hits(FaultAction::kNeverComplete), 0u);

  FaultInjector g;
  FaultRule r = status_rule(-1, 0, ~0ull);
  r.nsid = 2;
  ASSERT_TRUE(g.add(r).ok());
  EXPECT_FALSE(g.match(read_cmd(0, 1, 1)).has_value());
  EXPECT_TRUE(g.match(read_cmd(0, 1, 2)).has_value());
  EXPECT_TRUE(g.match(write_cmd(7, 1, 2)).has_value());  // any opcode
  sp::SubmissionEntry flush{};
  flush.opcode = sp::nvm::kFlush;
  flush.nsid = 2;
  EXPECT_TRUE(g.match(flush).has_value());  // no LBA range: matches any range

  FaultInjector h;
  ASSERT_TRUE(h.add(status_rule(-1, 10, 20)).ok());
  EXPECT_TRUE(h.match(flush).has_value()) << "a command without an LBA range matches a ranged rule";
}

TEST(FaultInjector, HitCarriesActionStatusAndDelay) {
  FaultInjector f;
  FaultRule r;
  r.action = FaultAction::kDelay;
  r.delay_ns = 12345;
  ASSERT_TRUE(f.add(r).ok());
  const auto hit = f.match(read_cmd(0, 1));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->action, FaultAction::kDelay);
  EXPECT_EQ(hit->delay_ns, 12345u);

  FaultInjector g;
  ASSERT_TRUE(g.add(status_rule(-1, 0, ~0ull, kWriteFault | 1)).ok());  // phase bit ignored
  const auto h2 = g.match(write_cmd(0, 1));
  ASSERT_TRUE(h2);
  EXPECT_EQ(h2->action, FaultAction::kStatus);
  EXPECT_EQ(h2->status, kWriteFault);
}

TEST(FaultInjector, CountRetiresTheRule) {
  FaultInjector f;
  FaultRule r = status_rule(sp::nvm::kRead, 0, ~0ull);
  r.count = 3;
  ASSERT_TRUE(f.add(r).ok());
  int hits = 0;
  for (int i = 0; i < 10; ++i) hits += f.match(read_cmd(i, 1)) ? 1 : 0;
  EXPECT_EQ(hits, 3);
  EXPECT_EQ(f.hits(), 3u);
  EXPECT_TRUE(f.empty()) << "the retired rule is gone";

  // A retired rule gives way to the next one.
  FaultInjector g;
  FaultRule first = status_rule(-1, 0, ~0ull, kWriteFault);
  first.count = 1;
  ASSERT_TRUE(g.add(first).ok());
  ASSERT_TRUE(g.add(status_rule(-1, 0, ~0ull, kUnrecovered)).ok());
  EXPECT_EQ(g.match(read_cmd(0, 1))->status, kWriteFault);
  EXPECT_EQ(g.match(read_cmd(0, 1))->status, kUnrecovered);
  EXPECT_EQ(g.match(read_cmd(0, 1))->status, kUnrecovered);
}

TEST(FaultInjector, ProbabilityZeroAndOne) {
  FaultInjector never(3), always(3);
  FaultRule r = status_rule(-1, 0, ~0ull);
  r.probability = 0.0;
  ASSERT_TRUE(never.add(r).ok());
  r.probability = 1.0;
  ASSERT_TRUE(always.add(r).ok());
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(never.match(read_cmd(i, 1)).has_value());
    EXPECT_TRUE(always.match(read_cmd(i, 1)).has_value());
  }
}

TEST(FaultInjector, ProbabilityHalfIsReproducibleForASeed) {
  const uint64_t seed = 0x5eed1234;
  std::printf("fault injector seed %#llx\n", static_cast<unsigned long long>(seed));
  auto sequence = [](uint64_t s) {
    FaultInjector f(s);
    FaultRule r = status_rule(-1, 0, ~0ull);
    r.probability = 0.5;
    EXPECT_TRUE(f.add(r).ok());
    std::vector<bool> hits;
    for (int i = 0; i < 400; ++i) hits.push_back(f.match(read_cmd(i, 1)).has_value());
    return hits;
  };
  const std::vector<bool> a = sequence(seed), b = sequence(seed);
  EXPECT_EQ(a, b) << "same seed, same hit sequence";
  const auto n = std::count(a.begin(), a.end(), true);
  EXPECT_GT(n, 140);
  EXPECT_LT(n, 260);
  EXPECT_NE(a, sequence(seed + 1)) << "another seed, another sequence";
  // reseed() restarts the sequence.
  FaultInjector f(seed + 99);
  FaultRule r = status_rule(-1, 0, ~0ull);
  r.probability = 0.5;
  ASSERT_TRUE(f.add(r).ok());
  f.reseed(seed);
  std::vector<bool> c;
  for (int i = 0; i < 400; ++i) c.push_back(f.match(read_cmd(i, 1)).has_value());
  EXPECT_EQ(a, c);
}

TEST(FaultInjector, AddRejectsBadRules) {
  FaultInjector f;
  FaultRule r = status_rule(-1, 0, ~0ull);
  r.probability = 2.0;
  EXPECT_FALSE(f.add(r).ok());
  r.probability = -0.1;
  EXPECT_FALSE(f.add(r).ok());
  r.probability = 0.5;
  r.lba_lo = 10;
  r.lba_hi = 9;
  EXPECT_FALSE(f.add(r).ok());
  r.lba_hi = 10;  // a single LBA is fine
  EXPECT_TRUE(f.add(r).ok());
  FaultRule s = status_rule(-1, 0, ~0ull, 0);
  EXPECT_FALSE(f.add(s).ok()) << "status rule with success status";
  s.status = 1;  // only the phase bit: still success
  EXPECT_FALSE(f.add(s).ok());
  s.action = FaultAction::kDelay;  // non-status rules need no status
  EXPECT_TRUE(f.add(s).ok());
  FaultRule o = status_rule(0x100, 0, ~0ull);
  EXPECT_FALSE(f.add(o).ok());
  o.opcode = -2;
  EXPECT_FALSE(f.add(o).ok()) << "only -1 means any opcode";
}

TEST(FaultInjector, RemoveAndClear) {
  FaultInjector f;
  auto a = f.add(status_rule(sp::nvm::kRead, 0, 9));
  auto b = f.add(status_rule(sp::nvm::kRead, 10, 19));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value(), b.value());
  EXPECT_TRUE(f.match(read_cmd(5, 1)).has_value());
  EXPECT_TRUE(f.remove(a.value()));
  EXPECT_FALSE(f.remove(a.value())) << "already removed";
  EXPECT_FALSE(f.remove(12345));
  EXPECT_FALSE(f.match(read_cmd(5, 1)).has_value());
  EXPECT_TRUE(f.match(read_cmd(15, 1)).has_value());
  f.clear_rules();
  EXPECT_FALSE(f.match(read_cmd(15, 1)).has_value());
  EXPECT_TRUE(f.empty());
}

TEST(FaultInjector, BadBlocksAndHeal) {
  FaultInjector f;
  f.add_bad_block(1, 42);
  f.add_bad_block(1, 50);
  f.add_bad_block(2, 42);
  EXPECT_FALSE(f.empty());
  EXPECT_EQ(f.bad_blocks(), 3u);
  uint64_t first = 0;
  EXPECT_FALSE(f.has_bad_block(1, 0, 42, &first));  // 0..41
  EXPECT_TRUE(f.has_bad_block(1, 0, 43, &first));   // 0..42
  EXPECT_EQ(first, 42u);
  EXPECT_TRUE(f.has_bad_block(1, 42, 1, &first));
  EXPECT_TRUE(f.has_bad_block(1, 43, 8, &first));   // 43..50
  EXPECT_EQ(first, 50u);
  EXPECT_FALSE(f.has_bad_block(1, 43, 7, &first));  // 43..49
  EXPECT_FALSE(f.has_bad_block(1, 51, 1000, &first));
  EXPECT_FALSE(f.has_bad_block(3, 0, 1000, &first));  // other namespace
  EXPECT_TRUE(f.has_bad_block(2, 40, 4, &first));
  // A write of 40..45 heals 42 in namespace 1 only.
  f.heal(1, 40, 6);
  EXPECT_FALSE(f.has_bad_block(1, 0, 50, &first));
  EXPECT_TRUE(f.has_bad_block(1, 0, 51, &first));
  EXPECT_TRUE(f.has_bad_block(2, 42, 1, &first));
  EXPECT_EQ(f.bad_blocks(), 2u);
  f.heal(1, 51, 10);  // not covering 50
  EXPECT_EQ(f.bad_blocks(), 2u);
  f.clear_bad_blocks();
  EXPECT_EQ(f.bad_blocks(), 0u);
  EXPECT_TRUE(f.empty());
}

TEST(FaultInjector, ParseFaultStatus) {
  struct Named {
    const char* name;
    uint16_t status;
  };
  const Named names[] = {
      {"unrecovered_read_error", kUnrecovered},
      {"write_fault", kWriteFault},
      {"namespace_not_ready", sp::status::make(sp::sct::kGeneric, sp::sc::kNamespaceNotReady)},
      {"internal_error", sp::status::make(sp::sct::kGeneric, sp::sc::kInternalError)},
      {"data_transfer_error", sp::status::make(sp::sct::kGeneric, sp::sc::kDataTransferError)},
      {"aborted_by_request", sp::status::make(sp::sct::kGeneric, sp::sc::kAbortedByRequest)},
  };
  for (const Named& n : names) {
    auto s = parse_fault_status(n.name);
    ASSERT_TRUE(s.ok()) << n.name;
    EXPECT_EQ(s.value(), n.status) << n.name;
  }
  auto a = parse_fault_status("2:81");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value(), kUnrecovered);
  EXPECT_FALSE(sp::status::dnr(a.value()));
  auto b = parse_fault_status("0:4+dnr");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(sp::status::sct(b.value()), 0);
  EXPECT_EQ(sp::status::sc(b.value()), 4);
  EXPECT_TRUE(sp::status::dnr(b.value()));
  EXPECT_EQ(parse_fault_status("7:ff").value(), sp::status::make(7, 0xff));
  for (const char* bad : {"", "bogus", "Write_Fault", "0:0", "8:1", "2:100", "2:", ":81", "2:8g",
                          "x:1", "+dnr", "2:81+dn", "281"}) {
    auto s = parse_fault_status(bad);
    ASSERT_FALSE(s.ok()) << "'" << bad << "' parsed as " << s.value();
    for (const char* listed : {"unrecovered_read_error", "write_fault", "namespace_not_ready",
                               "internal_error", "data_transfer_error", "aborted_by_request"}) {
      EXPECT_NE(s.error().find(listed), std::string::npos) << s.error();
    }
  }
}

// ------------------------------------------------------------- through the controller ---

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(h.enable());
    ASSERT_TRUE(h.create_io_queue_pair(1, 64));
    buf = h.alloc(4096);
    log = h.alloc(4096);
  }
  Controller& ctrl() { return h.ctrl(); }
  HostQueue& q() { return h.queue(1); }
  sp::SubmissionEntry rw(uint8_t op, uint64_t slba, uint32_t nlb = 1, uint32_t nsid = 1) {
    return TestHost::rw(op, nsid, slba, nlb, TestHost::iova(buf));
  }
  sp::CompletionEntry write_pattern(uint64_t lba, uint8_t v) {
    std::memset(buf, v, 512);
    return h.io(1, rw(sp::nvm::kWrite, lba));
  }
  // Reads one block into buf (pre-filled with 0xAA).
  sp::CompletionEntry read_block(uint64_t lba) {
    std::memset(buf, 0xAA, 4096);
    return h.io(1, rw(sp::nvm::kRead, lba));
  }
  bool buf_is(uint8_t v, size_t n = 512) {
    for (size_t i = 0; i < n; ++i) {
      if (buf[i] != v) return false;
    }
    return true;
  }
  uint64_t smart_media_errors() {
    std::memset(log, 0, 4096);
    const auto c = h.admin(TestHost::get_log(sp::log::kSmartHealth, 512, TestHost::iova(log)));
    EXPECT_TRUE(ok(c));
    return reinterpret_cast<const sp::SmartHealthLog*>(log)->media_errors[0];
  }
  sp::ErrorLogEntry newest_error() {
    std::memset(log, 0, 4096);
    const auto c =
        h.admin(TestHost::get_log(sp::log::kErrorInformation, 4096, TestHost::iova(log)));
    EXPECT_TRUE(ok(c));
    return reinterpret_cast<const sp::ErrorLogEntry*>(log)[0];
  }
  // Polls the controller `n` times, reaping everything the queue shows.
  std::vector<sp::CompletionEntry> poll_reap(int n) {
    std::vector<sp::CompletionEntry> out;
    for (int i = 0; i < n; ++i) {
      ctrl().poll(64);
      while (auto c = h.reap(q())) out.push_back(*c);
    }
    return out;
  }

  TestHost h;
  uint8_t* buf = nullptr;
  uint8_t* log = nullptr;
};

TEST_F(Faults, StatusRuleFailsReadsInRangeWithoutMovingData) {
  ASSERT_TRUE(ok(write_pattern(150, 0x11)));
  ASSERT_TRUE(ok(write_pattern(300, 0x22)));
  ASSERT_TRUE(ctrl().faults().add(status_rule(sp::nvm::kRead, 100, 199)).ok());
  const uint64_t failed_before = ctrl().counters().failed_commands;

  const auto bad = read_block(150);
  EXPECT_EQ(sct_of(bad), sp::sct::kMediaError);
  EXPECT_EQ(sc_of(bad), 0x81);
  EXPECT_TRUE(buf_is(0xAA, 4096)) << "a failed read must not write the host buffer";
  EXPECT_EQ(ctrl().counters().failed_commands, failed_before + 1);
  const sp::ErrorLogEntry e = newest_error();
  EXPECT_EQ(e.status, kUnrecovered);
  EXPECT_EQ(e.sqid, 1);
  EXPECT_EQ(e.cid, bad.cid);
  EXPECT_EQ(e.nsid, 1u);

  const auto good = read_block(300);
  ASSERT_TRUE(ok(good));
  EXPECT_TRUE(buf_is(0x22));
  // Writes in the range are not matched by a read rule.
  EXPECT_TRUE(ok(write_pattern(150, 0x33)));
  EXPECT_FALSE(ok(read_block(150)));
  EXPECT_EQ(ctrl().fault_hits(), 2u);
}

TEST_F(Faults, CountTwoFailsExactlyTwice) {
  FaultRule r = status_rule(sp::nvm::kRead, 0, ~0ull);
  r.count = 2;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  EXPECT_FALSE(ok(read_block(1)));
  EXPECT_FALSE(ok(read_block(1)));
  EXPECT_TRUE(ok(read_block(1)));
  EXPECT_TRUE(ok(read_block(1)));
  EXPECT_EQ(ctrl().fault_hits(), 2u);
}

TEST_F(Faults, NamespaceFilter) {
  FaultRule r = status_rule(sp::nvm::kRead, 0, ~0ull);
  r.nsid = 2;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  EXPECT_TRUE(ok(read_block(3)));
  EXPECT_FALSE(ok(h.io(1, rw(sp::nvm::kRead, 3, 1, 2))));
}

TEST_F(Faults, WriteFaultLeavesOldData) {
  ASSERT_TRUE(ok(write_pattern(10, 0x5A)));
  ASSERT_TRUE(ctrl().faults().add(status_rule(sp::nvm::kWrite, 10, 10, kWriteFault)).ok());
  const auto w = write_pattern(10, 0xC3);
  EXPECT_EQ(sct_of(w), sp::sct::kMediaError);
  EXPECT_EQ(sc_of(w), sp::sc_media::kWriteFault);
  ASSERT_TRUE(ok(read_block(10)));
  EXPECT_TRUE(buf_is(0x5A)) << "the failed write must not change the media";
  EXPECT_TRUE(ok(write_pattern(11, 0xC3))) << "outside the rule's range";
}

TEST_F(Faults, BadBlockFailsReadsUntilRewritten) {
  ASSERT_TRUE(ok(write_pattern(41, 0x41)));
  ASSERT_TRUE(ok(write_pattern(42, 0x42)));
  const uint64_t media_before = smart_media_errors();
  ctrl().faults().add_bad_block(1, 42);

  std::memset(buf, 0xAA, 4096);
  const auto c = h.io(1, rw(sp::nvm::kRead, 40, 4));  // 40..43 covers 42
  EXPECT_EQ(sct_of(c), sp::sct::kMediaError);
  EXPECT_EQ(sc_of(c), sp::sc_media::kUnrecoveredReadError);
  EXPECT_TRUE(buf_is(0xAA, 2048));
  const sp::ErrorLogEntry e = newest_error();
  EXPECT_EQ(e.status, kUnrecovered);
  EXPECT_EQ(e.lba, 42u) << "the error log names the bad LBA";
  EXPECT_EQ(e.nsid, 1u);
  EXPECT_EQ(smart_media_errors(), media_before + 1);

  ASSERT_TRUE(ok(read_block(41)));
  EXPECT_TRUE(buf_is(0x41));
  // Namespace 2's LBA 42 is not bad.
  EXPECT_TRUE(ok(h.io(1, rw(sp::nvm::kRead, 42, 1, 2))));

  ASSERT_TRUE(ok(write_pattern(42, 0x24)));  // heals
  EXPECT_EQ(ctrl().faults().bad_blocks(), 0u);
  ASSERT_TRUE(ok(read_block(42)));
  EXPECT_TRUE(buf_is(0x24));
  EXPECT_EQ(smart_media_errors(), media_before + 1);
}

TEST_F(Faults, MediaStatusRuleCountsInSmart) {
  const uint64_t before = smart_media_errors();
  ASSERT_TRUE(ctrl().faults().add(status_rule(sp::nvm::kRead, 0, ~0ull)).ok());
  EXPECT_FALSE(ok(read_block(0)));
  ctrl().faults().clear_rules();
  EXPECT_EQ(smart_media_errors(), before + 1);
}

TEST_F(Faults, NeverCompleteHoldsOnlyThatCommand) {
  FaultRule r;
  r.action = FaultAction::kNeverComplete;
  r.opcode = sp::nvm::kRead;
  r.lba_lo = r.lba_hi = 7;
  r.count = 1;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  const uint16_t held = h.submit(q(), rw(sp::nvm::kRead, 7));
  const auto seen = poll_reap(300);
  EXPECT_TRUE(seen.empty()) << "a held command never completes";
  EXPECT_EQ(ctrl().sq_state(1).head, ctrl().sq_state(1).tail) << "it was fetched";
  // Later commands, the same LBA included, complete.
  for (int i = 0; i < 5; ++i) {
    const auto c = h.run(q(), rw(sp::nvm::kRead, 7));
    ASSERT_TRUE(c);
    EXPECT_TRUE(ok(*c));
    EXPECT_NE(c->cid, held);
  }
  EXPECT_TRUE(poll_reap(100).empty());
  EXPECT_TRUE(ok(h.admin(TestHost::get_features(sp::feature::kNumberOfQueues))));
}

TEST_F(Faults, DelayExecutesAtOnceAndReportsTheDelay) {
  ASSERT_TRUE(ok(write_pattern(3, 0x77)));
  FaultRule r;
  r.action = FaultAction::kDelay;
  r.opcode = sp::nvm::kRead;
  r.lba_lo = 0;
  r.lba_hi = 7;
  r.delay_ns = 200'000;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  // Time does not exist in the functional controller: the read completes, and the delay is
  // there for a timing model to apply.
  ASSERT_TRUE(ok(read_block(3)));
  EXPECT_TRUE(buf_is(0x77));
  EXPECT_EQ(ctrl().last_fault_delay_ns(), 200'000u);
  ASSERT_TRUE(ok(read_block(8)));
  EXPECT_EQ(ctrl().last_fault_delay_ns(), 0u);
  ASSERT_TRUE(ok(read_block(3)));
  EXPECT_EQ(ctrl().last_fault_delay_ns(), 200'000u);
  // An admin command executed afterwards has no delay of its own.
  ASSERT_TRUE(ok(h.admin(TestHost::get_features(sp::feature::kNumberOfQueues))));
  EXPECT_EQ(ctrl().last_fault_delay_ns(), 0u) << "a stale delay would postpone admin commands";
}

TEST_F(Faults, DuplicateCompletionPostsTheEntryTwice) {
  FaultRule r;
  r.action = FaultAction::kDuplicateCompletion;
  r.opcode = sp::nvm::kRead;
  r.count = 1;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  const uint16_t cid = h.submit(q(), rw(sp::nvm::kRead, 5));
  const auto seen = poll_reap(3);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].cid, cid);
  EXPECT_EQ(seen[1].cid, cid);
  EXPECT_TRUE(ok(seen[0]) && ok(seen[1]));
  EXPECT_EQ(seen[0].sqid, 1);
  // The next command completes once.
  const uint16_t cid2 = h.submit(q(), rw(sp::nvm::kRead, 5));
  const auto next = poll_reap(3);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].cid, cid2);
}

TEST_F(Faults, UnknownCidFlipsBit15) {
  FaultRule r;
  r.action = FaultAction::kUnknownCid;
  r.opcode = sp::nvm::kRead;
  r.count = 1;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  const uint16_t cid = h.submit(q(), rw(sp::nvm::kRead, 5));
  const auto seen = poll_reap(3);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].cid, cid);
  EXPECT_EQ(seen[0].cid, cid ^ 0x8000);
  EXPECT_TRUE(ok(seen[0]));
  const auto c = h.run(q(), rw(sp::nvm::kRead, 5));
  ASSERT_TRUE(c);
  EXPECT_TRUE(ok(*c));
}

TEST_F(Faults, StalePhaseHidesTheEntry) {
  FaultRule r;
  r.action = FaultAction::kStalePhase;
  r.opcode = sp::nvm::kRead;
  r.count = 1;
  ASSERT_TRUE(ctrl().faults().add(r).ok());
  const uint32_t slot = q().cq_head;
  const bool phase = q().phase;
  const uint16_t cid = h.submit(q(), rw(sp::nvm::kRead, 5));
  EXPECT_TRUE(poll_reap(5).empty()) << "the host's reap does not see a stale-phase entry";
  const sp::CompletionEntry raw = q().cq[slot];
  EXPECT_EQ(raw.cid, cid) << "but the entry is in the slot";
  EXPECT_EQ(raw.sqid, 1);
  EXPECT_EQ(sp::status::phase(raw.status), !phase);
  EXPECT_EQ(raw.status >> 1, 0) << "successful";
  EXPECT_EQ(ctrl().cq_state(1).tail, slot + 1) << "the device moved on";
  // The next entry lands behind it with the right phase; the host is stuck in front.
  const uint16_t cid2 = h.submit(q(), rw(sp::nvm::kRead, 6));
  EXPECT_TRUE(poll_reap(5).empty());
  const sp::CompletionEntry raw2 = q().cq[slot + 1];
  EXPECT_EQ(raw2.cid, cid2);
  EXPECT_EQ(sp::status::phase(raw2.status), phase);
}

FaultRule silent_rule(FaultAction action, int opcode, uint64_t shift = 0) {
  FaultRule r;
  r.action = action;
  r.opcode = opcode;
  r.shift = shift;
  r.count = 1;
  return r;
}

TEST_F(Faults, DropDataReadSucceedsWithoutTouchingTheBuffer) {
  ASSERT_TRUE(ok(write_pattern(7, 0x77)));
  ASSERT_TRUE(ctrl().faults().add(silent_rule(FaultAction::kDropData, sp::nvm::kRead)).ok());
  const uint64_t silent = ctrl().counters().silent_faults;
  const auto c = read_block(7);
  EXPECT_TRUE(ok(c)) << "the whole point: the host is told it worked";
  EXPECT_TRUE(buf_is(0xAA, 512)) << "no data reached the host buffer";
  EXPECT_EQ(ctrl().counters().silent_faults, silent + 1);
  ASSERT_TRUE(ok(read_block(7))) << "count 1: the next read is honest";
  EXPECT_TRUE(buf_is(0x77));
}

TEST_F(Faults, DropDataWriteSucceedsWithoutChangingTheMedia) {
  ASSERT_TRUE(ok(write_pattern(9, 0x19)));
  ASSERT_TRUE(ctrl().faults().add(silent_rule(FaultAction::kDropData, sp::nvm::kWrite)).ok());
  EXPECT_TRUE(ok(write_pattern(9, 0x91)));
  ASSERT_TRUE(ok(read_block(9)));
  EXPECT_TRUE(buf_is(0x19)) << "the acknowledged write never reached the media";
}

TEST_F(Faults, MisdirectedWriteLandsShiftBlocksAway) {
  ASSERT_TRUE(ok(write_pattern(100, 0x10)));
  ASSERT_TRUE(ok(write_pattern(108, 0x18)));
  ASSERT_TRUE(ctrl().faults().add(silent_rule(FaultAction::kMisdirect, sp::nvm::kWrite, 8)).ok());
  const uint64_t silent = ctrl().counters().silent_faults;
  EXPECT_TRUE(ok(write_pattern(100, 0xEE)));
  EXPECT_EQ(ctrl().counters().silent_faults, silent + 1);
  ASSERT_TRUE(ok(read_block(100)));
  EXPECT_TRUE(buf_is(0x10)) << "the addressed block kept its old data";
  ASSERT_TRUE(ok(read_block(108)));
  EXPECT_TRUE(buf_is(0xEE)) << "the data went 8 blocks away";
}

TEST_F(Faults, MisdirectedReadReturnsAnotherBlocksData) {
  ASSERT_TRUE(ok(write_pattern(200, 0x20)));
  ASSERT_TRUE(ok(write_pattern(201, 0x21)));
  // shift 0: the command's own length, the next range.
  ASSERT_TRUE(ctrl().faults().add(silent_rule(FaultAction::kMisdirect, sp::nvm::kRead, 0)).ok());
  ASSERT_TRUE(ok(read_block(200)));
  EXPECT_TRUE(buf_is(0x21)) << "block 201's data, reported as block 200's";
  ASSERT_TRUE(ok(read_block(200)));
  EXPECT_TRUE(buf_is(0x20));
}

TEST_F(Faults, MisdirectWrapsInsideTheNamespace) {
  const uint64_t last = 16 * 1024 * 1024 / 512 - 1;  // namespace 1: 16 MiB of 512 B blocks
  ASSERT_TRUE(ok(write_pattern(3, 0x03)));
  ASSERT_TRUE(ok(write_pattern(last, 0x0F)));
  ASSERT_TRUE(ctrl().faults().add(silent_rule(FaultAction::kMisdirect, sp::nvm::kRead, 4)).ok());
  const auto c = read_block(last);
  ASSERT_TRUE(ok(c)) << "a misdirected range stays a valid range";
  EXPECT_TRUE(buf_is(0x03)) << "last + 4 wraps to block 3";
}

TEST_F(Faults, FatalStatusStopsEverythingUntilReset) {
  ctrl().inject_fatal_status();
  EXPECT_TRUE(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kCfs);
  EXPECT_TRUE(ctrl().fatal());
  h.submit(q(), rw(sp::nvm::kRead, 1));
  EXPECT_TRUE(poll_reap(50).empty());
  EXPECT_FALSE(h.run(h.admin_queue(), TestHost::get_features(sp::feature::kNumberOfQueues), 50))
      << "admin commands don't complete either";
  h.disable();
  EXPECT_FALSE(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kCfs) << "CC.EN = 0 clears CFS";
  EXPECT_FALSE(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kRdy);
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 64));
  ASSERT_TRUE(ok(write_pattern(1, 0x61)));
  ASSERT_TRUE(ok(read_block(1)));
  EXPECT_TRUE(buf_is(0x61));
}

TEST_F(Faults, SpontaneousDisableNeedsAHostReset) {
  ASSERT_TRUE(ok(write_pattern(2, 0x62)));
  const uint64_t resets = ctrl().counters().resets;
  ctrl().inject_spontaneous_disable();
  EXPECT_FALSE(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kRdy) << "RDY drops";
  EXPECT_FALSE(h.ctrl().read32(sp::reg::kCsts) & sp::csts::kCfs);
  EXPECT_TRUE(h.ctrl().read32(sp::reg::kCc) & sp::cc::kEn) << "while CC.EN still reads 1";
  EXPECT_FALSE(ctrl().sq_state(1).exists) << "queues are gone";
  EXPECT_FALSE(ctrl().cq_state(1).exists);
  EXPECT_FALSE(ctrl().sq_state(0).exists);
  EXPECT_EQ(ctrl().counters().resets, resets + 1);
  // Nothing is accepted: doorbells of queues that do not exist are errors, nothing completes.
  const uint64_t db_errors = ctrl().counters().doorbell_errors;
  h.submit(q(), rw(sp::nvm::kRead, 2));
  EXPECT_GT(ctrl().counters().doorbell_errors, db_errors);
  EXPECT_TRUE(poll_reap(20).empty());
  // Recovery: CC.EN 1 -> 0 -> 1, queues again.
  h.disable();
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 64));
  ASSERT_TRUE(ok(read_block(2)));
  EXPECT_TRUE(buf_is(0x62)) << "data written before survives";
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
