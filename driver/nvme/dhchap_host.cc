#include "driver/nvme/dhchap_host.h"

#include <algorithm>
#include <cstring>

namespace pollux::nvme::dhchap {

Result<HostCredentials> make_host_credentials(const std::string& key, const std::string& ctrlr_key,
                                              const std::vector<uint8_t>& hashes,
                                              const std::vector<uint8_t>& dhgroups,
                                              const std::string& hostnqn,
                                              const std::string& subnqn) {
  HostCredentials c;
  if (key.empty())
    return make_error(EINVAL, "dhchap_ctrlr_key needs dhchap_key (the host authenticates first)");
  auto k = parse_key(key);
  if (!k) return make_error(EINVAL, "dhchap_key: " + k.error().message);
  c.host_key = std::move(k).value();
  if (!ctrlr_key.empty()) {
    auto ck = parse_key(ctrlr_key);
    if (!ck) return make_error(EINVAL, "dhchap_ctrlr_key: " + ck.error().message);
    c.ctrlr_key = std::move(ck).value();
  }
  c.hashes = hashes.empty() ? all_hashes() : hashes;
  c.dhgroups = dhgroups.empty() ? all_dhgroups() : dhgroups;
  if (c.hashes.size() > na::kMaxHashIds || c.dhgroups.size() > na::kMaxDhgroupIds)
    return make_error(EINVAL, "dhchap: too many digests or DH groups");
  for (uint8_t h : c.hashes)
    if (hash_name(h) == nullptr)
      return make_error(EINVAL, "dhchap_digests: unknown hash id " + std::to_string(h));
  for (uint8_t g : c.dhgroups)
    if (dhgroup_name(g) == nullptr)
      return make_error(EINVAL, "dhchap_dhgroups: unknown DH group id " + std::to_string(g));
  c.hostnqn = hostnqn;
  c.subnqn = subnqn;
  return c;
}

namespace {

bool offered(const std::vector<uint8_t>& v, uint8_t id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

}  // namespace

Result<HostOutcome> authenticate_host(const HostCredentials& creds, uint16_t tid, uint8_t* buf,
                                      const HostExchange& ex) {
  constexpr uint32_t kCap = kMessageBufferSize;
  // An error the host finds once the controller's challenge is in: AUTH_Failure2 tells the
  // controller (best effort: the error is what the caller learns).
  auto fail2 = [&](uint8_t exp, int code, const std::string& why) -> Error {
    na::Failure f{};
    f.auth_type = na::auth_type::kCommon;
    f.auth_id = na::auth_id::kFailure2;
    f.t_id = tid;
    f.rescode = na::failure::kReasonFailed;
    f.rescode_exp = exp;
    std::memset(buf, 0, kCap);
    std::memcpy(buf, &f, sizeof f);
    (void)ex.send(buf, sizeof f);
    return make_error(code, why);
  };
  // Receives the next message and checks it is `id` of this transaction (or AUTH_Failure1).
  auto receive = [&](uint8_t id, const char* name) -> Result<std::monostate> {
    std::memset(buf, 0, kCap);
    auto r = ex.receive(buf, kCap);
    if (!r)
      return make_error(r.error().code,
                        std::string("receiving ") + name + ": " + r.error().message);
    if (buf[0] == na::auth_type::kCommon && buf[1] == na::auth_id::kFailure1) {
      na::Failure f;
      std::memcpy(&f, buf, sizeof f);
      return make_error(
          EACCES,
          std::string("the controller refused authentication (AUTH_Failure1: ") +
              failure_reason(f.rescode_exp) +
              (f.rescode_exp == na::failure::kFailed ? "; is dhchap_key the host's key there?)"
                                                     : ")"));
    }
    uint16_t t;
    std::memcpy(&t, buf + 4, 2);
    if (buf[0] != na::auth_type::kDhchap || buf[1] != id)
      return fail2(na::failure::kIncorrectMessage, EPROTO,
                   std::string("expected ") + name + ", got message type " +
                       std::to_string(buf[0]) + " id " + std::to_string(buf[1]));
    if (t != tid)
      return fail2(na::failure::kIncorrectMessage, EPROTO,
                   std::string(name) + " for transaction " + std::to_string(t) + ", not " +
                       std::to_string(tid));
    return std::monostate{};
  };

  // 1. AUTH_Negotiate: one DH-HMAC-CHAP descriptor with what this host offers.
  struct {
    na::NegotiateHeader h;
    na::ProtocolDescriptor d;
  } neg{};
  neg.h.auth_type = na::auth_type::kCommon;
  neg.h.auth_id = na::auth_id::kNegotiate;
  neg.h.t_id = tid;
  neg.h.sc_c = na::sc_c::kNone;
  neg.h.napd = 1;
  neg.d.authid = na::kProtocolDhchap;
  neg.d.halen = static_cast<uint8_t>(creds.hashes.size());
  neg.d.dhlen = static_cast<uint8_t>(creds.dhgroups.size());
  std::copy(creds.hashes.begin(), creds.hashes.end(), neg.d.idlist);
  std::copy(creds.dhgroups.begin(), creds.dhgroups.end(), neg.d.idlist + na::kDhgroupIdsOffset);
  std::memset(buf, 0, kCap);
  std::memcpy(buf, &neg, sizeof neg);
  if (auto r = ex.send(buf, sizeof neg); !r)
    return make_error(r.error().code, "sending AUTH_Negotiate: " + r.error().message);

  // 2. DH-HMAC-CHAP_Challenge.
  if (auto r = receive(na::auth_id::kChallenge, "DH-HMAC-CHAP_Challenge"); !r) return r.error();
  na::ChallengeHeader ch;
  std::memcpy(&ch, buf, sizeof ch);
  HostOutcome out;
  out.hash = ch.hashid;
  out.dhgroup = ch.dhgid;
  const uint8_t hl = na::hash::length(ch.hashid);
  if (hl == 0 || !offered(creds.hashes, ch.hashid))
    return fail2(na::failure::kHashUnusable, EPROTO,
                 "the controller chose hash " + std::to_string(ch.hashid) + ", not one offered");
  if (ch.hl != hl)
    return fail2(na::failure::kIncorrectPayload, EPROTO,
                 "the challenge's HL " + std::to_string(ch.hl) + " is not " + hash_name(ch.hashid) +
                     "'s " + std::to_string(hl));
  if (dhgroup_name(ch.dhgid) == nullptr || !offered(creds.dhgroups, ch.dhgid))
    return fail2(na::failure::kDhgroupUnusable, EPROTO,
                 "the controller chose DH group " + std::to_string(ch.dhgid) + ", not one offered");
  if (ch.dhvlen != na::dhgroup::value_length(ch.dhgid))
    return fail2(na::failure::kIncorrectPayload, EPROTO,
                 "the challenge's DH value is " + std::to_string(ch.dhvlen) + " bytes, " +
                     dhgroup_name(ch.dhgid) + " needs " +
                     std::to_string(na::dhgroup::value_length(ch.dhgid)));
  const Bytes c1(buf + sizeof ch, buf + sizeof ch + hl);
  const Bytes ctrl_value(buf + sizeof ch + hl, buf + sizeof ch + hl + ch.dhvlen);
  const uint32_t s1 = ch.seqnum;

  // 3. DH-HMAC-CHAP_Reply: R1, C2 when the controller is to prove itself, our DH value.
  SecretBytes session;
  Bytes host_value;
  if (ch.dhgid != na::dhgroup::kNull) {
    auto dh = DhKey::generate(ch.dhgid);
    if (!dh) return fail2(na::failure::kFailed, EIO, dh.error().message);
    auto s = dh->shared_secret(ctrl_value);
    if (!s)
      return fail2(na::failure::kIncorrectPayload, EPROTO,
                   "the controller's DH value: " + s.error().message);
    session = std::move(s).value();
    host_value = dh->public_value();
  }
  const SecretBytes kh = transform(creds.host_key, creds.hostnqn);
  const SecretBytes r1 = response(Role::kHost, ch.hashid, kh, c1, session, s1, tid, na::sc_c::kNone,
                                  creds.hostnqn, creds.subnqn);
  if (r1.size() != hl) return fail2(na::failure::kFailed, EIO, "HMAC failed");
  const bool bidirectional = creds.ctrlr_key.has_value();
  Bytes c2(hl, 0);
  uint32_t s2 = 0;
  if (bidirectional) {
    if (!random_bytes(c2.data(), hl)) return fail2(na::failure::kFailed, EIO, "no random bytes");
    s2 = next_seqnum();
  }
  na::ReplyHeader rh{};
  rh.auth_type = na::auth_type::kDhchap;
  rh.auth_id = na::auth_id::kReply;
  rh.t_id = tid;
  rh.hl = hl;
  rh.cvalid = bidirectional ? 1 : 0;
  rh.dhvlen = static_cast<uint16_t>(host_value.size());
  rh.seqnum = s2;
  std::memset(buf, 0, kCap);
  std::memcpy(buf, &rh, sizeof rh);
  std::memcpy(buf + sizeof rh, r1.data(), hl);
  std::memcpy(buf + sizeof rh + hl, c2.data(), hl);
  if (!host_value.empty())
    std::memcpy(buf + sizeof rh + 2 * hl, host_value.data(), host_value.size());
  const uint32_t reply_len = static_cast<uint32_t>(sizeof rh + 2 * hl + host_value.size());
  if (auto r = ex.send(buf, reply_len); !r)
    return fail2(na::failure::kFailed, r.error().code,
                 "sending DH-HMAC-CHAP_Reply: " + r.error().message);

  // 4. DH-HMAC-CHAP_Success1, with R2 when we asked for it.
  if (auto r = receive(na::auth_id::kSuccess1, "DH-HMAC-CHAP_Success1"); !r) return r.error();
  na::Success1Header s1h;
  std::memcpy(&s1h, buf, sizeof s1h);
  if (s1h.hl != hl)
    return fail2(na::failure::kHashUnusable, EPROTO,
                 "Success1's HL " + std::to_string(s1h.hl) + " is not " + std::to_string(hl));
  if (!bidirectional) return out;
  if (s1h.rvalid != 1)
    return fail2(na::failure::kFailed, EACCES,
                 "the controller did not answer the host's challenge (dhchap_ctrlr_key given)");
  const SecretBytes kc = transform(*creds.ctrlr_key, creds.subnqn);
  const SecretBytes r2 = response(Role::kController, ch.hashid, kc, c2, session, s2, tid,
                                  na::sc_c::kNone, creds.subnqn, creds.hostnqn);
  if (!equal(r2, ByteSpan(buf + sizeof s1h, hl)))
    return fail2(na::failure::kFailed, EACCES,
                 "the controller's answer to the host's challenge is wrong: it does not hold "
                 "the key given as dhchap_ctrlr_key");

  // 5. DH-HMAC-CHAP_Success2: the controller proved itself.
  na::Success2 s2m{};
  s2m.auth_type = na::auth_type::kDhchap;
  s2m.auth_id = na::auth_id::kSuccess2;
  s2m.t_id = tid;
  std::memset(buf, 0, kCap);
  std::memcpy(buf, &s2m, sizeof s2m);
  if (auto r = ex.send(buf, sizeof s2m); !r)
    return make_error(r.error().code, "sending DH-HMAC-CHAP_Success2: " + r.error().message);
  out.controller_authenticated = true;
  return out;
}

}  // namespace pollux::nvme::dhchap
