// The controller's side of DH-HMAC-CHAP on one queue (auth.h): Authentication Send carries the
// host's AUTH_Negotiate, DH-HMAC-CHAP_Reply, Success2 or AUTH_Failure2; Authentication Receive
// returns what the step calls for — the Challenge, Success1, or AUTH_Failure1 once something
// went wrong (a bad message, a wrong response, a message out of turn). As Linux's nvmet and
// SPDK do, a Send whose message is at fault still completes successfully: the fault is
// reported by the next Receive, which then ends the association.
#include "fabric/target/auth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "fabric/target/controller.h"
#include "fabric/target/internal.h"
#include "fabric/target/target.h"
#include "spec/nvme_auth.h"

namespace pollux::fabric::target {

namespace na = spec::nvme_auth;

struct QpairAuth {
  enum class Step : uint8_t {
    kNegotiate,  // waiting for AUTH_Negotiate (Send)
    kChallenge,  // the Challenge is to be received
    kReply,      // waiting for the Reply (Send)
    kSuccess1,   // Success1 is to be received
    kSuccess2,   // waiting for Success2 (Send): the host checks our answer to its challenge
    kFailure1,   // AUTH_Failure1 is to be received, then the association ends
    kDone,       // authenticated; a new AUTH_Negotiate starts again (re-authentication)
  };
  Qpair* q = nullptr;
  std::shared_ptr<const AuthConfig> cfg;
  Step step = Step::kNegotiate;
  uint8_t failure = 0;  // AUTH_Failure1's reason code explanation
  uint16_t tid = 0;
  uint8_t hash = 0;
  uint8_t dhgroup = 0;
  uint32_t s1 = 0;
  dhchap::Bytes c1;
  std::optional<dhchap::DhKey> dh;
  bool cvalid = false;
  dhchap::SecretBytes r2;  // our answer to the host's challenge C2
  event::Poller* timer = nullptr;

  ~QpairAuth() { stop_timer(); }
  void stop_timer() {
    if (timer != nullptr) q->group().thread()->unregister_poller(timer);
    timer = nullptr;
  }
};

namespace {

using Step = QpairAuth::Step;

void log(const QpairAuth& a, const std::string& what) {
  fmt::print(stderr, "nvmf: DH-HMAC-CHAP: host {} on {}, queue {}: {}\n", a.cfg->hostnqn,
             a.cfg->subnqn, a.q->qid, what);
}

// The association ends: every queue of the controller (Linux's nvmet: a fatal controller error).
void end_association(Qpair& q, const char* why) {
  if (q.is_admin()) {
    if (q.ctrlr != nullptr) return q.ctrlr->disconnect_all(why);
    return q.disconnect();
  }
  q.disconnect();
  if (q.ctrlr_group == nullptr) return;
  Target& t = q.group().target();
  t.run_on(q.ctrlr_group->thread(), [g = q.ctrlr_group, id = q.ctrlr_id, why] {
    if (Controller* c = g->controller(id)) c->disconnect_all(why);
  });
}

event::PollStatus auth_expired(void* arg) {
  auto& a = *static_cast<QpairAuth*>(arg);
  a.stop_timer();
  log(a, "authentication did not finish in time: the association ends");
  ++a.q->group().stats().authentication_failures;
  end_association(*a.q, "authentication timed out");
  return event::PollStatus::kBusy;
}

void start_timer(QpairAuth& a) {
  a.stop_timer();
  a.timer = a.q->group().thread()->register_poller(
      auth_expired, &a, uint64_t{a.cfg->options.timeout_ms} * 1000, "nvmf_auth_timeout");
}

void authenticated(QpairAuth& a) {
  a.step = Step::kDone;
  a.stop_timer();
  a.dh.reset();
  a.r2.clear();
  if (a.q->state == Qpair::State::kAuthenticating) a.q->state = Qpair::State::kActive;
  ++a.q->group().stats().authentications;
}

// A Send whose message is at fault: it completes, the next Receive answers AUTH_Failure1.
void fail1(QpairAuth& a, Request& r, uint8_t reason, const std::string& why) {
  log(a, why);
  a.step = Step::kFailure1;
  a.failure = reason;
  a.dh.reset();
  finish(r, kSuccess);
}

template <typename T>
T load(const Request& r) {
  T v;
  std::memcpy(&v, r.data, sizeof v);
  return v;
}

uint8_t pick(const std::vector<uint8_t>& ours, const uint8_t* theirs, uint8_t n, bool* found) {
  for (uint8_t id : ours) {
    if (std::find(theirs, theirs + n, id) != theirs + n) {
      *found = true;
      return id;
    }
  }
  *found = false;
  return 0;
}

void negotiate(QpairAuth& a, Request& r) {
  if (a.step != Step::kNegotiate && a.step != Step::kDone)
    return fail1(a, r, na::failure::kIncorrectMessage,
                 "AUTH_Negotiate in the middle of a transaction");
  const auto h = load<na::NegotiateHeader>(r);
  a.tid = h.t_id;
  const std::size_t want = sizeof h + std::size_t{h.napd} * sizeof(na::ProtocolDescriptor);
  if (h.napd == 0 || r.length != want)
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("AUTH_Negotiate of {} bytes with {} descriptors", r.length, h.napd));
  if (h.sc_c != na::sc_c::kNone)
    return fail1(a, r, na::failure::kConcatMismatch,
                 "the host asks for secure channel concatenation (TLS: not supported)");
  const auto* descs = static_cast<const uint8_t*>(r.data) + sizeof h;
  std::optional<na::ProtocolDescriptor> d;
  for (uint8_t i = 0; i < h.napd && !d; ++i) {
    na::ProtocolDescriptor x;
    std::memcpy(&x, descs + i * sizeof x, sizeof x);
    if (x.authid == na::kProtocolDhchap) d = x;
  }
  if (!d) return fail1(a, r, na::failure::kProtocolUnusable, "no DH-HMAC-CHAP protocol offered");
  if (d->halen > na::kMaxHashIds || d->dhlen > na::kMaxDhgroupIds)
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("HALEN {} / DHLEN {} above 30", d->halen, d->dhlen));
  bool found;
  a.hash = pick(a.cfg->options.digests, d->idlist, d->halen, &found);
  if (!found)
    return fail1(a, r, na::failure::kHashUnusable, "no hash function offered is allowed here");
  a.dhgroup = pick(a.cfg->options.dhgroups, d->idlist + na::kDhgroupIdsOffset, d->dhlen, &found);
  if (!found)
    return fail1(a, r, na::failure::kDhgroupUnusable, "no DH group offered is allowed here");
  a.step = Step::kChallenge;
  start_timer(a);
  finish(r, kSuccess);
}

void reply(QpairAuth& a, Request& r) {
  if (a.step != Step::kReply)
    return fail1(a, r, na::failure::kIncorrectMessage, "DH-HMAC-CHAP_Reply out of turn");
  if (r.length < sizeof(na::ReplyHeader))
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("DH-HMAC-CHAP_Reply of {} bytes", r.length));
  const auto h = load<na::ReplyHeader>(r);
  const uint8_t hl = na::hash::length(a.hash);
  const uint16_t dhvlen = na::dhgroup::value_length(a.dhgroup);
  if (h.t_id != a.tid)
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("Reply for transaction {}, not {}", h.t_id, a.tid));
  if (h.hl != hl || h.dhvlen != dhvlen || r.length != sizeof h + 2u * hl + dhvlen)
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("Reply of {} bytes with HL {} and DHVLEN {} ({} and {} expected)",
                             r.length, h.hl, h.dhvlen, hl, dhvlen));
  if (h.cvalid > 1 || (h.cvalid == 1 && h.seqnum == 0))
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("Reply with CVALID {} and SEQNUM {}", h.cvalid, h.seqnum));
  const auto* p = static_cast<const uint8_t*>(r.data) + sizeof h;
  const dhchap::ByteSpan r1(p, hl), c2(p + hl, hl), host_value(p + 2 * hl, dhvlen);
  dhchap::SecretBytes session;
  if (a.dh) {
    auto s = a.dh->shared_secret(host_value);
    if (!s)
      return fail1(a, r, na::failure::kIncorrectPayload,
                   "the host's DH value: " + s.error().message);
    session = std::move(s).value();
  }
  const AuthConfig& c = *a.cfg;
  const auto kh = dhchap::transform(c.host_key, c.hostnqn);
  const auto expected = dhchap::response(dhchap::Role::kHost, a.hash, kh, a.c1, session, a.s1,
                                         a.tid, na::sc_c::kNone, c.hostnqn, c.subnqn);
  if (!dhchap::equal(expected, r1))
    return fail1(a, r, na::failure::kFailed,
                 "the host's response is wrong: it does not hold the key configured for it");
  a.cvalid = h.cvalid == 1;
  if (a.cvalid) {
    if (!c.ctrlr_key)
      return fail1(a, r, na::failure::kFailed,
                   "the host asks the controller to prove itself, and no controller key "
                   "(dhchap_ctrlr_key) is configured for it");
    const auto kc = dhchap::transform(*c.ctrlr_key, c.subnqn);
    a.r2 = dhchap::response(dhchap::Role::kController, a.hash, kc, c2, session, h.seqnum, a.tid,
                            na::sc_c::kNone, c.subnqn, c.hostnqn);
  }
  a.dh.reset();
  a.step = Step::kSuccess1;
  finish(r, kSuccess);
}

void success2(QpairAuth& a, Request& r) {
  if (a.step != Step::kSuccess2)
    return fail1(a, r, na::failure::kIncorrectMessage, "DH-HMAC-CHAP_Success2 out of turn");
  const auto m = load<na::Success2>(r);
  if (r.length != sizeof m || m.t_id != a.tid)
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("Success2 of {} bytes for transaction {}", r.length, m.t_id));
  authenticated(a);
  finish(r, kSuccess);
}

void auth_send(QpairAuth& a, Request& r) {
  if (r.length < sizeof(na::Failure))
    return fail1(a, r, na::failure::kIncorrectPayload,
                 fmt::format("a message of {} bytes", r.length));
  const auto* m = static_cast<const uint8_t*>(r.data);
  const uint8_t type = m[0], id = m[1];
  if (type == na::auth_type::kCommon && id == na::auth_id::kNegotiate) return negotiate(a, r);
  if (type == na::auth_type::kDhchap && id == na::auth_id::kReply) return reply(a, r);
  if (type == na::auth_type::kDhchap && id == na::auth_id::kSuccess2) return success2(a, r);
  if (type == na::auth_type::kCommon && id == na::auth_id::kFailure2) {
    const auto f = load<na::Failure>(r);
    log(a, fmt::format("the host ends the transaction with AUTH_Failure2 ({}): the association "
                       "ends",
                       dhchap::failure_reason(f.rescode_exp)));
    ++a.q->group().stats().authentication_failures;
    a.step = Step::kFailure1;
    Qpair& q = *a.q;
    finish(r, kSuccess);
    return end_association(q, "AUTH_Failure2 from the host");
  }
  fail1(a, r, na::failure::kIncorrectMessage,
        fmt::format("an unexpected message (type {}, id {})", type, id));
}

// Receive: the message goes back at the start of r.data; the rest of the AL bytes are zero (as
// Linux's nvmet sends them: a host may expect its whole buffer transferred).
void put(Request& r, const void* msg, uint32_t len) {
  std::memcpy(r.data, msg, len);
}

void send_failure1(QpairAuth& a, Request& r) {
  na::Failure f{};
  f.auth_type = na::auth_type::kCommon;
  f.auth_id = na::auth_id::kFailure1;
  f.t_id = a.tid;
  f.rescode = na::failure::kReasonFailed;
  f.rescode_exp = a.failure;
  put(r, &f, sizeof f);
  ++a.q->group().stats().authentication_failures;
  Qpair& q = *a.q;
  finish(r, kSuccess);
  end_association(q, "authentication failed");  // after the response: the transport sends it first
}

void auth_receive(QpairAuth& a, Request& r) {
  if (r.length < sizeof(na::Failure)) {  // not even room for AUTH_Failure1
    log(a, fmt::format("Authentication Receive with AL {}: the association ends", r.length));
    ++a.q->group().stats().authentication_failures;
    Qpair& q = *a.q;
    finish(r, generic(sn::sc::kInvalidField));
    return end_association(q, "authentication failed");
  }
  std::memset(r.data, 0, r.length);
  const uint8_t hl = na::hash::length(a.hash);
  switch (a.step) {
    case Step::kChallenge: {
      const uint16_t dhvlen = na::dhgroup::value_length(a.dhgroup);
      const uint32_t len = sizeof(na::ChallengeHeader) + hl + dhvlen;
      if (r.length < len) {
        log(a, fmt::format("AL {} cannot hold the {}-byte challenge", r.length, len));
        a.failure = na::failure::kIncorrectPayload;
        return send_failure1(a, r);
      }
      if (a.dhgroup != na::dhgroup::kNull) {
        auto dh = dhchap::DhKey::generate(a.dhgroup);
        if (!dh) {
          log(a, dh.error().message);
          a.failure = na::failure::kFailed;
          return send_failure1(a, r);
        }
        a.dh = std::move(dh).value();
      }
      a.c1.assign(hl, 0);
      if (!dhchap::random_bytes(a.c1.data(), hl)) {
        a.failure = na::failure::kFailed;
        return send_failure1(a, r);
      }
      a.s1 = dhchap::next_seqnum();
      na::ChallengeHeader h{};
      h.auth_type = na::auth_type::kDhchap;
      h.auth_id = na::auth_id::kChallenge;
      h.t_id = a.tid;
      h.hl = hl;
      h.hashid = a.hash;
      h.dhgid = a.dhgroup;
      h.dhvlen = dhvlen;
      h.seqnum = a.s1;
      auto* out = static_cast<uint8_t*>(r.data);
      std::memcpy(out, &h, sizeof h);
      std::memcpy(out + sizeof h, a.c1.data(), hl);
      if (a.dh) std::memcpy(out + sizeof h + hl, a.dh->public_value().data(), dhvlen);
      a.step = Step::kReply;
      return finish(r, kSuccess);
    }
    case Step::kSuccess1: {
      const uint32_t len = sizeof(na::Success1Header) + (a.cvalid ? hl : 0u);
      if (r.length < len) {
        log(a, fmt::format("AL {} cannot hold the {}-byte Success1", r.length, len));
        a.failure = na::failure::kIncorrectPayload;
        return send_failure1(a, r);
      }
      na::Success1Header h{};
      h.auth_type = na::auth_type::kDhchap;
      h.auth_id = na::auth_id::kSuccess1;
      h.t_id = a.tid;
      h.hl = hl;  // set whether or not R2 follows (Linux's host checks it)
      h.rvalid = a.cvalid ? 1 : 0;
      auto* out = static_cast<uint8_t*>(r.data);
      std::memcpy(out, &h, sizeof h);
      if (a.cvalid) std::memcpy(out + sizeof h, a.r2.data(), hl);
      if (a.cvalid) {
        a.step = Step::kSuccess2;  // the host checks R2, then sends Success2 or AUTH_Failure2
      } else {
        authenticated(a);
      }
      return finish(r, kSuccess);
    }
    case Step::kFailure1:
      return send_failure1(a, r);
    default:
      log(a, "Authentication Receive out of turn");
      a.failure = na::failure::kIncorrectMessage;
      return send_failure1(a, r);
  }
}

}  // namespace

void auth_begin(Qpair& q, std::shared_ptr<const AuthConfig> cfg) {
  auth_release(q);
  auto* a = new QpairAuth;
  a->q = &q;
  a->cfg = std::move(cfg);
  q.auth = a;
  q.state = Qpair::State::kAuthenticating;
  start_timer(*a);
}

void auth_release(Qpair& q) {
  delete q.auth;
  q.auth = nullptr;
}

void execute_auth(Request& r) {
  Qpair& q = *r.qpair;
  nf::AuthenticationCommand c;
  std::memcpy(&c, &r.cmd, sizeof c);
  // A host without a key here has nothing to authenticate with (SPDK answers the same).
  if (q.auth == nullptr) return finish(r, generic(sn::sc::kCommandSequenceError));
  if (c.secp != nf::kSecpNvme || c.spsp0 != na::kSpsp0 || c.spsp1 != na::kSpsp1 || c.length == 0 ||
      c.length != r.length || r.data == nullptr)
    return finish(r, generic(sn::sc::kInvalidField));
  if (c.fctype == nf::fctype::kAuthenticationSend) return auth_send(*q.auth, r);
  auth_receive(*q.auth, r);
}

}  // namespace pollux::fabric::target
