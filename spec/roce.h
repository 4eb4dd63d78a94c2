// RoCEv2 transport headers for the Reliable Connected service (InfiniBand Architecture
// Specification vol. 1 rel. 1.4, ch. 9 "Transport layer"; RoCEv2 = IBA Annex A17: the IB
// transport headers carried in UDP/IP, destination port 4791). No behaviour: the emulated NICs
// build and parse packets with these, and a real-hardware backend would see the same bytes.
//
// Wire order is big-endian. The headers are byte arrays with accessors (no alignment, no
// endianness assumption about the host). A packet on the wire is, in order:
//   BTH | RETH (RDMA WRITE first/only, RDMA READ request) | AETH (ACK, READ response first/
//   last/only) | ImmDt (… with immediate) | payload | pad to 4 bytes | ICRC (4 bytes)
// The Ethernet/IP/UDP headers in front of the BTH are left to the link that carries packets.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::spec::roce {

inline constexpr uint16_t kUdpPort = 4791;      // IANA "RoCEv2"
inline constexpr uint32_t kPsnMask = 0xffffff;  // PSNs are 24-bit and wrap
inline constexpr uint32_t kQpnMask = 0xffffff;
inline constexpr uint16_t kDefaultPkey = 0xffff;  // full-member default partition
inline constexpr std::size_t kIcrcBytes = 4;

// --------------------------------------------------------------- big-endian accessors ---
constexpr uint16_t load_be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
constexpr uint32_t load_be24(const uint8_t* p) {
  return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
}
constexpr uint32_t load_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | load_be24(p + 1);
}
constexpr uint64_t load_be64(const uint8_t* p) {
  return uint64_t{load_be32(p)} << 32 | load_be32(p + 4);
}
constexpr void store_be16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
constexpr void store_be24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  store_be24(p + 1, v);
}
constexpr void store_be64(uint8_t* p, uint64_t v) {
  store_be32(p, static_cast<uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<uint32_t>(v));
}

// PSN arithmetic modulo 2^24: the signed distance from b to a, in (-2^23, 2^23].
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}
constexpr uint32_t psn_add(uint32_t psn, uint32_t n) {
  return (psn + n) & kPsnMask;
}

// ------------------------------------------------------------------------- opcodes ---
// BTH OpCode: [7:5] transport service (000 = RC), [4:0] operation (IBA Table 38).
namespace opcode {
inline constexpr uint8_t kSendFirst = 0x00;
inline constexpr uint8_t kSendMiddle = 0x01;
inline constexpr uint8_t kSendLast = 0x02;
inline constexpr uint8_t kSendLastWithImmediate = 0x03;
inline constexpr uint8_t kSendOnly = 0x04;
inline constexpr uint8_t kSendOnlyWithImmediate = 0x05;
inline constexpr uint8_t kRdmaWriteFirst = 0x06;
inline constexpr uint8_t kRdmaWriteMiddle = 0x07;
inline constexpr uint8_t kRdmaWriteLast = 0x08;
inline constexpr uint8_t kRdmaWriteLastWithImmediate = 0x09;
inline constexpr uint8_t kRdmaWriteOnly = 0x0a;
inline constexpr uint8_t kRdmaWriteOnlyWithImmediate = 0x0b;
inline constexpr uint8_t kRdmaReadRequest = 0x0c;
inline constexpr uint8_t kRdmaReadResponseFirst = 0x0d;
inline constexpr uint8_t kRdmaReadResponseMiddle = 0x0e;
inline constexpr uint8_t kRdmaReadResponseLast = 0x0f;
inline constexpr uint8_t kRdmaReadResponseOnly = 0x10;
inline constexpr uint8_t kAcknowledge = 0x11;
inline constexpr uint8_t kTransportRc = 0x00;  // [7:5]

constexpr uint8_t transport(uint8_t op) {
  return op & 0xe0;
}
constexpr uint8_t operation(uint8_t op) {
  return op & 0x1f;
}
constexpr bool is_send(uint8_t op) {
  return op <= kSendOnlyWithImmediate;
}
constexpr bool is_write(uint8_t op) {
  return op >= kRdmaWriteFirst && op <= kRdmaWriteOnlyWithImmediate;
}
constexpr bool is_read_request(uint8_t op) {
  return op == kRdmaReadRequest;
}
constexpr bool is_read_response(uint8_t op) {
  return op >= kRdmaReadResponseFirst && op <= kRdmaReadResponseOnly;
}
constexpr bool is_request(uint8_t op) {
  return op <= kRdmaReadRequest;
}
// Position of a packet in its message.
constexpr bool is_first(uint8_t op) {
  return op == kSendFirst || op == kRdmaWriteFirst || op == kRdmaReadResponseFirst;
}
constexpr bool is_middle(uint8_t op) {
  return op == kSendMiddle || op == kRdmaWriteMiddle || op == kRdmaReadResponseMiddle;
}
constexpr bool is_last(uint8_t op) {
  return op == kSendLast || op == kSendLastWithImmediate || op == kRdmaWriteLast ||
         op == kRdmaWriteLastWithImmediate || op == kRdmaReadResponseLast;
}
constexpr bool is_only(uint8_t op) {
  return op == kSendOnly || op == kSendOnlyWithImmediate || op == kRdmaWriteOnly ||
         op == kRdmaWriteOnlyWithImmediate || op == kRdmaReadResponseOnly ||
         op == kRdmaReadRequest || op == kAcknowledge;
}
// Which extension headers follow the BTH (IBA Table 38's "packet format" column).
constexpr bool has_reth(uint8_t op) {
  return op == kRdmaWriteFirst || op == kRdmaWriteOnly || op == kRdmaWriteOnlyWithImmediate ||
         op == kRdmaReadRequest;
}
constexpr bool has_aeth(uint8_t op) {
  return op == kAcknowledge || op == kRdmaReadResponseFirst || op == kRdmaReadResponseLast ||
         op == kRdmaReadResponseOnly;
}
constexpr bool has_immediate(uint8_t op) {
  return op == kSendLastWithImmediate || op == kSendOnlyWithImmediate ||
         op == kRdmaWriteLastWithImmediate || op == kRdmaWriteOnlyWithImmediate;
}
// Packets that may carry payload (a READ request and an ACK carry none).
constexpr bool has_payload(uint8_t op) {
  return op <= kRdmaWriteOnlyWithImmediate || is_read_response(op);
}
}  // namespace opcode

// ---------------------------------------------------------------------------- BTH ---
// Base Transport Header, 12 bytes (IBA 9.2):
//   byte 0      OpCode
//   byte 1      SE[7] M[6] PadCnt[5:4] TVer[3:0]
//   bytes 2-3   P_Key
//   byte 4      reserved (RoCEv2: FECN[7] BECN[6])
//   bytes 5-7   DestQP
//   byte 8      AckReq[7], reserved[6:0]
//   bytes 9-11  PSN
struct Bth {
  uint8_t b[12];

  constexpr uint8_t opcode() const { return b[0]; }
  constexpr bool solicited() const { return b[1] & 0x80; }
  constexpr bool migreq() const { return b[1] & 0x40; }
  constexpr uint8_t pad_count() const { return (b[1] >> 4) & 3; }
  constexpr uint8_t tver() const { return b[1] & 0xf; }
  constexpr uint16_t pkey() const { return load_be16(b + 2); }
  constexpr bool fecn() const { return b[4] & 0x80; }
  constexpr bool becn() const { return b[4] & 0x40; }
  constexpr uint32_t dest_qp() const { return load_be24(b + 5); }
  constexpr bool ack_req() const { return b[8] & 0x80; }
  constexpr uint32_t psn() const { return load_be24(b + 9); }

  constexpr void set_opcode(uint8_t v) { b[0] = v; }
  constexpr void set_flags(bool se, bool m, uint8_t pad, uint8_t tver) {
    b[1] = static_cast<uint8_t>((se ? 0x80 : 0) | (m ? 0x40 : 0) | (pad & 3) << 4 | (tver & 0xf));
  }
  constexpr void set_pkey(uint16_t v) { store_be16(b + 2, v); }
  constexpr void set_dest_qp(uint32_t v) { store_be24(b + 5, v & kQpnMask); }
  constexpr void set_ack_req(bool v) { b[8] = v ? 0x80 : 0; }
  constexpr void set_psn(uint32_t v) { store_be24(b + 9, v & kPsnMask); }
};
static_assert(sizeof(Bth) == 12);

// --------------------------------------------------------------------------- RETH ---
// RDMA Extended Transport Header, 16 bytes (IBA 9.3.3): VA 8, R_Key 4, DMA Length 4.
struct Reth {
  uint8_t b[16];
  constexpr uint64_t va() const { return load_be64(b); }
  constexpr uint32_t rkey() const { return load_be32(b + 8); }
  constexpr uint32_t dma_length() const { return load_be32(b + 12); }
  constexpr void set(uint64_t va, uint32_t rkey, uint32_t len) {
    store_be64(b, va);
    store_be32(b + 8, rkey);
    store_be32(b + 12, len);
  }
};
static_assert(sizeof(Reth) == 16);

// --------------------------------------------------------------------------- AETH ---
// ACK Extended Transport Header, 4 bytes (IBA 9.3.5): Syndrome 1, MSN 3.
// Syndrome [7]: reserved 0; [6:5] type; [4:0] credit count / RNR timer / NAK code.
namespace syndrome {
inline constexpr uint8_t kTypeAck = 0x00;     // [4:0] credit count (0x1f: invalid/unlimited)
inline constexpr uint8_t kTypeRnrNak = 0x20;  // [4:0] RNR timer code (table below)
inline constexpr uint8_t kTypeReserved = 0x40;
inline constexpr uint8_t kTypeNak = 0x60;  // [4:0] NAK code
inline constexpr uint8_t kTypeMask = 0x60;
inline constexpr uint8_t kValueMask = 0x1f;
inline constexpr uint8_t kCreditsUnlimited = 0x1f;
// NAK codes (IBA Table 44).
inline constexpr uint8_t kNakPsnSequenceError = 0;
inline constexpr uint8_t kNakInvalidRequest = 1;
inline constexpr uint8_t kNakRemoteAccessError = 2;
inline constexpr uint8_t kNakRemoteOperationalError = 3;
inline constexpr uint8_t kNakInvalidRdRequest = 4;

constexpr uint8_t type(uint8_t s) {
  return s & kTypeMask;
}
constexpr uint8_t value(uint8_t s) {
  return s & kValueMask;
}
constexpr uint8_t ack(uint8_t credits = kCreditsUnlimited) {
  return kTypeAck | (credits & kValueMask);
}
constexpr uint8_t rnr_nak(uint8_t timer) {
  return kTypeRnrNak | (timer & kValueMask);
}
constexpr uint8_t nak(uint8_t code) {
  return kTypeNak | (code & kValueMask);
}
}  // namespace syndrome

struct Aeth {
  uint8_t b[4];
  constexpr uint8_t syndrome() const { return b[0]; }
  constexpr uint32_t msn() const { return load_be24(b + 1); }
  constexpr void set(uint8_t syn, uint32_t msn) {
    b[0] = syn;
    store_be24(b + 1, msn & 0xffffff);
  }
};
static_assert(sizeof(Aeth) == 4);

// ------------------------------------------------------------------------- ImmDt ---
// Immediate data, 4 bytes (IBA 9.3.6); opaque to the transport, delivered to the receiver's
// completion as sent.
struct ImmDt {
  uint8_t b[4];
  constexpr uint32_t value() const { return load_be32(b); }
  constexpr void set(uint32_t v) { store_be32(b, v); }
};
static_assert(sizeof(ImmDt) == 4);

// --------------------------------------------------------------------- timers, MTU ---
// Minimum RNR NAK timer field (IBA Table 45): the code a responder puts in an RNR NAK and the
// time the requester waits before retrying, in microseconds. Code 0 is the longest.
constexpr uint32_t rnr_timer_us(uint8_t code) {
  constexpr uint32_t kTable[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                   160,    240,   320,   480,    640,    960,    1280,   1920,
                                   2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                   40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kTable[code & 31];
}
// Local ACK Timeout (IBA 11.2.4.2, QP attribute "timeout"): 4.096 us * 2^t; 0 means infinite.
constexpr uint64_t local_ack_timeout_ns(uint8_t t) {
  return t == 0 ? 0 : (t >= 31 ? 4096ull << 31 : 4096ull << t);
}
// Retry counts are 3 bits; an rnr_retry of 7 means "retry forever".
inline constexpr uint8_t kMaxRetryCount = 7;
inline constexpr uint8_t kRnrRetryInfinite = 7;

// Path MTU codes (IBA 9.7.1 / ibv_mtu numbering): 1 = 256 ... 5 = 4096 bytes.
enum class Mtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr uint32_t mtu_bytes(Mtu m) {
  return 128u << static_cast<uint8_t>(m);
}
constexpr bool valid_mtu(uint8_t code) {
  return code >= 1 && code <= 5;
}

// Packets needed for a message of `len` bytes at MTU `mtu` bytes (a zero-length message is one).
constexpr uint32_t packets_for(uint32_t len, uint32_t mtu) {
  return len == 0 ? 1 : (len + mtu - 1) / mtu;
}

}  // namespace pollux::spec::roce
