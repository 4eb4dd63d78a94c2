// spec/nvme_auth.h against the byte layouts of the in-band authentication messages (NVMe Base
// 2.0, 8.13), cross-checked with Linux's include/linux/nvme.h (struct nvmf_auth_dhchap_*),
// SPDK's include/spdk/nvmf_spec.h and libnvme's types.h. Messages are built field by field and
// compared with byte arrays written from the figures.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "spec/nvme_auth.h"
#include "spec/nvme_fabrics.h"

namespace pollux::spec::nvme_auth {
namespace {

template <typename T>
std::vector<uint8_t> bytes(const T& v) {
  std::vector<uint8_t> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

TEST(NvmeAuthSpec, Identifiers) {
  EXPECT_EQ(nvmf::kSecpNvme, 0xe9);
  EXPECT_EQ(auth_type::kCommon, 0);
  EXPECT_EQ(auth_type::kDhchap, 1);
  EXPECT_EQ(auth_id::kNegotiate, 0x00);
  EXPECT_EQ(auth_id::kChallenge, 0x01);
  EXPECT_EQ(auth_id::kReply, 0x02);
  EXPECT_EQ(auth_id::kSuccess1, 0x03);
  EXPECT_EQ(auth_id::kSuccess2, 0x04);
  EXPECT_EQ(auth_id::kFailure2, 0xf0);
  EXPECT_EQ(auth_id::kFailure1, 0xf1);
  EXPECT_EQ(kProtocolDhchap, 1);
  EXPECT_EQ(hash::length(hash::kSha256), 32);
  EXPECT_EQ(hash::length(hash::kSha384), 48);
  EXPECT_EQ(hash::length(hash::kSha512), 64);
  EXPECT_EQ(hash::length(0), 0);
  EXPECT_EQ(hash::length(4), 0);
  // An FFDHE group's DH value is as long as its prime (RFC 7919).
  EXPECT_EQ(dhgroup::value_length(dhgroup::kNull), 0);
  EXPECT_EQ(dhgroup::value_length(dhgroup::kFfdhe2048), 2048 / 8);
  EXPECT_EQ(dhgroup::value_length(dhgroup::kFfdhe3072), 3072 / 8);
  EXPECT_EQ(dhgroup::value_length(dhgroup::kFfdhe4096), 4096 / 8);
  EXPECT_EQ(dhgroup::value_length(dhgroup::kFfdhe6144), 6144 / 8);
  EXPECT_EQ(dhgroup::value_length(dhgroup::kFfdhe8192), 8192 / 8);
  EXPECT_EQ(dhgroup::value_length(6), 0);
  EXPECT_EQ(failure::kIncorrectMessage, 7);
  // The fabrics status a command gets on a queue that must authenticate first.
  EXPECT_EQ(nvmf::sc::kAuthenticationRequired, 0x91);
}

TEST(NvmeAuthSpec, NegotiateWithOneDescriptor) {
  // What Linux's host sends: every hash and every DH group.
  struct {
    NegotiateHeader h;
    ProtocolDescriptor d;
  } m{};
  static_assert(sizeof m == 72);
  m.h.auth_type = auth_type::kCommon;
  m.h.auth_id = auth_id::kNegotiate;
  m.h.t_id = 0x1234;
  m.h.sc_c = sc_c::kNone;
  m.h.napd = 1;
  m.d.authid = kProtocolDhchap;
  m.d.halen = 3;
  m.d.dhlen = 2;
  m.d.idlist[0] = hash::kSha256;
  m.d.idlist[1] = hash::kSha384;
  m.d.idlist[2] = hash::kSha512;
  m.d.idlist[kDhgroupIdsOffset] = dhgroup::kNull;
  m.d.idlist[kDhgroupIdsOffset + 1] = dhgroup::kFfdhe2048;
  std::vector<uint8_t> want(72, 0);
  const uint8_t head[] = {0x00, 0x00, 0,    0,    0x34, 0x12, 0x00, 0x01,  // header
                          0x01, 0x00, 0x03, 0x02, 0x01, 0x02, 0x03};       // descriptor
  std::memcpy(want.data(), head, sizeof head);
  want[8 + 4 + 30] = 0x00;
  want[8 + 4 + 31] = 0x01;
  EXPECT_EQ(bytes(m), want);
}

TEST(NvmeAuthSpec, ChallengeHeader) {
  ChallengeHeader c{};
  c.auth_type = auth_type::kDhchap;
  c.auth_id = auth_id::kChallenge;
  c.t_id = 7;
  c.hl = 48;
  c.hashid = hash::kSha384;
  c.dhgid = dhgroup::kFfdhe3072;
  c.dhvlen = 384;
  c.seqnum = 0xa1b2c3d4;
  const std::vector<uint8_t> want = {0x01, 0x01, 0,    0,    0x07, 0x00, 48,   0,
                                     0x02, 0x02, 0x80, 0x01, 0xd4, 0xc3, 0xb2, 0xa1};
  EXPECT_EQ(bytes(c), want);
}

TEST(NvmeAuthSpec, ReplyHeader) {
  ReplyHeader r{};
  r.auth_type = auth_type::kDhchap;
  r.auth_id = auth_id::kReply;
  r.t_id = 0x0102;
  r.hl = 64;
  r.cvalid = 1;
  r.dhvlen = 1024;
  r.seqnum = 5;
  const std::vector<uint8_t> want = {0x01, 0x02, 0,    0,    0x02, 0x01, 64, 0,
                                     0x01, 0,    0x00, 0x04, 5,    0,    0,  0};
  EXPECT_EQ(bytes(r), want);
}

TEST(NvmeAuthSpec, SuccessAndFailure) {
  Success1Header s1{};
  s1.auth_type = auth_type::kDhchap;
  s1.auth_id = auth_id::kSuccess1;
  s1.t_id = 9;
  s1.hl = 32;
  s1.rvalid = 1;
  EXPECT_EQ(bytes(s1), (std::vector<uint8_t>{1, 3, 0, 0, 9, 0, 32, 0, 1, 0, 0, 0, 0, 0, 0, 0}));
  Success2 s2{};
  s2.auth_type = auth_type::kDhchap;
  s2.auth_id = auth_id::kSuccess2;
  s2.t_id = 9;
  EXPECT_EQ(bytes(s2), (std::vector<uint8_t>{1, 4, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  Failure f{};
  f.auth_type = auth_type::kCommon;
  f.auth_id = auth_id::kFailure1;
  f.t_id = 0xbeef;
  f.rescode = failure::kReasonFailed;
  f.rescode_exp = failure::kHashUnusable;
  EXPECT_EQ(bytes(f), (std::vector<uint8_t>{0, 0xf1, 0, 0, 0xef, 0xbe, 1, 4}));
}

TEST(NvmeAuthSpec, AuthenticationCommandCarriesSecpAndSpsp) {
  // Authentication Send/Receive with these messages: SECP E9h, SPSP0 = SPSP1 = 01h, TL/AL.
  nvmf::AuthenticationCommand a{};
  a.opcode = nvmf::kOpcodeFabrics;
  a.fctype = nvmf::fctype::kAuthenticationReceive;
  a.secp = nvmf::kSecpNvme;
  a.spsp0 = kSpsp0;
  a.spsp1 = kSpsp1;
  a.length = 4096;
  const auto b = bytes(a);
  EXPECT_EQ(b[4], 0x06);
  EXPECT_EQ(b[41], 0x01);
  EXPECT_EQ(b[42], 0x01);
  EXPECT_EQ(b[43], 0xe9);
  EXPECT_EQ(b[44] | b[45] << 8, 4096);
}

}  // namespace
}  // namespace pollux::spec::nvme_auth
