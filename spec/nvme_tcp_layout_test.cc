// spec/nvme_tcp.h against the byte layouts of the NVMe/TCP Transport Specification 1.0a (3.6.2),
// cross-checked with Linux's include/linux/nvme-tcp.h and SPDK's include/spdk/nvmf_spec.h.
// Every field's offset is checked at compile time; the tests build PDUs field by field and
// compare them with byte arrays written from the specification's PDU figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "spec/nvme_tcp.h"

namespace pollux::spec::nvme_tcp {
namespace {

// ------------------------------------------------------------ every field, every PDU ---
static_assert(offsetof(CommonHeader, type) == 0);
static_assert(offsetof(CommonHeader, flags) == 1);
static_assert(offsetof(CommonHeader, hlen) == 2);
static_assert(offsetof(CommonHeader, pdo) == 3);
static_assert(offsetof(CommonHeader, plen) == 4);
static_assert(sizeof(CommonHeader) == 8);

static_assert(offsetof(IcReq, ch) == 0);
static_assert(offsetof(IcReq, pfv) == 8);
static_assert(offsetof(IcReq, hpda) == 10);
static_assert(offsetof(IcReq, dgst) == 11);
static_assert(offsetof(IcReq, maxr2t) == 12);
static_assert(offsetof(IcReq, reserved16) == 16);
static_assert(sizeof(IcReq) == 128);

static_assert(offsetof(IcResp, ch) == 0);
static_assert(offsetof(IcResp, pfv) == 8);
static_assert(offsetof(IcResp, cpda) == 10);
static_assert(offsetof(IcResp, dgst) == 11);
static_assert(offsetof(IcResp, maxh2cdata) == 12);
static_assert(offsetof(IcResp, reserved16) == 16);
static_assert(sizeof(IcResp) == 128);

static_assert(offsetof(TermReq, ch) == 0);
static_assert(offsetof(TermReq, fes) == 8);
static_assert(offsetof(TermReq, fei) == 10);  // unaligned, as in the spec
static_assert(offsetof(TermReq, reserved14) == 14);
static_assert(sizeof(TermReq) == 24);

static_assert(offsetof(CapsuleCmd, ch) == 0);
static_assert(offsetof(CapsuleCmd, sqe) == 8);
static_assert(offsetof(CapsuleCmd, sqe) + offsetof(nvme::SubmissionEntry, dptr) == 32);
static_assert(sizeof(CapsuleCmd) == 72);

static_assert(offsetof(CapsuleResp, ch) == 0);
static_assert(offsetof(CapsuleResp, cqe) == 8);
static_assert(sizeof(CapsuleResp) == 24);

static_assert(offsetof(H2cData, ch) == 0);
static_assert(offsetof(H2cData, cccid) == 8);
static_assert(offsetof(H2cData, ttag) == 10);
static_assert(offsetof(H2cData, datao) == 12);
static_assert(offsetof(H2cData, datal) == 16);
static_assert(offsetof(H2cData, reserved20) == 20);
static_assert(sizeof(H2cData) == 24);

static_assert(offsetof(C2hData, ch) == 0);
static_assert(offsetof(C2hData, cccid) == 8);
static_assert(offsetof(C2hData, reserved10) == 10);
static_assert(offsetof(C2hData, datao) == 12);
static_assert(offsetof(C2hData, datal) == 16);
static_assert(offsetof(C2hData, reserved20) == 20);
static_assert(sizeof(C2hData) == 24);

static_assert(offsetof(R2t, ch) == 0);
static_assert(offsetof(R2t, cccid) == 8);
static_assert(offsetof(R2t, ttag) == 10);
static_assert(offsetof(R2t, r2to) == 12);
static_assert(offsetof(R2t, r2tl) == 16);
static_assert(offsetof(R2t, reserved20) == 20);
static_assert(sizeof(R2t) == 24);

template <typename T>
std::vector<uint8_t> bytes_of(const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  return {p, p + sizeof v};
}

// The first n bytes of a PDU as written in the spec figure; the rest of the header must be 0.
template <typename T>
std::vector<uint8_t> expect_header(std::initializer_list<uint8_t> head) {
  std::vector<uint8_t> v(sizeof(T), 0);
  std::copy(head.begin(), head.end(), v.begin());
  return v;
}

TEST(NvmeTcpSpec, PduTypesAndFlagsAreTheSpecValues) {
  // Linux include/linux/nvme-tcp.h (enum nvme_tcp_pdu_type, nvme_tcp_pdu_flags) and SPDK agree.
  EXPECT_EQ(pdu::kIcReq, 0x00);
  EXPECT_EQ(pdu::kIcResp, 0x01);
  EXPECT_EQ(pdu::kH2cTermReq, 0x02);
  EXPECT_EQ(pdu::kC2hTermReq, 0x03);
  EXPECT_EQ(pdu::kCapsuleCmd, 0x04);
  EXPECT_EQ(pdu::kCapsuleResp, 0x05);
  EXPECT_EQ(pdu::kH2cData, 0x06);
  EXPECT_EQ(pdu::kC2hData, 0x07);
  EXPECT_EQ(pdu::kR2t, 0x09);
  EXPECT_EQ(flags::kHdgst, 0x01);
  EXPECT_EQ(flags::kDdgst, 0x02);
  EXPECT_EQ(flags::kLastPdu, 0x04);
  EXPECT_EQ(flags::kSuccess, 0x08);
  EXPECT_EQ(dgst::kHdgstEnable, 0x01);
  EXPECT_EQ(dgst::kDdgstEnable, 0x02);
  EXPECT_EQ(fes::kInvalidHeaderField, 0x01);
  EXPECT_EQ(fes::kPduSequenceError, 0x02);
  EXPECT_EQ(fes::kHeaderDigestError, 0x03);
  EXPECT_EQ(fes::kDataTransferOutOfRange, 0x04);
  EXPECT_EQ(fes::kR2tLimitExceeded, 0x05);
  EXPECT_EQ(fes::kDataTransferLimitExceeded, 0x05);
  EXPECT_EQ(fes::kUnsupportedParameter, 0x06);
  EXPECT_EQ(kIoPort, 4420);
  EXPECT_EQ(kDiscoveryPort, 8009);
  EXPECT_EQ(kDigestSize, 4u);
  EXPECT_EQ(kTermReqMaxPlen, 152u);  // Linux NVME_TCP_MAX_C2HTERM_PLEN
}

TEST(NvmeTcpSpec, HlenIsFixedPerType) {
  EXPECT_EQ(hlen_of(pdu::kIcReq), 128);
  EXPECT_EQ(hlen_of(pdu::kIcResp), 128);
  EXPECT_EQ(hlen_of(pdu::kH2cTermReq), 24);
  EXPECT_EQ(hlen_of(pdu::kC2hTermReq), 24);
  EXPECT_EQ(hlen_of(pdu::kCapsuleCmd), 72);
  EXPECT_EQ(hlen_of(pdu::kCapsuleResp), 24);
  EXPECT_EQ(hlen_of(pdu::kH2cData), 24);
  EXPECT_EQ(hlen_of(pdu::kC2hData), 24);
  EXPECT_EQ(hlen_of(pdu::kR2t), 24);
  EXPECT_EQ(hlen_of(0x08), 0);  // reserved
  EXPECT_EQ(hlen_of(0x0a), 0);
  EXPECT_EQ(hlen_of(0xff), 0);
  for (uint8_t t = 0; t < 0x10; ++t) EXPECT_LE(hlen_of(t), kMaxHlen);
}

TEST(NvmeTcpSpec, DataAlignmentIsInDwordsZeroBased) {
  EXPECT_EQ(pda_alignment(0), 4u);
  EXPECT_EQ(pda_alignment(1), 8u);
  EXPECT_EQ(pda_alignment(kMaxPda), 128u);
  EXPECT_EQ(data_offset(kCapsuleCmdHlen, false, 0), 72u);
  EXPECT_EQ(data_offset(kCapsuleCmdHlen, true, 0), 76u);
  EXPECT_EQ(data_offset(kCapsuleCmdHlen, true, 3), 80u);  // 16-byte aligned
  EXPECT_EQ(data_offset(kCapsuleCmdHlen, true, kMaxPda), 128u);
  EXPECT_EQ(data_offset(kDataHlen, false, 1), 24u);
  EXPECT_EQ(data_offset(kDataHlen, true, 1), 32u);
  // The largest PDO any data PDU can need still fits the 8-bit field.
  EXPECT_LE(data_offset(kCapsuleCmdHlen, true, kMaxPda), 255u);
  EXPECT_EQ(pdu_length(kCapsuleRespHlen, false, 0, 0, false), 24u);
  EXPECT_EQ(pdu_length(kCapsuleRespHlen, true, 0, 0, true), 28u);  // no data: no data digest
  EXPECT_EQ(pdu_length(kCapsuleCmdHlen, true, 128, 4096, true), 128u + 4096 + 4);
}

TEST(NvmeTcpSpec, Crc32cConstantsAgree) {
  // The reflected polynomial is the bit reversal of the normal one, and a bitwise CRC32C with
  // it gives the standard check value.
  uint32_t reversed = 0;
  for (int i = 0; i < 32; ++i) reversed |= ((kCrc32cPolynomial >> i) & 1u) << (31 - i);
  EXPECT_EQ(reversed, kCrc32cPolynomialReflected);
  uint32_t crc = ~0u;
  for (char c : std::string_view("123456789")) {
    crc ^= static_cast<uint8_t>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (kCrc32cPolynomialReflected & (0u - (crc & 1)));
  }
  EXPECT_EQ(~crc, kCrc32cCheck);
}

TEST(NvmeTcpSpec, IcReqMatchesTheSpecFigure) {
  IcReq req{};
  req.ch = {pdu::kIcReq, 0, kIcReqHlen, 0, kIcReqHlen};
  req.pfv = kPfv10;
  req.hpda = 1;  // C2H data 8-byte aligned
  req.dgst = dgst::kHdgstEnable | dgst::kDdgstEnable;
  req.maxr2t = 3;
  EXPECT_EQ(bytes_of(req), expect_header<IcReq>({
                               0x00, 0x00, 0x80, 0x00,  // type, flags, HLEN 128, PDO 0
                               0x80, 0x00, 0x00, 0x00,  // PLEN 128
                               0x00, 0x00,              // PFV 0: version 1.0
                               0x01,                    // HPDA
                               0x03,                    // DGST: HDGST_ENABLE | DDGST_ENABLE
                               0x03, 0x00, 0x00, 0x00,  // MAXR2T (0's based: 4)
                           }));
}

TEST(NvmeTcpSpec, IcRespMatchesTheSpecFigure) {
  IcResp resp{};
  resp.ch = {pdu::kIcResp, 0, kIcRespHlen, 0, kIcRespHlen};
  resp.pfv = kPfv10;
  resp.cpda = 1;
  resp.dgst = dgst::kHdgstEnable;
  resp.maxh2cdata = 128 * 1024;
  EXPECT_EQ(bytes_of(resp), expect_header<IcResp>({
                                0x01, 0x00, 0x80, 0x00,  // type, flags, HLEN, PDO
                                0x80, 0x00, 0x00, 0x00,  // PLEN
                                0x00, 0x00,              // PFV
                                0x01,                    // CPDA: 8-byte aligned H2C data
                                0x01,                    // DGST: header digest only
                                0x00, 0x00, 0x02, 0x00,  // MAXH2CDATA 131072
                            }));
  EXPECT_EQ(resp.maxh2cdata % 4, 0u);
  EXPECT_GE(resp.maxh2cdata, kMinMaxH2cData);
}

TEST(NvmeTcpSpec, CapsuleCmdCarriesTheSqeAfterTheCommonHeader) {
  // A 4 KiB Write with in-capsule data, both digests, CPDA 0.
  CapsuleCmd cmd{};
  const uint32_t pdo = data_offset(kCapsuleCmdHlen, true, 0);
  cmd.ch = {pdu::kCapsuleCmd, flags::kHdgst | flags::kDdgst, kCapsuleCmdHlen,
            static_cast<uint8_t>(pdo), pdu_length(kCapsuleCmdHlen, true, pdo, 4096, true)};
  cmd.sqe.opcode = nvme::nvm::kWrite;
  cmd.sqe.set_psdt(nvme::kPsdtSglMptrContiguous);
  cmd.sqe.cid = 0x1234;
  cmd.sqe.nsid = 1;
  cmd.sqe.dptr.sgl1 = {
      0,
      4096,
      {},
      nvme::SglDescriptor::make_id(nvme::sgl::kTypeDataBlock, nvme::sgl::kSubtypeOffset)};
  cmd.sqe.cdw10 = 0x10;  // SLBA
  cmd.sqe.cdw12 = 7;     // 8 blocks
  EXPECT_EQ(bytes_of(cmd),
            expect_header<CapsuleCmd>({
                0x04, 0x03, 0x48, 0x4c,  // CapsuleCmd, HDGSTF|DDGSTF, 72, PDO 76
                0x50, 0x10, 0x00, 0x00,  // PLEN 76 + 4096 + 4 = 4176
                0x01, 0x40, 0x34, 0x12,  // SQE: Write, PSDT 01b, CID
                0x01, 0x00, 0x00, 0x00,  // NSID
                0x00, 0x00, 0x00, 0x00,  // CDW2
                0x00, 0x00, 0x00, 0x00,  // CDW3
                0x00, 0x00, 0x00, 0x00,  // MPTR
                0x00, 0x00, 0x00, 0x00,  // MPTR
                0x00, 0x00, 0x00, 0x00,  // SGL1 address: offset 0 in the in-capsule data
                0x00, 0x00, 0x00, 0x00,  // SGL1 address
                0x00, 0x10, 0x00, 0x00,  // SGL1 length 4096
                0x00, 0x00, 0x00, 0x01,  // SGL1 id: Data Block, Offset
                0x10, 0x00, 0x00, 0x00,  // CDW10: SLBA
                0x00, 0x00, 0x00, 0x00,  // CDW11
                0x07, 0x00, 0x00, 0x00,  // CDW12: 8 blocks
            }));
}

TEST(NvmeTcpSpec, CapsuleRespCarriesTheCqe) {
  CapsuleResp resp{};
  resp.ch = {pdu::kCapsuleResp, flags::kHdgst, kCapsuleRespHlen, 0,
             pdu_length(kCapsuleRespHlen, true, 0, 0, false)};
  resp.cqe.sqhd = 5;
  resp.cqe.sqid = 1;
  resp.cqe.cid = 0x1234;
  resp.cqe.status = nvme::status::make(nvme::sct::kGeneric, nvme::sc::kTransientTransportError);
  EXPECT_EQ(bytes_of(resp), expect_header<CapsuleResp>({
                                0x05, 0x01, 0x18, 0x00,  // CapsuleResp, HDGSTF, 24, no data
                                0x1c, 0x00, 0x00, 0x00,  // PLEN 24 + header digest
                                0x00, 0x00, 0x00, 0x00,  // DW0
                                0x00, 0x00, 0x00, 0x00,  // DW1
                                0x05, 0x00, 0x01, 0x00,  // SQHD, SQID
                                0x34, 0x12, 0x44, 0x00,  // CID, status 22h << 1
                            }));
}

TEST(NvmeTcpSpec, H2cDataMatchesTheSpecFigure) {
  H2cData d{};
  d.ch = {pdu::kH2cData, flags::kLastPdu, kDataHlen, kDataHlen,
          pdu_length(kDataHlen, false, kDataHlen, 4096, false)};
  d.cccid = 0x1234;
  d.ttag = 7;
  d.datao = 0x2000;
  d.datal = 0x1000;
  EXPECT_EQ(bytes_of(d), expect_header<H2cData>({
                             0x06, 0x04, 0x18, 0x18,  // H2CData, LAST_PDU, HLEN 24, PDO 24
                             0x18, 0x10, 0x00, 0x00,  // PLEN 4120
                             0x34, 0x12, 0x07, 0x00,  // CCCID, TTAG
                             0x00, 0x20, 0x00, 0x00,  // DATAO
                             0x00, 0x10, 0x00, 0x00,  // DATAL
                         }));
}

TEST(NvmeTcpSpec, C2hDataWithSuccessAndAlignedData) {
  // HPDA 3 (16 bytes) with a header digest: PDO 32, 4 bytes of padding after the digest.
  C2hData d{};
  const uint32_t pdo = data_offset(kDataHlen, true, 3);
  d.ch = {pdu::kC2hData, flags::kHdgst | flags::kDdgst | flags::kLastPdu | flags::kSuccess,
          kDataHlen, static_cast<uint8_t>(pdo), pdu_length(kDataHlen, true, pdo, 512, true)};
  d.cccid = 0x0042;
  d.datao = 0;
  d.datal = 512;
  EXPECT_EQ(bytes_of(d), expect_header<C2hData>({
                             0x07, 0x0f, 0x18, 0x20,  // C2HData, all four flags, 24, PDO 32
                             0x24, 0x02, 0x00, 0x00,  // PLEN 32 + 512 + 4 = 548
                             0x42, 0x00, 0x00, 0x00,  // CCCID, reserved
                             0x00, 0x00, 0x00, 0x00,  // DATAO
                             0x00, 0x02, 0x00, 0x00,  // DATAL
                         }));
}

TEST(NvmeTcpSpec, R2tMatchesTheSpecFigure) {
  R2t r{};
  r.ch = {pdu::kR2t, 0, kR2tHlen, 0, kR2tHlen};
  r.cccid = 0x1234;
  r.ttag = 7;
  r.r2to = 0;
  r.r2tl = 128 * 1024;
  EXPECT_EQ(bytes_of(r), expect_header<R2t>({
                             0x09, 0x00, 0x18, 0x00,  // R2T, no data: PDO 0
                             0x18, 0x00, 0x00, 0x00,  // PLEN 24
                             0x34, 0x12, 0x07, 0x00,  // CCCID, TTAG
                             0x00, 0x00, 0x00, 0x00,  // R2TO
                             0x00, 0x00, 0x02, 0x00,  // R2TL
                         }));
}

TEST(NvmeTcpSpec, TermReqFeiIsUnaligned) {
  // A C2HTermReq for a CapsuleCmd whose PDO (header byte 3) was invalid; its data is the
  // 72-byte header in error.
  TermReq t{};
  t.ch = {pdu::kC2hTermReq, 0, kTermReqHlen, 0, kTermReqHlen + kCapsuleCmdHlen};
  t.fes = fes::kInvalidHeaderField;
  t.fei = offsetof(CommonHeader, pdo);
  EXPECT_EQ(bytes_of(t), expect_header<TermReq>({
                             0x03, 0x00, 0x18, 0x00,  // C2HTermReq, HLEN 24
                             0x60, 0x00, 0x00, 0x00,  // PLEN 24 + 72
                             0x01, 0x00,              // FES: invalid PDU header field
                             0x03, 0x00, 0x00, 0x00,  // FEI: byte 3
                         }));
  EXPECT_LE(t.ch.plen, kTermReqMaxPlen);
  // Read back from a received buffer the way a receiver does.
  const auto raw = bytes_of(t);
  TermReq back;
  std::memcpy(&back, raw.data(), sizeof back);
  const uint32_t fei = back.fei;
  EXPECT_EQ(fei, 3u);
}

}  // namespace
}  // namespace pollux::spec::nvme_tcp
