// NVMe in-band authentication (DH-HMAC-CHAP) between Pollux's host (the driver's controller,
// ControllerOptions::dhchap_key / dhchap_ctrlr_key) and Pollux's target (a subsystem host with
// keys) in one process over 127.0.0.1: every hash with the null group and with ffdhe2048,
// unidirectional and bidirectional, keys with and without the NQN transformation; the
// admin queue and every I/O queue authenticate, and again after a controller reset; a wrong
// host key, a wrong controller key, a missing key, an unusable DH group — each refused on
// the side that must refuse it, with the reason, while the target keeps serving others.
#include <gtest/gtest.h>

#include <cstring>

#include "driver/nvme/dhchap.h"
#include "fabric/tcp/live_target.h"
#include "fabric/tcp/test_host.h"

namespace pollux::fabric::tcp::testing {
namespace {

namespace dh = nvme::dhchap;
namespace na = spec::nvme_auth;

constexpr const char* kHostNqn = "nqn.2026-11.io.pollux:auth-host";

std::string new_key(uint8_t hash, std::size_t len = 32) {
  auto k = dh::generate_key(hash, hash ? na::hash::length(hash) : len);
  EXPECT_TRUE(k.ok());
  return dh::format_key(*k);
}

target::HostKeys keys(const std::string& key, const std::string& ctrlr_key = "") {
  target::HostKeys k;
  k.key = *dh::parse_key(key);
  if (!ctrlr_key.empty()) k.ctrlr_key = *dh::parse_key(ctrlr_key);
  return k;
}

struct Auth : ::testing::Test {
  void SetUp() override { t = std::make_unique<LiveTarget>(); }
  // The subsystem (which allows any host) knows kHostNqn by these keys, and negotiates from
  // these lists.
  void configure(target::HostKeys k, std::vector<uint8_t> digests = dh::all_hashes(),
                 std::vector<uint8_t> groups = dh::all_dhgroups()) {
    t->on_target([&](target::Target& tg) {
      (void)tg.remove_host(t->nqn(), kHostNqn);
      ASSERT_TRUE(tg.add_host(t->nqn(), kHostNqn, std::move(k)).ok());
      target::AuthOptions o;
      o.digests = digests;
      o.dhgroups = groups;
      ASSERT_TRUE(tg.set_auth_options(o).ok());
    });
  }
  nvme::ControllerOptions host(const std::string& key, const std::string& ctrlr_key = "") {
    nvme::ControllerOptions o;
    o.hostnqn = kHostNqn;
    o.dhchap_key = key;
    o.dhchap_ctrlr_key = ctrlr_key;
    return o;
  }
  // Attach must fail; returns why.
  std::string refused(nvme::ControllerOptions o) {
    auto c = nvme::connect(*nvme::parse_transport_id(t->trid()), std::move(o));
    EXPECT_FALSE(c.ok());
    return c.ok() ? "" : c.error().message;
  }
  // The target's counters over every poll group.
  std::pair<uint64_t, uint64_t> target_counts() {
    uint64_t ok = 0, failed = 0;
    for (const auto& g : t->target().groups()) {
      ok += g->stats().authentications.load();
      failed += g->stats().authentication_failures.load();
    }
    return {ok, failed};
  }
  // A host without keys (another NQN) still does verified I/O.
  void others_still_served() {
    Host other(t->trid());
    ASSERT_TRUE(other.ok());
    fill(other.buf(0), 4096, 77);
    ASSERT_EQ(other.io(true, other.buf(0), 500, 8), 0);
    ASSERT_EQ(other.io(false, other.buf(8192), 500, 8), 0);
    EXPECT_EQ(std::memcmp(other.buf(0), other.buf(8192), 4096), 0);
    EXPECT_EQ(other.ctrl->stats().authentications.load(), 0u);
  }
  std::unique_ptr<LiveTarget> t;
};

void verified_io(Host& h, uint32_t seed) {
  fill(h.buf(0), 8192, seed);
  ASSERT_EQ(h.io(true, h.buf(0), seed * 16, 16), 0);
  ASSERT_EQ(h.io(false, h.buf(65536), seed * 16, 16), 0);
  EXPECT_EQ(std::memcmp(h.buf(0), h.buf(65536), 8192), 0);
}

TEST_F(Auth, EveryHashWithTheNullGroupAndFfdhe2048BothDirections) {
  uint32_t round = 0;
  for (uint8_t hash : {na::hash::kSha256, na::hash::kSha384, na::hash::kSha512}) {
    for (uint8_t group : {na::dhgroup::kNull, na::dhgroup::kFfdhe2048}) {
      for (bool bidirectional : {false, true}) {
        ++round;
        SCOPED_TRACE(std::string(dh::hash_name(hash)) + " " + dh::dhgroup_name(group) +
                     (bidirectional ? " bidirectional" : " unidirectional"));
        // Keys transformed with each hash, and one used as it is (hh 00).
        const std::string key = new_key(round % 2 ? hash : 0, 48);
        const std::string ckey = bidirectional ? new_key(hash) : "";
        configure(keys(key, bidirectional ? ckey : new_key(hash)), {hash}, {group});
        const auto [ok0, failed0] = target_counts();
        Host h(t->trid(), 64, host(key, ckey));
        ASSERT_TRUE(h.ok());
        // The admin queue and the I/O queue, each its own transaction.
        EXPECT_EQ(h.ctrl->stats().authentications.load(), 2u);
        EXPECT_EQ(target_counts().first, ok0 + 2);
        EXPECT_EQ(target_counts().second, failed0);
        verified_io(h, round);
      }
    }
  }
}

TEST_F(Auth, ControllerResetAuthenticatesEveryQueueAgain) {
  const std::string key = new_key(na::hash::kSha256), ckey = new_key(na::hash::kSha512);
  configure(keys(key, ckey), dh::all_hashes(), {na::dhgroup::kFfdhe3072});
  Host h(t->trid(), 64, host(key, ckey));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.ctrl->stats().authentications.load(), 2u);
  verified_io(h, 1);
  ASSERT_EQ(h.ctrl->reset(), 0);
  EXPECT_EQ(h.ctrl->stats().authentications.load(), 4u);
  verified_io(h, 2);
  // A second I/O queue authenticates when it connects.
  auto q2 = h.ctrl->alloc_io_qpair();
  ASSERT_TRUE(q2.ok()) << q2.error().message;
  EXPECT_EQ(h.ctrl->stats().authentications.load(), 5u);
  EXPECT_EQ(h.ctrl->free_io_qpair(std::move(q2).value()), 0);
}

TEST_F(Auth, WrongHostKeyIsRefusedByTheTarget) {
  configure(keys(new_key(na::hash::kSha256)));
  const auto before = target_counts();
  const std::string why = refused(host(new_key(na::hash::kSha256)));
  EXPECT_NE(why.find("AUTH_Failure1: authentication failed"), std::string::npos) << why;
  EXPECT_NE(why.find("queue 0"), std::string::npos) << why;
  EXPECT_EQ(target_counts().first, before.first);
  EXPECT_EQ(target_counts().second, before.second + 1);
  others_still_served();
}

TEST_F(Auth, WrongControllerKeyIsRefusedByTheHost) {
  const std::string key = new_key(na::hash::kSha384);
  configure(keys(key, new_key(na::hash::kSha384)), {na::hash::kSha384}, {na::dhgroup::kNull});
  const auto before = target_counts();
  const std::string why = refused(host(key, new_key(na::hash::kSha384)));
  EXPECT_NE(why.find("does not hold the key given as dhchap_ctrlr_key"), std::string::npos) << why;
  EXPECT_EQ(target_counts().first, before.first);  // it never counted the queue authenticated
  // The host's AUTH_Failure2 reached the target, which ended the association.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (target_counts().second == before.second && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(target_counts().second, before.second + 1);
  others_still_served();
}

TEST_F(Auth, NoKeyWhenTheSubsystemRequiresOne) {
  configure(keys(new_key(0)));
  const std::string why = refused(host(""));
  EXPECT_NE(why.find("requires in-band authentication"), std::string::npos) << why;
  EXPECT_NE(why.find("dhchap_key"), std::string::npos) << why;
  others_still_served();
}

TEST_F(Auth, BidirectionalAskedButTheTargetHasNoControllerKey) {
  const std::string key = new_key(na::hash::kSha512);
  configure(keys(key));
  const std::string why = refused(host(key, new_key(na::hash::kSha512)));
  EXPECT_NE(why.find("AUTH_Failure1: authentication failed"), std::string::npos) << why;
}

TEST_F(Auth, NoCommonDhGroupOrHash) {
  const std::string key = new_key(na::hash::kSha256);
  configure(keys(key), dh::all_hashes(), {na::dhgroup::kNull});
  auto o = host(key);
  o.dhchap_dhgroups = {na::dhgroup::kFfdhe2048};
  std::string why = refused(o);
  EXPECT_NE(why.find("DH group not usable"), std::string::npos) << why;
  configure(keys(key), {na::hash::kSha512}, dh::all_dhgroups());
  o = host(key);
  o.dhchap_digests = {na::hash::kSha256};
  why = refused(o);
  EXPECT_NE(why.find("hash function not usable"), std::string::npos) << why;
}

TEST_F(Auth, AHostKeyAloneDoesNotAuthenticateWhereNoneIsAsked) {
  // No keys on the target: the Connect asks nothing, the host does nothing.
  Host h(t->trid(), 64, host(new_key(na::hash::kSha256)));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.ctrl->stats().authentications.load(), 0u);
  // A host that wants the controller to prove itself still asks, and a subsystem with no key
  // for it cannot (Command Sequence Error, as SPDK answers).
  const std::string why = refused(host(new_key(0), new_key(0)));
  EXPECT_NE(why.find("AUTH_Negotiate"), std::string::npos) << why;
}

TEST_F(Auth, BadKeysFailTheAttachBeforeAnyConnection) {
  const std::string why = refused(host("DHHC-1:01:AAAA:"));
  EXPECT_NE(why.find("dhchap_key: DH-HMAC-CHAP secret"), std::string::npos) << why;
  const std::string why2 = refused(host(new_key(0), "DHHC-1:07:x:"));
  EXPECT_NE(why2.find("dhchap_ctrlr_key"), std::string::npos) << why2;
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
