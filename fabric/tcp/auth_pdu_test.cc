// The target's DH-HMAC-CHAP from a raw NVMe/TCP host that builds every message itself: before
// authenticating only Authentication Send/Receive are taken (others: Authentication Required);
// a correct transaction opens the queue; bad command fields fail only their command; short,
// oversized and unknown messages, a wrong transaction id, messages out of turn, an AL too small
// and a host that goes silent are each answered with AUTH_Failure1 carrying the reason (or
// ended by the timeout) and end that association — its connection closes — while a host on
// another connection keeps doing verified I/O.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "driver/nvme/dhchap.h"
#include "fabric/tcp/live_target.h"
#include "fabric/tcp/raw_host.h"

namespace pollux::fabric::tcp::testing {
namespace {

namespace dh = nvme::dhchap;
namespace na = spec::nvme_auth;

constexpr const char* kRawNqn = "nqn.2026-11.io.pollux:raw";  // raw_host.h's connect_data

sn::SubmissionEntry auth_sqe(uint8_t fctype, uint16_t cid, uint32_t len, uint32_t sgl_len,
                             uint8_t secp = nf::kSecpNvme, uint8_t spsp0 = na::kSpsp0) {
  nf::AuthenticationCommand a{};
  a.opcode = nf::kOpcodeFabrics;
  a.flags = static_cast<uint8_t>(sn::kPsdtSglMptrContiguous << 6);
  a.cid = cid;
  a.fctype = fctype;
  a.sgl1 = fctype == nf::fctype::kAuthenticationSend ? nf::sgl::in_capsule(sgl_len)
                                                     : nf::sgl::transport(sgl_len);
  a.secp = secp;
  a.spsp0 = spsp0;
  a.spsp1 = na::kSpsp1;
  a.length = len;
  sn::SubmissionEntry e;
  std::memcpy(&e, &a, sizeof e);
  return e;
}

template <typename T>
std::vector<uint8_t> bytes(const T& v) {
  std::vector<uint8_t> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

std::vector<uint8_t> negotiate(uint16_t tid, std::vector<uint8_t> hashes,
                               std::vector<uint8_t> groups) {
  struct {
    na::NegotiateHeader h;
    na::ProtocolDescriptor d;
  } m{};
  m.h.auth_id = na::auth_id::kNegotiate;
  m.h.t_id = tid;
  m.h.napd = 1;
  m.d.authid = na::kProtocolDhchap;
  m.d.halen = static_cast<uint8_t>(hashes.size());
  m.d.dhlen = static_cast<uint8_t>(groups.size());
  std::copy(hashes.begin(), hashes.end(), m.d.idlist);
  std::copy(groups.begin(), groups.end(), m.d.idlist + na::kDhgroupIdsOffset);
  return bytes(m);
}

struct AuthPdu : ::testing::Test {
  void SetUp() override {
    target = std::make_unique<LiveTarget>();
    host = std::make_unique<Host>(target->trid());
    ASSERT_TRUE(host->ok());
    key = *dh::generate_key(na::hash::kSha256, 32);
    target->on_target([&](target::Target& tg) {
      target::HostKeys k;
      k.key = key;
      ASSERT_TRUE(tg.add_host(target->nqn(), kRawNqn, std::move(k)).ok());
      target::AuthOptions o;
      o.digests = {na::hash::kSha256};
      o.dhgroups = {na::dhgroup::kNull};
      ASSERT_TRUE(tg.set_auth_options(o).ok());
    });
  }
  void set_timeout(uint32_t ms) {
    target->on_target([&](target::Target& tg) {
      target::AuthOptions o = tg.auth_options();
      o.timeout_ms = ms;
      ASSERT_TRUE(tg.set_auth_options(o).ok());
    });
  }
  // Connect on queue `qid`: succeeds and asks for authentication (AUTHREQ.ATR). The CNTLID.
  uint16_t connect(Raw& r, uint16_t qid = 0, uint16_t cntlid = 0xffff) {
    r.handshake();
    const nf::ConnectData d = connect_data(target->nqn(), cntlid);
    r.send(capsule(connect_sqe(qid, 31), &d, sizeof d, false, false));
    const sn::CompletionEntry c = response(r);
    EXPECT_EQ(c.status, 0);
    EXPECT_EQ(nf::connect::authreq(c.dw0), nf::connect::kAuthreqAtr);
    return nf::connect::cntlid(c.dw0);
  }
  uint16_t send(Raw& r, const std::vector<uint8_t>& msg, uint16_t cid = 10) {
    r.send(capsule(auth_sqe(nf::fctype::kAuthenticationSend, cid, static_cast<uint32_t>(msg.size()),
                            static_cast<uint32_t>(msg.size())),
                   msg.data(), static_cast<uint32_t>(msg.size()), false, false));
    return response(r).status;
  }
  // Authentication Receive with AL `al`: the data the target sent (status in *status).
  std::vector<uint8_t> receive(Raw& r, uint32_t al, uint16_t* status, uint16_t cid = 11) {
    r.send(capsule(auth_sqe(nf::fctype::kAuthenticationReceive, cid, al, al), nullptr, 0, false,
                   false));
    std::vector<uint8_t> data;
    for (;;) {
      auto p = r.pdu();
      EXPECT_FALSE(p.empty()) << "no answer to Authentication Receive";
      if (p.empty()) return data;
      if (p[0] == nt::pdu::kC2hData) {
        nt::C2hData c;
        std::memcpy(&c, p.data(), sizeof c);
        data.insert(data.end(), p.begin() + c.ch.pdo, p.begin() + c.ch.pdo + c.datal);
        continue;
      }
      sn::CompletionEntry cqe;
      std::memcpy(&cqe, p.data() + 8, sizeof cqe);
      *status = cqe.status;
      return data;
    }
  }
  // The next Receive is AUTH_Failure1 with `reason`, then the connection ends; another host
  // still works.
  void expect_failure1(Raw& r, uint8_t reason, const char* what) {
    uint16_t st = 0xffff;
    auto d = receive(r, 64, &st);
    EXPECT_EQ(st, 0) << what;
    ASSERT_GE(d.size(), sizeof(na::Failure)) << what;
    na::Failure f;
    std::memcpy(&f, d.data(), sizeof f);
    EXPECT_EQ(f.auth_type, na::auth_type::kCommon) << what;
    EXPECT_EQ(f.auth_id, na::auth_id::kFailure1) << what;
    EXPECT_EQ(f.rescode, na::failure::kReasonFailed) << what;
    EXPECT_EQ(f.rescode_exp, reason) << what << ": " << dh::failure_reason(f.rescode_exp);
    expect_closed(r, what);
  }
  void expect_closed(Raw& r, const char* what) {
    EXPECT_TRUE(r.eof()) << what << ": the connection stays open";
    still_serving(what);
  }
  void still_serving(const char* what) {
    fill(host->buf(0), 8192, ++round);
    ASSERT_EQ(host->io(true, host->buf(0), 64, 16), 0) << "after " << what;
    ASSERT_EQ(host->io(false, host->buf(65536), 64, 16), 0) << "after " << what;
    EXPECT_EQ(std::memcmp(host->buf(0), host->buf(65536), 8192), 0) << "after " << what;
  }
  // A whole correct transaction (SHA-256, null group, unidirectional) on `r`.
  void authenticate(Raw& r, uint16_t tid) {
    ASSERT_EQ(send(r, negotiate(tid, {na::hash::kSha256}, {na::dhgroup::kNull})), 0);
    uint16_t st = 0xffff;
    auto c = receive(r, 4096, &st);
    ASSERT_EQ(st, 0);
    na::ChallengeHeader ch;
    ASSERT_GE(c.size(), sizeof ch + 32);
    std::memcpy(&ch, c.data(), sizeof ch);
    ASSERT_EQ(ch.auth_id, na::auth_id::kChallenge);
    ASSERT_EQ(ch.t_id, tid);
    ASSERT_EQ(ch.hashid, na::hash::kSha256);
    ASSERT_EQ(ch.dhvlen, 0);
    ASSERT_NE(ch.seqnum, 0u);
    const dh::ByteSpan c1(c.data() + sizeof ch, 32);
    const auto r1 = dh::response(dh::Role::kHost, ch.hashid, dh::transform(key, kRawNqn), c1, {},
                                 ch.seqnum, tid, 0, kRawNqn, target->nqn());
    ASSERT_EQ(send(r, reply(tid, r1)), 0);
    auto s1 = receive(r, 4096, &st);
    ASSERT_EQ(st, 0);
    ASSERT_GE(s1.size(), sizeof(na::Success1Header));
    EXPECT_EQ(s1[1], na::auth_id::kSuccess1);
    EXPECT_EQ(s1[6], 32);  // HL set even without R2
    EXPECT_EQ(s1[8], 0);   // RVALID
  }
  static std::vector<uint8_t> reply(uint16_t tid, dh::ByteSpan r1) {
    na::ReplyHeader h{};
    h.auth_type = na::auth_type::kDhchap;
    h.auth_id = na::auth_id::kReply;
    h.t_id = tid;
    h.hl = static_cast<uint8_t>(r1.size());
    std::vector<uint8_t> m(sizeof h + 2 * r1.size(), 0);  // C2 (after R1): none
    std::memcpy(m.data(), &h, sizeof h);
    std::memcpy(m.data() + sizeof h, r1.data(), r1.size());
    return m;
  }
  // CC.EN = 1: the controller takes I/O queues.
  uint16_t enable(Raw& r, uint16_t cid) {
    nf::PropertySetCommand ps{};
    ps.opcode = nf::kOpcodeFabrics;
    ps.fctype = nf::fctype::kPropertySet;
    ps.cid = cid;
    ps.ofst = sn::reg::kCc;
    ps.value = sn::cc::make(true, 0, 0, 0, 0, 6, 4);
    sn::SubmissionEntry e;
    std::memcpy(&e, &ps, sizeof e);
    e.set_psdt(sn::kPsdtSglMptrContiguous);
    r.send(capsule(e, nullptr, 0, false, false));
    return response(r).status;
  }
  uint16_t property_get(Raw& r, uint16_t cid) {
    nf::PropertyGetCommand pg{};
    pg.opcode = nf::kOpcodeFabrics;
    pg.fctype = nf::fctype::kPropertyGet;
    pg.cid = cid;
    pg.attrib = nf::property::kSize8;
    pg.ofst = sn::reg::kCap;
    sn::SubmissionEntry e;
    std::memcpy(&e, &pg, sizeof e);
    e.set_psdt(sn::kPsdtSglMptrContiguous);
    r.send(capsule(e, nullptr, 0, false, false));
    return response(r).status;
  }

  std::unique_ptr<LiveTarget> target;
  std::unique_ptr<Host> host;
  dh::Key key;
  uint32_t round = 0;
};

// Both with DNR: retrying the command as it is cannot help.
const uint16_t kAuthRequired =
    sn::status::make(sn::sct::kCommandSpecific, nf::sc::kAuthenticationRequired, true);
const uint16_t kInvalidField = sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidField, true);

TEST_F(AuthPdu, OnlyAuthenticationCommandsUntilAuthenticatedThenEverything) {
  Raw r(target->port());
  connect(r);
  EXPECT_EQ(property_get(r, 2), kAuthRequired);
  r.send(capsule(sqe(sn::admin::kKeepAlive, 3), nullptr, 0, false, false));
  EXPECT_EQ(response(r).status, kAuthRequired);
  authenticate(r, 5);
  EXPECT_EQ(property_get(r, 4), 0);
  // Re-authentication on the open queue: a new transaction, the queue stays usable.
  authenticate(r, 6);
  EXPECT_EQ(property_get(r, 7), 0);
  still_serving("authentication");
}

TEST_F(AuthPdu, BadCommandFieldsFailOnlyTheCommand) {
  Raw r(target->port());
  connect(r);
  const auto m = negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull});
  const uint32_t n = static_cast<uint32_t>(m.size());
  r.send(
      capsule(auth_sqe(nf::fctype::kAuthenticationSend, 2, n, n, 0xea), m.data(), n, false, false));
  EXPECT_EQ(response(r).status, kInvalidField) << "SECP";
  r.send(capsule(auth_sqe(nf::fctype::kAuthenticationSend, 3, n, n, nf::kSecpNvme, 0), m.data(), n,
                 false, false));
  EXPECT_EQ(response(r).status, kInvalidField) << "SPSP0";
  r.send(
      capsule(auth_sqe(nf::fctype::kAuthenticationSend, 4, n + 8, n), m.data(), n, false, false));
  EXPECT_EQ(response(r).status, kInvalidField) << "TL beyond the data";
  authenticate(r, 9);  // the queue is still there, still waiting for a good transaction
  EXPECT_EQ(property_get(r, 5), 0);
}

TEST_F(AuthPdu, ShortOversizedAndUnknownMessages) {
  {
    Raw r(target->port());
    connect(r);
    EXPECT_EQ(send(r, {0, 0, 0, 0}), 0);  // 4 bytes: not even a header
    expect_failure1(r, na::failure::kIncorrectPayload, "a 4-byte message");
  }
  {
    Raw r(target->port());
    connect(r);
    auto m = negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull});
    m.resize(m.size() + 64);  // a second descriptor that NAPD does not count
    EXPECT_EQ(send(r, m), 0);
    expect_failure1(r, na::failure::kIncorrectPayload, "an oversized AUTH_Negotiate");
  }
  {
    Raw r(target->port());
    connect(r);
    auto m = negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull});
    m[7] = 0;  // NAPD 0
    EXPECT_EQ(send(r, m), 0);
    expect_failure1(r, na::failure::kIncorrectPayload, "AUTH_Negotiate without descriptors");
  }
  {
    Raw r(target->port());
    connect(r);
    EXPECT_EQ(send(r, {7, 9, 0, 0, 1, 0, 0, 0}), 0);  // AUTH_TYPE 7
    expect_failure1(r, na::failure::kIncorrectMessage, "an unknown message");
  }
  {
    Raw r(target->port());
    connect(r);
    EXPECT_EQ(send(r, negotiate(1, {na::hash::kSha384}, {na::dhgroup::kNull})), 0);
    expect_failure1(r, na::failure::kHashUnusable, "only a hash that is not allowed");
  }
  {
    Raw r(target->port());
    connect(r);
    auto m = negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull});
    m[6] = na::sc_c::kNewTlsPsk;
    EXPECT_EQ(send(r, m), 0);
    expect_failure1(r, na::failure::kConcatMismatch, "secure channel concatenation");
  }
}

TEST_F(AuthPdu, WrongTransactionIdAndWrongResponse) {
  for (bool wrong_tid : {true, false}) {
    Raw r(target->port());
    connect(r);
    ASSERT_EQ(send(r, negotiate(3, {na::hash::kSha256}, {na::dhgroup::kNull})), 0);
    uint16_t st;
    auto c = receive(r, 4096, &st);
    ASSERT_EQ(st, 0);
    na::ChallengeHeader ch;
    std::memcpy(&ch, c.data(), sizeof ch);
    const auto r1 = dh::response(dh::Role::kHost, ch.hashid, dh::transform(key, kRawNqn),
                                 dh::ByteSpan(c.data() + sizeof ch, 32), {}, ch.seqnum, 3, 0,
                                 kRawNqn, target->nqn());
    dh::SecretBytes bad = r1;
    bad[0] ^= 1;
    ASSERT_EQ(send(r, wrong_tid ? reply(4, r1) : reply(3, bad)), 0);
    expect_failure1(r, wrong_tid ? na::failure::kIncorrectPayload : na::failure::kFailed,
                    wrong_tid ? "a Reply for another transaction" : "a wrong response");
  }
}

TEST_F(AuthPdu, MessagesOutOfTurn) {
  {
    Raw r(target->port());
    connect(r);
    const dh::Bytes zero(32, 0);
    EXPECT_EQ(send(r, reply(1, zero)), 0);  // a Reply before AUTH_Negotiate
    expect_failure1(r, na::failure::kIncorrectMessage, "a Reply first");
  }
  {
    Raw r(target->port());
    connect(r);
    uint16_t st;
    receive(r, 64, &st);  // a Receive before AUTH_Negotiate: AUTH_Failure1 at once
    EXPECT_EQ(st, 0);
    expect_closed(r, "a Receive first");
  }
  {
    Raw r(target->port());
    connect(r);
    ASSERT_EQ(send(r, negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull})), 0);
    na::Success2 s2{};
    s2.auth_type = na::auth_type::kDhchap;
    s2.auth_id = na::auth_id::kSuccess2;
    s2.t_id = 1;
    EXPECT_EQ(send(r, bytes(s2)), 0);  // Success2 where the Challenge is due
    expect_failure1(r, na::failure::kIncorrectMessage, "Success2 out of turn");
  }
  {
    Raw r(target->port());
    connect(r);
    ASSERT_EQ(send(r, negotiate(1, {na::hash::kSha256}, {na::dhgroup::kNull})), 0);
    uint16_t st;
    auto d = receive(r, 16, &st);  // AL 16: no room for the 48-byte challenge
    EXPECT_EQ(st, 0);
    ASSERT_GE(d.size(), 8u);
    EXPECT_EQ(d[1], na::auth_id::kFailure1);
    EXPECT_EQ(d[7], na::failure::kIncorrectPayload);
    expect_closed(r, "an AL too small for the challenge");
  }
}

TEST_F(AuthPdu, AnIoQueueAuthenticatesToAndItsFailureEndsTheAssociation) {
  Raw admin(target->port());
  const uint16_t cntlid = connect(admin);
  authenticate(admin, 1);
  ASSERT_EQ(enable(admin, 2), 0);
  Raw io(target->port());
  connect(io, 1, cntlid);
  sn::SubmissionEntry e = sqe(sn::nvm::kFlush, 2, 1);
  io.send(capsule(e, nullptr, 0, false, false));
  EXPECT_EQ(response(io).status, kAuthRequired);
  EXPECT_EQ(send(io, {1, 2, 3, 4, 5, 6, 7, 8}), 0);  // a Reply of 8 bytes, out of turn
  expect_failure1(io, na::failure::kIncorrectMessage, "a bad message on the I/O queue");
  expect_closed(admin, "the association's admin queue");
}

TEST_F(AuthPdu, AHostThatGoesSilentIsDroppedAfterTheTimeout) {
  set_timeout(300);
  Raw r(target->port());
  connect(r);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.eof()) << "still open (the receive timeout is 5 s)";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  still_serving("a silent host");
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
