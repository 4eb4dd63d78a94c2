// spec/nvme_fabrics.h against the byte layouts of NVMe Base 2.0 chapter 6 (fabrics commands),
// the Discovery log page and the Identify Controller fabrics fields, cross-checked with Linux's
// include/linux/nvme.h, SPDK's include/spdk/nvmf_spec.h and libnvme's types.h. Every field's
// offset is checked at compile time; the tests build commands field by field and read them
// back as the 64-byte SQE the transport carries, or compare them byte by byte.
#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "spec/nvme_fabrics.h"

namespace pollux::spec::nvmf {
namespace {

// ------------------------------------------------------------ every field, every layout ---
static_assert(offsetof(FabricsCommand, opcode) == 0);
static_assert(offsetof(FabricsCommand, flags) == 1);
static_assert(offsetof(FabricsCommand, cid) == 2);
static_assert(offsetof(FabricsCommand, fctype) == 4);
static_assert(offsetof(FabricsCommand, reserved5) == 5);
static_assert(offsetof(FabricsCommand, specific) == 40);
static_assert(sizeof(FabricsCommand) == 64);

static_assert(offsetof(ConnectCommand, opcode) == 0);
static_assert(offsetof(ConnectCommand, flags) == 1);
static_assert(offsetof(ConnectCommand, cid) == 2);
static_assert(offsetof(ConnectCommand, fctype) == 4);
static_assert(offsetof(ConnectCommand, reserved5) == 5);
static_assert(offsetof(ConnectCommand, sgl1) == 24);
static_assert(offsetof(ConnectCommand, recfmt) == 40);
static_assert(offsetof(ConnectCommand, qid) == 42);
static_assert(offsetof(ConnectCommand, sqsize) == 44);
static_assert(offsetof(ConnectCommand, cattr) == 46);
static_assert(offsetof(ConnectCommand, reserved47) == 47);
static_assert(offsetof(ConnectCommand, kato) == 48);
static_assert(offsetof(ConnectCommand, reserved52) == 52);
static_assert(sizeof(ConnectCommand) == 64);

static_assert(offsetof(ConnectData, hostid) == 0);
static_assert(offsetof(ConnectData, cntlid) == 16);
static_assert(offsetof(ConnectData, reserved18) == 18);
static_assert(offsetof(ConnectData, subnqn) == 256);
static_assert(offsetof(ConnectData, hostnqn) == 512);
static_assert(offsetof(ConnectData, reserved768) == 768);
static_assert(sizeof(ConnectData) == 1024);

static_assert(offsetof(PropertyGetCommand, fctype) == 4);
static_assert(offsetof(PropertyGetCommand, reserved5) == 5);
static_assert(offsetof(PropertyGetCommand, attrib) == 40);
static_assert(offsetof(PropertyGetCommand, reserved41) == 41);
static_assert(offsetof(PropertyGetCommand, ofst) == 44);
static_assert(offsetof(PropertyGetCommand, reserved48) == 48);
static_assert(sizeof(PropertyGetCommand) == 64);

static_assert(offsetof(PropertySetCommand, fctype) == 4);
static_assert(offsetof(PropertySetCommand, reserved5) == 5);
static_assert(offsetof(PropertySetCommand, attrib) == 40);
static_assert(offsetof(PropertySetCommand, reserved41) == 41);
static_assert(offsetof(PropertySetCommand, ofst) == 44);
static_assert(offsetof(PropertySetCommand, value) == 48);
static_assert(offsetof(PropertySetCommand, reserved56) == 56);
static_assert(sizeof(PropertySetCommand) == 64);

static_assert(offsetof(DisconnectCommand, fctype) == 4);
static_assert(offsetof(DisconnectCommand, reserved5) == 5);
static_assert(offsetof(DisconnectCommand, recfmt) == 40);
static_assert(offsetof(DisconnectCommand, reserved42) == 42);
static_assert(sizeof(DisconnectCommand) == 64);

static_assert(offsetof(AuthenticationCommand, fctype) == 4);
static_assert(offsetof(AuthenticationCommand, reserved5) == 5);
static_assert(offsetof(AuthenticationCommand, sgl1) == 24);
static_assert(offsetof(AuthenticationCommand, reserved40) == 40);
static_assert(offsetof(AuthenticationCommand, spsp0) == 41);
static_assert(offsetof(AuthenticationCommand, spsp1) == 42);
static_assert(offsetof(AuthenticationCommand, secp) == 43);
static_assert(offsetof(AuthenticationCommand, length) == 44);
static_assert(offsetof(AuthenticationCommand, reserved48) == 48);
static_assert(sizeof(AuthenticationCommand) == 64);

static_assert(offsetof(KeyedSglDescriptor, address) == 0);
static_assert(offsetof(KeyedSglDescriptor, length_bytes) == 8);
static_assert(offsetof(KeyedSglDescriptor, key_bytes) == 11);
static_assert(offsetof(KeyedSglDescriptor, id) == 15);
static_assert(sizeof(KeyedSglDescriptor) == sizeof(nvme::SglDescriptor));

static_assert(offsetof(IdentifyControllerFabrics, ioccsz) == 0);  // Identify byte 1792
static_assert(offsetof(IdentifyControllerFabrics, iorcsz) == 4);
static_assert(offsetof(IdentifyControllerFabrics, icdoff) == 8);
static_assert(offsetof(IdentifyControllerFabrics, fcatt) == 10);
static_assert(offsetof(IdentifyControllerFabrics, msdbd) == 11);
static_assert(offsetof(IdentifyControllerFabrics, ofcs) == 12);
static_assert(offsetof(IdentifyControllerFabrics, reserved14) == 14);
static_assert(sizeof(IdentifyControllerFabrics) == 256);

static_assert(offsetof(DiscoveryLogHeader, genctr) == 0);
static_assert(offsetof(DiscoveryLogHeader, numrec) == 8);
static_assert(offsetof(DiscoveryLogHeader, recfmt) == 16);
static_assert(offsetof(DiscoveryLogHeader, reserved18) == 18);
static_assert(sizeof(DiscoveryLogHeader) == 1024);

static_assert(offsetof(DiscoveryLogEntry, trtype) == 0);
static_assert(offsetof(DiscoveryLogEntry, adrfam) == 1);
static_assert(offsetof(DiscoveryLogEntry, subtype) == 2);
static_assert(offsetof(DiscoveryLogEntry, treq) == 3);
static_assert(offsetof(DiscoveryLogEntry, portid) == 4);
static_assert(offsetof(DiscoveryLogEntry, cntlid) == 6);
static_assert(offsetof(DiscoveryLogEntry, asqsz) == 8);
static_assert(offsetof(DiscoveryLogEntry, eflags) == 10);
static_assert(offsetof(DiscoveryLogEntry, reserved12) == 12);
static_assert(offsetof(DiscoveryLogEntry, trsvcid) == 32);
static_assert(offsetof(DiscoveryLogEntry, reserved64) == 64);
static_assert(offsetof(DiscoveryLogEntry, subnqn) == 256);
static_assert(offsetof(DiscoveryLogEntry, traddr) == 512);
static_assert(offsetof(DiscoveryLogEntry, tsas) == 768);
static_assert(sizeof(DiscoveryLogEntry) == 1024);

// A fabrics command as the SQE a transport carries.
template <typename T>
nvme::SubmissionEntry as_sqe(const T& cmd) {
  static_assert(sizeof(T) == sizeof(nvme::SubmissionEntry));
  nvme::SubmissionEntry e;
  std::memcpy(&e, &cmd, sizeof e);
  return e;
}

template <typename T>
std::vector<uint8_t> bytes_of(const T& v, std::size_t from, std::size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v) + from;
  return {p, p + n};
}

TEST(NvmeFabricsSpec, CommandTypesAndStatusCodesAreTheSpecValues) {
  EXPECT_EQ(kOpcodeFabrics, 0x7f);
  EXPECT_EQ(fctype::kPropertySet, 0x00);
  EXPECT_EQ(fctype::kConnect, 0x01);
  EXPECT_EQ(fctype::kPropertyGet, 0x04);
  EXPECT_EQ(fctype::kAuthenticationSend, 0x05);
  EXPECT_EQ(fctype::kAuthenticationReceive, 0x06);
  EXPECT_EQ(fctype::kDisconnect, 0x08);
  // Data direction in FCTYPE[1:0], as Linux's nvme_is_write() reads it.
  EXPECT_EQ(fctype::kConnect & 3, 1);
  EXPECT_EQ(fctype::kAuthenticationSend & 3, 1);
  EXPECT_EQ(fctype::kAuthenticationReceive & 3, 2);
  EXPECT_EQ(fctype::kPropertyGet & 3, 0);

  EXPECT_EQ(sc::kConnectIncompatibleFormat, 0x80);
  EXPECT_EQ(sc::kConnectControllerBusy, 0x81);
  EXPECT_EQ(sc::kConnectInvalidParameters, 0x82);
  EXPECT_EQ(sc::kConnectRestartDiscovery, 0x83);
  EXPECT_EQ(sc::kConnectInvalidHost, 0x84);
  EXPECT_EQ(sc::kInvalidQueueType, 0x85);
  EXPECT_EQ(sc::kDiscoverRestart, 0x90);
  EXPECT_EQ(sc::kAuthenticationRequired, 0x91);
  // Linux numbers status codes as SCT << 8 | SC: NVME_SC_CONNECT_INVALID_HOST is 0x184,
  // NVME_SC_AUTH_REQUIRED 0x191; the status field holds that shifted past the phase bit.
  EXPECT_EQ(nvme::status::make(nvme::sct::kCommandSpecific, sc::kConnectInvalidHost) >> 1, 0x184);
  EXPECT_EQ(nvme::status::make(nvme::sct::kCommandSpecific, sc::kAuthenticationRequired) >> 1,
            0x191);
}

TEST(NvmeFabricsSpec, AdminConnectCdwFields) {
  // What a host sends first on a new TCP connection: Connect for the admin queue, its data
  // in the capsule.
  ConnectCommand c{};
  c.opcode = kOpcodeFabrics;
  c.flags = nvme::kPsdtSglMptrContiguous << 6;
  c.cid = 1;
  c.fctype = fctype::kConnect;
  c.sgl1 = sgl::in_capsule(sizeof(ConnectData));
  c.recfmt = connect::kRecfmt;
  c.qid = connect::kAdminQid;
  c.sqsize = 31;  // 32 entries
  c.kato = 120000;
  const nvme::SubmissionEntry e = as_sqe(c);
  EXPECT_EQ(e.opcode, 0x7f);
  EXPECT_EQ(e.psdt(), nvme::kPsdtSglMptrContiguous);
  EXPECT_EQ(e.cid, 1);
  EXPECT_EQ(e.nsid, fctype::kConnect);  // FCTYPE is byte 4
  EXPECT_EQ(e.dptr.sgl1.type(), nvme::sgl::kTypeDataBlock);
  EXPECT_EQ(e.dptr.sgl1.subtype(), nvme::sgl::kSubtypeOffset);
  EXPECT_EQ(e.dptr.sgl1.address, 0u);
  EXPECT_EQ(e.dptr.sgl1.length, 1024u);
  EXPECT_EQ(e.cdw10, 0x00000000u);  // RECFMT 0, QID 0
  EXPECT_EQ(e.cdw11, 0x0000001fu);  // SQSIZE 31, CATTR 0
  EXPECT_EQ(e.cdw12, 120000u);      // KATO
  EXPECT_EQ(e.cdw13 | e.cdw14 | e.cdw15, 0u);
}

TEST(NvmeFabricsSpec, IoConnectCdwFields) {
  ConnectCommand c{};
  c.opcode = kOpcodeFabrics;
  c.fctype = fctype::kConnect;
  c.qid = 3;
  c.sqsize = 127;
  c.cattr = connect::kCattrDisableSqFlowControl | 2;  // priority class 2
  const nvme::SubmissionEntry e = as_sqe(c);
  EXPECT_EQ(e.cdw10, 0x00030000u);                       // QID in [31:16]
  EXPECT_EQ(e.cdw11, 0x0006007fu);                       // CATTR in [23:16]
  EXPECT_EQ(connect::kCattrDisableSqFlowControl, 0x04);  // Linux NVME_CONNECT_DISABLE_SQFLOW
}

TEST(NvmeFabricsSpec, ConnectDataBytes) {
  ConnectData d{};
  for (int i = 0; i < 16; ++i) d.hostid[i] = static_cast<uint8_t>(0xa0 + i);
  d.cntlid = connect::kCntlidDynamic;
  std::strcpy(d.subnqn, "nqn.2026-11.dev.pollux:emu0");
  std::strcpy(d.hostnqn, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(bytes_of(d, 14, 6), (std::vector<uint8_t>{0xae, 0xaf, 0xff, 0xff, 0x00, 0x00}));
  const auto* raw = reinterpret_cast<const char*>(&d);
  EXPECT_EQ(std::string_view(raw + 256), "nqn.2026-11.dev.pollux:emu0");
  EXPECT_EQ(std::string_view(raw + 512).substr(0, 32), kNqnUuidPrefix);
  EXPECT_EQ(raw[256 + kNqnFieldSize - 1], '\0');
}

TEST(NvmeFabricsSpec, ConnectResponseDw0) {
  // Linux's target returns cntlid | NVME_CONNECT_AUTHREQ_ATR (1 << 17) when it wants
  // DH-HMAC-CHAP; NVME_CONNECT_AUTHREQ_ASCR is 1 << 18.
  EXPECT_EQ(connect::make_success_dw0(1, connect::kAuthreqAtr), 0x00020001u);
  EXPECT_EQ(connect::make_success_dw0(0x10, connect::kAuthreqAscr), 0x00040010u);
  EXPECT_EQ(connect::cntlid(0x00020001u), 1);
  EXPECT_EQ(connect::authreq(0x00020001u), connect::kAuthreqAtr);
  // Invalid Parameters: an out-of-range QID (command byte 42), a CNTLID (data byte 16).
  EXPECT_EQ(connect::make_invalid_parameter_dw0(offsetof(ConnectCommand, qid), false), 0x2au);
  const uint32_t dw0 = connect::make_invalid_parameter_dw0(offsetof(ConnectData, cntlid), true);
  EXPECT_EQ(dw0, 0x00010010u);
  EXPECT_EQ(connect::ipo(dw0), 16);
  EXPECT_EQ(connect::iattr(dw0), connect::kIattrInData);
}

TEST(NvmeFabricsSpec, PropertyGetOfCsts) {
  PropertyGetCommand g{};
  g.opcode = kOpcodeFabrics;
  g.cid = 7;
  g.fctype = fctype::kPropertyGet;
  g.attrib = property::kSize4;
  g.ofst = nvme::reg::kCsts;
  const nvme::SubmissionEntry e = as_sqe(g);
  EXPECT_EQ(e.nsid, fctype::kPropertyGet);
  EXPECT_EQ(e.cdw10, 0u);     // ATTRIB: 4 bytes
  EXPECT_EQ(e.cdw11, 0x1cu);  // OFST: CSTS
  EXPECT_EQ(bytes_of(g, 40, 8), (std::vector<uint8_t>{0, 0, 0, 0, 0x1c, 0, 0, 0}));
  EXPECT_EQ(property::size_bytes(g.attrib), 4);
  // The value comes back in DW0.
  nvme::CompletionEntry cqe{};
  cqe.dw0 = nvme::csts::kRdy;
  EXPECT_EQ(property_value(cqe), 1u);
}

TEST(NvmeFabricsSpec, PropertyGetOfCapReturnsEightBytes) {
  PropertyGetCommand g{};
  g.opcode = kOpcodeFabrics;
  g.fctype = fctype::kPropertyGet;
  g.attrib = property::kSize8;
  g.ofst = nvme::reg::kCap;
  const nvme::SubmissionEntry e = as_sqe(g);
  EXPECT_EQ(e.cdw10, 1u);
  EXPECT_EQ(e.cdw11, 0u);
  EXPECT_EQ(property::size_bytes(g.attrib), 8);
  nvme::CompletionEntry cqe{};
  cqe.dw0 = 0x0f0107ff;  // QEMU's CAP (ENVIRONMENT.md), low half
  cqe.dw1 = 0x00401820;
  EXPECT_EQ(property_value(cqe), 0x004018200f0107ffull);
  EXPECT_EQ(nvme::cap::mqes(property_value(cqe)), 0x7ffu);
}

TEST(NvmeFabricsSpec, PropertySetOfCc) {
  PropertySetCommand s{};
  s.opcode = kOpcodeFabrics;
  s.fctype = fctype::kPropertySet;
  s.attrib = property::kSize4;
  s.ofst = nvme::reg::kCc;
  s.value = nvme::cc::make(true, 0, 0, nvme::cc::kAmsRoundRobin, nvme::cc::kShnNone, 6, 4);
  const nvme::SubmissionEntry e = as_sqe(s);
  EXPECT_EQ(e.nsid, fctype::kPropertySet);
  EXPECT_EQ(e.cdw10, 0u);
  EXPECT_EQ(e.cdw11, 0x14u);
  EXPECT_EQ(e.cdw12, 0x00460001u);  // VALUE, low dword
  EXPECT_EQ(e.cdw13, 0u);
  EXPECT_EQ(bytes_of(s, 44, 12),
            (std::vector<uint8_t>{0x14, 0, 0, 0, 0x01, 0x00, 0x46, 0x00, 0, 0, 0, 0}));
}

TEST(NvmeFabricsSpec, DisconnectAndAuthenticationCdwFields) {
  DisconnectCommand d{};
  d.opcode = kOpcodeFabrics;
  d.fctype = fctype::kDisconnect;
  d.recfmt = 0;
  EXPECT_EQ(as_sqe(d).nsid, 8u);
  EXPECT_EQ(as_sqe(d).cdw10, 0u);

  // Authentication Send keeps Security Send's CDW10 shape: SECP [31:24], SPSP1, SPSP0 [15:8].
  AuthenticationCommand a{};
  a.opcode = kOpcodeFabrics;
  a.fctype = fctype::kAuthenticationSend;
  a.sgl1 = sgl::in_capsule(0x40);
  a.secp = kSecpNvme;
  a.spsp0 = 0x01;
  a.spsp1 = 0x01;
  a.length = 0x40;
  const nvme::SubmissionEntry e = as_sqe(a);
  EXPECT_EQ(e.nsid, fctype::kAuthenticationSend);
  EXPECT_EQ(e.cdw10, 0xe9010100u);
  EXPECT_EQ(e.cdw11, 0x40u);  // TL
}

TEST(NvmeFabricsSpec, SglForms) {
  // Linux's NVMe/TCP host: in-capsule data is (NVME_SGL_FMT_DATA_DESC << 4) |
  // NVME_SGL_FMT_OFFSET, data moved by R2T/C2HData (NVME_TRANSPORT_SGL_DATA_DESC << 4) |
  // NVME_SGL_FMT_TRANSPORT_A.
  EXPECT_EQ(sgl::kIdInCapsule, 0x01);
  EXPECT_EQ(sgl::kIdTransport, 0x5a);
  const nvme::SglDescriptor t = sgl::transport(128 * 1024);
  EXPECT_EQ(t.address, 0u);
  EXPECT_EQ(t.length, 128u * 1024);
  EXPECT_EQ(bytes_of(t, 12, 4), (std::vector<uint8_t>{0, 0, 0, 0x5a}));

  // Keyed SGL Data Block (RDMA): 3-byte length at byte 8, 4-byte key at byte 11.
  constexpr KeyedSglDescriptor k = KeyedSglDescriptor::make(0x1122334455667788, 0x123456,
                                                            0xdeadbeef, sgl::kSubtypeInvalidateKey);
  static_assert(k.length() == 0x123456 && k.key() == 0xdeadbeef);
  EXPECT_EQ(bytes_of(k, 0, 16),
            (std::vector<uint8_t>{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // address
                                  0x56, 0x34, 0x12,                                // length
                                  0xef, 0xbe, 0xad, 0xde,                          // key
                                  0x4f}));  // Keyed Data Block, Invalidate Key
  EXPECT_EQ(KeyedSglDescriptor::make(0, kKeyedSglMaxLength, 0).length(), 0xffffffu);
}

TEST(NvmeFabricsSpec, IdentifyControllerFabricsFields) {
  IdentifyControllerFabrics f{};
  f.ioccsz = (64 + 8192) / kCapsuleSizeUnit;  // SQE + 8 KiB in-capsule data
  f.iorcsz = 16 / kCapsuleSizeUnit;
  f.icdoff = 0;
  f.fcatt = 0;  // dynamic controller model
  f.msdbd = 1;
  f.ofcs = kOfcsDisconnect;
  nvme::IdentifyController id{};
  std::memcpy(id.nvmeof, &f, sizeof f);
  EXPECT_EQ(bytes_of(id, 1792, 14), (std::vector<uint8_t>{0x04, 0x02, 0, 0,  // IOCCSZ 516
                                                          0x01, 0, 0, 0,     // IORCSZ 1
                                                          0, 0,              // ICDOFF
                                                          0x00,              // FCATT
                                                          0x01,              // MSDBD
                                                          0x01, 0x00}));     // OFCS
}

TEST(NvmeFabricsSpec, DiscoveryLogPage) {
  // A log page of one TCP/IPv4 entry, as a discovery controller returns it.
  std::vector<uint8_t> page(sizeof(DiscoveryLogHeader) + sizeof(DiscoveryLogEntry));
  DiscoveryLogHeader h{};
  h.genctr = 5;
  h.numrec = 1;
  h.recfmt = 0;
  DiscoveryLogEntry e{};
  e.trtype = trtype::kTcp;
  e.adrfam = adrfam::kIpv4;
  e.subtype = subtype::kNvm;
  e.treq = treq::kSecureChannelNotRequired | treq::kSqFlowControlDisableSupported;
  e.portid = 1;
  e.cntlid = connect::kCntlidDynamic;
  e.asqsz = 32;
  e.eflags = 0;
  std::memset(e.trsvcid, ' ', sizeof e.trsvcid);
  std::memcpy(e.trsvcid, "4420", 4);
  std::memset(e.traddr, ' ', sizeof e.traddr);
  std::memcpy(e.traddr, "10.0.2.2", 8);
  std::strcpy(e.subnqn, "nqn.2026-11.dev.pollux:emu0");
  e.tsas[0] = tsas::kSectypeNone;
  std::memcpy(page.data(), &h, sizeof h);
  std::memcpy(page.data() + sizeof h, &e, sizeof e);

  EXPECT_EQ(std::vector<uint8_t>(page.begin(), page.begin() + 18),
            (std::vector<uint8_t>{5, 0, 0, 0, 0, 0, 0, 0,  // GENCTR
                                  1, 0, 0, 0, 0, 0, 0, 0,  // NUMREC
                                  0, 0}));                 // RECFMT
  const uint8_t* entry = page.data() + 1024;
  EXPECT_EQ(std::vector<uint8_t>(entry, entry + 12),
            (std::vector<uint8_t>{0x03,           // TRTYPE TCP
                                  0x01,           // ADRFAM IPv4
                                  0x02,           // SUBTYPE NVM subsystem
                                  0x06,           // TREQ
                                  0x01, 0x00,     // PORTID
                                  0xff, 0xff,     // CNTLID dynamic
                                  0x20, 0x00,     // ASQSZ
                                  0x00, 0x00}));  // EFLAGS
  const auto* text = reinterpret_cast<const char*>(entry);
  EXPECT_EQ(std::string_view(text + 32, 6), "4420  ");
  EXPECT_EQ(std::string_view(text + 256), "nqn.2026-11.dev.pollux:emu0");
  EXPECT_EQ(std::string_view(text + 512, 10), "10.0.2.2  ");
  EXPECT_EQ(entry[768], tsas::kSectypeNone);
  EXPECT_EQ(kLogDiscovery, 0x70);
}

TEST(NvmeFabricsSpec, Nqns) {
  EXPECT_EQ(std::string_view(kDiscoveryNqn), "nqn.2014-08.org.nvmexpress.discovery");
  EXPECT_LE(std::string_view(kDiscoveryNqn).size(), kNqnMaxLength);
  EXPECT_GT(kNqnFieldSize, kNqnMaxLength);                  // room for the NUL
  EXPECT_EQ(std::string_view(kNqnUuidPrefix).size(), 32u);  // + 36-character UUID
  EXPECT_EQ(connect::kCntlidMax, 0xffef);
}

}  // namespace
}  // namespace pollux::spec::nvmf
