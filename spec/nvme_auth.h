// NVMe in-band authentication (NVM Express Base Specification 2.0, 8.13 "NVMe over Fabrics
// In-band Authentication" and its DH-HMAC-CHAP protocol): the messages that the fabrics
// Authentication Send / Receive commands (spec/nvme_fabrics.h, AuthenticationCommand) carry as
// their data, their identifiers, the hash functions and Diffie-Hellman groups, the failure
// reason codes, and the text form of a DH-HMAC-CHAP secret ("DHHC-1:hh:base64:"). No behaviour:
// the cryptography is in driver/nvme/dhchap.h.
//
// One authentication transaction on a queue, host (H) and controller (C):
//   H: Authentication Send    AUTH_Negotiate            T_ID, SC_C, the protocols and ids H offers
//   H: Authentication Receive DH-HMAC-CHAP_Challenge    hash, DH group, S1, C1 [, g^y mod p]
//   H: Authentication Send    DH-HMAC-CHAP_Reply        R1 [, S2, C2 when H authenticates C]
//                                                       [, g^x mod p]
//   H: Authentication Receive DH-HMAC-CHAP_Success1     [R2, C's answer to C2]
//   H: Authentication Send    DH-HMAC-CHAP_Success2     (only when C was authenticated)
// A controller that finds fault answers the next Authentication Receive with AUTH_Failure1; a
// host that finds fault sends AUTH_Failure2. Multi-byte fields are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::spec::nvme_auth {

// Authentication Send / Receive with SECP E9h: SPSP1:SPSP0 = 0101h for these messages.
inline constexpr uint8_t kSpsp0 = 0x01;
inline constexpr uint8_t kSpsp1 = 0x01;

// AUTH_TYPE: byte 0 of every message.
namespace auth_type {
inline constexpr uint8_t kCommon = 0x00;  // AUTH_Negotiate, AUTH_Failure1/2
inline constexpr uint8_t kDhchap = 0x01;  // the DH-HMAC-CHAP messages
}  // namespace auth_type

// AUTH_ID: byte 1 of every message.
namespace auth_id {
inline constexpr uint8_t kNegotiate = 0x00;  // common
inline constexpr uint8_t kChallenge = 0x01;  // DH-HMAC-CHAP
inline constexpr uint8_t kReply = 0x02;
inline constexpr uint8_t kSuccess1 = 0x03;
inline constexpr uint8_t kSuccess2 = 0x04;
inline constexpr uint8_t kFailure2 = 0xf0;  // common, host to controller
inline constexpr uint8_t kFailure1 = 0xf1;  // common, controller to host
}  // namespace auth_id

// The authentication protocol identifier in a protocol descriptor (AUTHID).
inline constexpr uint8_t kProtocolDhchap = 0x01;

// SC_C, secure channel concatenation: 0 none (the only value without TLS).
namespace sc_c {
inline constexpr uint8_t kNone = 0x00;
inline constexpr uint8_t kNewTlsPsk = 0x01;
inline constexpr uint8_t kReplaceTlsPsk = 0x02;
}  // namespace sc_c

// Hash function identifiers (HashID), and the HMAC's output length (HL).
namespace hash {
inline constexpr uint8_t kSha256 = 0x01;
inline constexpr uint8_t kSha384 = 0x02;
inline constexpr uint8_t kSha512 = 0x03;
constexpr uint8_t length(uint8_t id) {
  return id == kSha256 ? 32 : id == kSha384 ? 48 : id == kSha512 ? 64 : 0;
}
}  // namespace hash
inline constexpr std::size_t kMaxHashLength = 64;

// Diffie-Hellman group identifiers (DHgroupID): none, or an RFC 7919 FFDHE group. A DH value
// (DHVLEN bytes) is a big-endian number as long as the group's prime.
namespace dhgroup {
inline constexpr uint8_t kNull = 0x00;
inline constexpr uint8_t kFfdhe2048 = 0x01;
inline constexpr uint8_t kFfdhe3072 = 0x02;
inline constexpr uint8_t kFfdhe4096 = 0x03;
inline constexpr uint8_t kFfdhe6144 = 0x04;
inline constexpr uint8_t kFfdhe8192 = 0x05;
constexpr uint16_t value_length(uint8_t id) {
  return id == kFfdhe2048   ? 256
         : id == kFfdhe3072 ? 384
         : id == kFfdhe4096 ? 512
         : id == kFfdhe6144 ? 768
         : id == kFfdhe8192 ? 1024
                            : 0;
}
}  // namespace dhgroup

// AUTH_Failure1/2: REASON CODE and REASON CODE EXPLANATION.
namespace failure {
inline constexpr uint8_t kReasonFailed = 0x01;  // "authentication failure", the only code
inline constexpr uint8_t kFailed = 0x01;
inline constexpr uint8_t kProtocolUnusable = 0x02;
inline constexpr uint8_t kConcatMismatch = 0x03;
inline constexpr uint8_t kHashUnusable = 0x04;
inline constexpr uint8_t kDhgroupUnusable = 0x05;
inline constexpr uint8_t kIncorrectPayload = 0x06;
inline constexpr uint8_t kIncorrectMessage = 0x07;
}  // namespace failure

// ------------------------------------------------------------------------ messages ---
// AUTH_Negotiate (host to controller): this header, then NAPD protocol descriptors.
struct NegotiateHeader {
  uint8_t auth_type;  // auth_type::kCommon
  uint8_t auth_id;    // auth_id::kNegotiate
  uint8_t reserved2[2];
  uint16_t t_id;  // transaction identifier, echoed by every message of the transaction
  uint8_t sc_c;   // sc_c::k*
  uint8_t napd;   // number of protocol descriptors that follow
};
static_assert(sizeof(NegotiateHeader) == 8);
static_assert(offsetof(NegotiateHeader, t_id) == 4 && offsetof(NegotiateHeader, sc_c) == 6 &&
              offsetof(NegotiateHeader, napd) == 7);

// A DH-HMAC-CHAP protocol descriptor: HALEN hash ids at idlist[0..], DHLEN DH group ids at
// idlist[30..], in the host's order of preference.
struct ProtocolDescriptor {
  uint8_t authid;  // kProtocolDhchap
  uint8_t reserved1;
  uint8_t halen;
  uint8_t dhlen;
  uint8_t idlist[60];
};
static_assert(sizeof(ProtocolDescriptor) == 64);
static_assert(offsetof(ProtocolDescriptor, halen) == 2 &&
              offsetof(ProtocolDescriptor, dhlen) == 3 &&
              offsetof(ProtocolDescriptor, idlist) == 4);
inline constexpr std::size_t kMaxHashIds = 30;
inline constexpr std::size_t kMaxDhgroupIds = 30;
inline constexpr std::size_t kDhgroupIdsOffset = 30;  // in idlist

// DH-HMAC-CHAP_Challenge (controller to host): this header, C1 (HL bytes), the controller's DH
// value g^y mod p (DHVLEN bytes; none with the null group).
struct ChallengeHeader {
  uint8_t auth_type;  // auth_type::kDhchap
  uint8_t auth_id;    // auth_id::kChallenge
  uint8_t reserved2[2];
  uint16_t t_id;
  uint8_t hl;  // hash length
  uint8_t reserved7;
  uint8_t hashid;
  uint8_t dhgid;
  uint16_t dhvlen;
  uint32_t seqnum;  // S1
};
static_assert(sizeof(ChallengeHeader) == 16);
static_assert(offsetof(ChallengeHeader, t_id) == 4 && offsetof(ChallengeHeader, hl) == 6 &&
              offsetof(ChallengeHeader, hashid) == 8 && offsetof(ChallengeHeader, dhgid) == 9 &&
              offsetof(ChallengeHeader, dhvlen) == 10 && offsetof(ChallengeHeader, seqnum) == 12);

// DH-HMAC-CHAP_Reply (host to controller): this header, R1 (HL), C2 (HL; zero when CVALID is
// 0), the host's DH value g^x mod p (DHVLEN). SEQNUM is S2, 0 when the host does not
// authenticate the controller.
struct ReplyHeader {
  uint8_t auth_type;  // auth_type::kDhchap
  uint8_t auth_id;    // auth_id::kReply
  uint8_t reserved2[2];
  uint16_t t_id;
  uint8_t hl;
  uint8_t reserved7;
  uint8_t cvalid;  // 1: C2 is valid (bidirectional authentication)
  uint8_t reserved9;
  uint16_t dhvlen;
  uint32_t seqnum;  // S2
};
static_assert(sizeof(ReplyHeader) == 16);
static_assert(offsetof(ReplyHeader, hl) == 6 && offsetof(ReplyHeader, cvalid) == 8 &&
              offsetof(ReplyHeader, dhvlen) == 10 && offsetof(ReplyHeader, seqnum) == 12);

// DH-HMAC-CHAP_Success1 (controller to host): this header, then R2 (HL bytes) when RVALID.
// HL is the transaction's hash length either way (Linux's host checks it).
struct Success1Header {
  uint8_t auth_type;  // auth_type::kDhchap
  uint8_t auth_id;    // auth_id::kSuccess1
  uint8_t reserved2[2];
  uint16_t t_id;
  uint8_t hl;
  uint8_t reserved7;
  uint8_t rvalid;  // 1: R2 follows
  uint8_t reserved9[7];
};
static_assert(sizeof(Success1Header) == 16);
static_assert(offsetof(Success1Header, hl) == 6 && offsetof(Success1Header, rvalid) == 8);

// DH-HMAC-CHAP_Success2 (host to controller): the host accepted R2.
struct Success2 {
  uint8_t auth_type;  // auth_type::kDhchap
  uint8_t auth_id;    // auth_id::kSuccess2
  uint8_t reserved2[2];
  uint16_t t_id;
  uint8_t reserved6[10];
};
static_assert(sizeof(Success2) == 16);

// AUTH_Failure1 (controller to host) / AUTH_Failure2 (host to controller).
struct Failure {
  uint8_t auth_type;  // auth_type::kCommon
  uint8_t auth_id;    // auth_id::kFailure1 / kFailure2
  uint8_t reserved2[2];
  uint16_t t_id;
  uint8_t rescode;      // failure::kReasonFailed
  uint8_t rescode_exp;  // failure::k*
};
static_assert(sizeof(Failure) == 8);
static_assert(offsetof(Failure, rescode) == 6 && offsetof(Failure, rescode_exp) == 7);

// ------------------------------------------------------------------- secrets ---
// A DH-HMAC-CHAP secret as text: "DHHC-1:" hh ":" base64(key || CRC-32(key), little-endian)
// ":" — hh 00 (the key is used as it is), or 01/02/03: the key is first transformed with
// HMAC-SHA-256/384/512 and the NQN of its owner. The key is 32, 48 or 64 bytes.
inline constexpr const char* kSecretPrefix = "DHHC-1:";
inline constexpr std::size_t kSecretCrcLength = 4;

}  // namespace pollux::spec::nvme_auth
