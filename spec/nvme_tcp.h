// NVMe/TCP transport wire formats (NVM Express TCP Transport Specification 1.0a, 3.6: PDUs):
// PDU types, the common header, each PDU's header, digests, data alignment and the well-known
// ports. No behaviour: the host transport, the target transport and the emulator include this.
//
// Every multi-byte field is little-endian on the wire. The structures below are written to and
// read from the socket as they lie in memory, hence the check that the host is little-endian.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "spec/nvme.h"

namespace pollux::spec::nvme_tcp {

static_assert(std::endian::native == std::endian::little,
              "NVMe/TCP PDUs are little-endian and sent as they lie in memory");

// ------------------------------------------------------------------------ well-known ---
inline constexpr uint16_t kIoPort = 4420;         // IANA "NVM Express over Fabrics"
inline constexpr uint16_t kDiscoveryPort = 8009;  // IANA "NVMe-oF discovery service"
inline constexpr uint16_t kPfv10 = 0x0000;        // PDU Format Version 1.0 (ICReq/ICResp PFV)

// ------------------------------------------------------------------------ PDU types ---
namespace pdu {
inline constexpr uint8_t kIcReq = 0x00;
inline constexpr uint8_t kIcResp = 0x01;
inline constexpr uint8_t kH2cTermReq = 0x02;
inline constexpr uint8_t kC2hTermReq = 0x03;
inline constexpr uint8_t kCapsuleCmd = 0x04;
inline constexpr uint8_t kCapsuleResp = 0x05;
inline constexpr uint8_t kH2cData = 0x06;
inline constexpr uint8_t kC2hData = 0x07;
inline constexpr uint8_t kR2t = 0x09;  // 08h is reserved
}  // namespace pdu

// Common header FLAGS (3.6.2, CH). Which bits a PDU type may carry:
//   CapsuleCmd, H2CData, C2HData: HDGSTF, DDGSTF; CapsuleResp, R2T: HDGSTF only;
//   H2CData, C2HData: LAST_PDU; C2HData: SUCCESS; ICReq, ICResp, TermReq: none.
namespace flags {
inline constexpr uint8_t kHdgst = 1u << 0;    // HDGSTF: a header digest follows the header
inline constexpr uint8_t kDdgst = 1u << 1;    // DDGSTF: a data digest follows the PDU data
inline constexpr uint8_t kLastPdu = 1u << 2;  // the last data PDU of this command (or this R2T)
// C2HData with LAST_PDU only: the command succeeded and no CapsuleResp follows.
inline constexpr uint8_t kSuccess = 1u << 3;
}  // namespace flags

// ICReq/ICResp DGST: the digests the host asks for / the controller grants.
namespace dgst {
inline constexpr uint8_t kHdgstEnable = 1u << 0;
inline constexpr uint8_t kDdgstEnable = 1u << 1;
}  // namespace dgst

// ------------------------------------------------------------------------- digests ---
// HDGST covers the HLEN header bytes; DDGST covers the PDU data only (not the padding before
// it). Both are CRC32C (Castagnoli): initial value ~0, result inverted, stored little-endian.
inline constexpr uint32_t kDigestSize = 4;
inline constexpr uint32_t kCrc32cPolynomial = 0x1edc6f41;
inline constexpr uint32_t kCrc32cPolynomialReflected = 0x82f63b78;  // for LSB-first tables
inline constexpr uint32_t kCrc32cCheck = 0xe3069283;                // CRC32C of "123456789"

// ------------------------------------------------------------------- header lengths ---
// HLEN is fixed per PDU type (it excludes the header digest).
inline constexpr uint8_t kCommonHeaderLength = 8;
inline constexpr uint8_t kIcReqHlen = 128;
inline constexpr uint8_t kIcRespHlen = 128;
inline constexpr uint8_t kTermReqHlen = 24;
inline constexpr uint8_t kCapsuleCmdHlen = 72;   // CH + the 64-byte SQE
inline constexpr uint8_t kCapsuleRespHlen = 24;  // CH + the 16-byte CQE
inline constexpr uint8_t kDataHlen = 24;         // H2CData and C2HData
inline constexpr uint8_t kR2tHlen = 24;
inline constexpr uint8_t kMaxHlen = 128;

// HLEN of a PDU type; 0 for a type this version does not define.
constexpr uint8_t hlen_of(uint8_t type) {
  switch (type) {
    case pdu::kIcReq:
    case pdu::kIcResp:
      return kIcReqHlen;
    case pdu::kH2cTermReq:
    case pdu::kC2hTermReq:
      return kTermReqHlen;
    case pdu::kCapsuleCmd:
      return kCapsuleCmdHlen;
    case pdu::kCapsuleResp:
      return kCapsuleRespHlen;
    case pdu::kH2cData:
    case pdu::kC2hData:
      return kDataHlen;
    case pdu::kR2t:
      return kR2tHlen;
    default:
      return 0;
  }
}

// --------------------------------------------------------------- alignment and limits ---
// HPDA (ICReq: data the controller sends) and CPDA (ICResp: data the host sends) are 0's based
// counts of dwords, 0..31: 0 asks for no more than the dword alignment headers give anyway,
// 1 for 8 bytes, 31 for 128 bytes.
inline constexpr uint8_t kMaxPda = 31;
constexpr uint32_t pda_alignment(uint8_t pda) { return (uint32_t{pda} + 1) * 4; }

// The smallest PDO for a PDU carrying data: the header, its digest when HDGSTF is set, then
// padding up to the receiver's alignment. A PDU without data has PDO 0.
constexpr uint32_t data_offset(uint8_t hlen, bool hdgst, uint8_t pda) {
  const uint32_t after_header = hlen + (hdgst ? kDigestSize : 0);
  const uint32_t a = pda_alignment(pda);
  return (after_header + a - 1) / a * a;
}

// PLEN of a PDU: with data, everything up to and including the data digest; without data, the
// header and its digest.
constexpr uint32_t pdu_length(uint8_t hlen, bool hdgst, uint32_t pdo, uint32_t data_length,
                              bool ddgst) {
  if (data_length == 0) return hlen + (hdgst ? kDigestSize : 0);
  return pdo + data_length + (ddgst ? kDigestSize : 0);
}

// ICResp MAXH2CDATA: bytes of data per H2CData PDU, a multiple of 4, at least 4 KiB.
inline constexpr uint32_t kMinMaxH2cData = 4096;
// TermReq: the PDU data is (the start of) the header in error; PLEN is at most 152.
inline constexpr uint32_t kTermReqMaxDataLength = 128;
inline constexpr uint32_t kTermReqMaxPlen = kTermReqHlen + kTermReqMaxDataLength;
// In-capsule data the admin queue accepts (Connect's 1024 bytes fit); Linux's
// NVME_TCP_ADMIN_CCSZ. I/O queues advertise theirs in IOCCSZ; ICDOFF must be 0 on TCP.
inline constexpr uint32_t kAdminInCapsuleDataSize = 8192;

// ---------------------------------------------------------------------------- PDUs ---
// Common header (3.6.2: CH), the first 8 bytes of every PDU.
struct CommonHeader {
  uint8_t type;   // pdu::k*
  uint8_t flags;  // flags::k*
  uint8_t hlen;   // header length without the header digest: hlen_of(type)
  uint8_t pdo;    // offset of the PDU data from the start of the PDU; 0 without data
  uint32_t plen;  // the whole PDU: header, digests, padding, data
};
static_assert(sizeof(CommonHeader) == kCommonHeaderLength);
static_assert(offsetof(CommonHeader, plen) == 4);

// ICReq (3.6.2: Initialize Connection Request), host to controller, first PDU on a connection.
// HLEN = PLEN = 128, PDO 0, no digests.
struct IcReq {
  CommonHeader ch;
  uint16_t pfv;     // kPfv10
  uint8_t hpda;     // alignment the host wants for C2H data (0's based dwords)
  uint8_t dgst;     // dgst::k* the host asks for
  uint32_t maxr2t;  // R2Ts per command the host can have outstanding, 0's based
  uint8_t reserved16[112];
};
static_assert(sizeof(IcReq) == kIcReqHlen);
static_assert(offsetof(IcReq, pfv) == 8 && offsetof(IcReq, hpda) == 10 &&
              offsetof(IcReq, dgst) == 11 && offsetof(IcReq, maxr2t) == 12);

// ICResp (3.6.2.3: Initialize Connection Response), controller to host.
struct IcResp {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t cpda;         // alignment the controller wants for H2C data (0's based dwords)
  uint8_t dgst;         // dgst::k* in force on this connection from now on
  uint32_t maxh2cdata;  // bytes of data per H2CData PDU (>= kMinMaxH2cData, dword multiple)
  uint8_t reserved16[112];
};
static_assert(sizeof(IcResp) == kIcRespHlen);
static_assert(offsetof(IcResp, cpda) == 10 && offsetof(IcResp, dgst) == 11 &&
              offsetof(IcResp, maxh2cdata) == 12);

// H2CTermReq / C2HTermReq (3.6.2: Terminate Connection Request): a fatal transport error; the
// sender closes the connection after it. FEI sits unaligned at bytes 13:10, hence packed.
struct TermReq {
  CommonHeader ch;
  uint16_t fes;  // fes::k*
  uint32_t fei;  // per FES, see below; 0 otherwise
  uint8_t reserved14[10];
} __attribute__((packed));
static_assert(sizeof(TermReq) == kTermReqHlen);
static_assert(offsetof(TermReq, fes) == 8 && offsetof(TermReq, fei) == 10 &&
              offsetof(TermReq, reserved14) == 14);

// Fatal Error Status. 05h means "R2T Limit Exceeded" in an H2CTermReq (the controller sent
// more R2Ts than MAXR2T) and "Data Transfer Limit Exceeded" in a C2HTermReq (an H2CData PDU
// carried more than MAXH2CDATA). A data digest error is not fatal: the command completes with
// nvme::sc::kTransientTransportError instead.
namespace fes {
inline constexpr uint16_t kInvalidHeaderField = 0x01;  // FEI: byte offset of the field
inline constexpr uint16_t kPduSequenceError = 0x02;
inline constexpr uint16_t kHeaderDigestError = 0x03;
inline constexpr uint16_t kDataTransferOutOfRange = 0x04;
inline constexpr uint16_t kR2tLimitExceeded = 0x05;           // H2CTermReq
inline constexpr uint16_t kDataTransferLimitExceeded = 0x05;  // C2HTermReq
inline constexpr uint16_t kUnsupportedParameter = 0x06;  // FEI: offset of the ICReq/ICResp field
}  // namespace fes

// CapsuleCmd (3.6.2: Command Capsule), host to controller: the SQE, then optionally a header
// digest, padding to PDO, in-capsule data and a data digest.
struct CapsuleCmd {
  CommonHeader ch;
  nvme::SubmissionEntry sqe;
};
static_assert(sizeof(CapsuleCmd) == kCapsuleCmdHlen);
static_assert(offsetof(CapsuleCmd, sqe) == 8);

// CapsuleResp (3.6.2: Response Capsule), controller to host: the CQE, never data.
struct CapsuleResp {
  CommonHeader ch;
  nvme::CompletionEntry cqe;
};
static_assert(sizeof(CapsuleResp) == kCapsuleRespHlen);
static_assert(offsetof(CapsuleResp, cqe) == 8);

// H2CData (3.6.2: Host to Controller Data): write data the controller asked for with an R2T.
struct H2cData {
  CommonHeader ch;
  uint16_t cccid;  // command capsule CID
  uint16_t ttag;   // the R2T's transfer tag
  uint32_t datao;  // offset of this PDU's data within the command's data
  uint32_t datal;  // bytes of data in this PDU (<= MAXH2CDATA)
  uint8_t reserved20[4];
};
static_assert(sizeof(H2cData) == kDataHlen);
static_assert(offsetof(H2cData, cccid) == 8 && offsetof(H2cData, ttag) == 10 &&
              offsetof(H2cData, datao) == 12 && offsetof(H2cData, datal) == 16);

// C2HData (3.6.2: Controller to Host Data): read data; no transfer tag.
struct C2hData {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t reserved10;
  uint32_t datao;
  uint32_t datal;
  uint8_t reserved20[4];
};
static_assert(sizeof(C2hData) == kDataHlen);
static_assert(offsetof(C2hData, cccid) == 8 && offsetof(C2hData, datao) == 12 &&
              offsetof(C2hData, datal) == 16);

// R2T (3.6.2: Ready to Transfer), controller to host: send R2TL bytes from R2TO in H2CData
// PDUs carrying TTAG. Never data.
struct R2t {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;  // controller-chosen, echoed in the H2CData PDUs
  uint32_t r2to;  // offset within the command's data
  uint32_t r2tl;  // bytes requested
  uint8_t reserved20[4];
};
static_assert(sizeof(R2t) == kR2tHlen);
static_assert(offsetof(R2t, cccid) == 8 && offsetof(R2t, ttag) == 10 && offsetof(R2t, r2to) == 12 &&
              offsetof(R2t, r2tl) == 16);

}  // namespace pollux::spec::nvme_tcp
