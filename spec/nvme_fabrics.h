// NVMe over Fabrics wire formats (NVM Express Base Specification 2.0, chapter 6 "Fabrics
// Command Set", and the fabrics parts of chapters 3-5; NVMe-oF 1.1 before it): the fabrics
// commands (Connect, Property Get/Set, Authentication Send/Receive, Disconnect), their data and
// responses, fabrics status codes, the SGL descriptors fabrics use, the Identify Controller
// fabrics fields, the Discovery log page and NQNs. Transport independent: NVMe/TCP is in
// spec/nvme_tcp.h. No behaviour.
//
// A fabrics command is a 64-byte SQE like any other (nvme::SubmissionEntry): the structures
// below have its size and are copied to or from one. FCTYPE sits in byte 4, where other
// commands keep the low byte of NSID.
#pragma once

#include <cstddef>
#include <cstdint>

#include "spec/nvme.h"

namespace pollux::spec::nvmf {

inline constexpr uint8_t kOpcodeFabrics = 0x7f;

// FCTYPE (Base 2.0, 6: Fabrics command types). Bits 1:0 give the data direction as an opcode's
// do: 01b host to controller (Connect, Authentication Send), 10b controller to host.
namespace fctype {
inline constexpr uint8_t kPropertySet = 0x00;
inline constexpr uint8_t kConnect = 0x01;
inline constexpr uint8_t kPropertyGet = 0x04;
inline constexpr uint8_t kAuthenticationSend = 0x05;
inline constexpr uint8_t kAuthenticationReceive = 0x06;
inline constexpr uint8_t kDisconnect = 0x08;
}  // namespace fctype

// Fabrics command-specific status codes (SCT 1, nvme::sct::kCommandSpecific; Base 2.0, 6:
// status values of the fabrics commands). They reuse the NVM command set's values 80h-82h.
namespace sc {
inline constexpr uint8_t kConnectIncompatibleFormat = 0x80;  // RECFMT not supported
inline constexpr uint8_t kConnectControllerBusy = 0x81;      // static controller in use
inline constexpr uint8_t kConnectInvalidParameters = 0x82;   // response DW0: IPO/IATTR
inline constexpr uint8_t kConnectRestartDiscovery = 0x83;    // subsystem gone: rediscover
inline constexpr uint8_t kConnectInvalidHost = 0x84;         // host not allowed
inline constexpr uint8_t kInvalidQueueType = 0x85;           // Disconnect on the admin queue
inline constexpr uint8_t kDiscoverRestart = 0x90;            // discovery log changed under a read
inline constexpr uint8_t kAuthenticationRequired = 0x91;     // queue not yet authenticated
}  // namespace sc

// ---------------------------------------------------------------------------- SGLs ---
// Fabrics commands describe data with SGLs only (PSDT 01b). nvme::SglDescriptor covers the
// Data Block and Transport Data Block forms; these are the forms the fabrics use
// (Base 2.0, Scatter Gather List: descriptor types and subtypes).
namespace sgl {
// NVMe/TCP: in-capsule data is a Data Block with the Offset subtype (address = offset into the
// in-capsule data, i.e. ICDOFF = 0); data moved by R2T/H2CData or C2HData is a Transport SGL
// Data Block with the transport-specific subtype Ah (address 0).
inline constexpr uint8_t kIdInCapsule =
    nvme::SglDescriptor::make_id(nvme::sgl::kTypeDataBlock, nvme::sgl::kSubtypeOffset);
inline constexpr uint8_t kIdTransport =
    nvme::SglDescriptor::make_id(nvme::sgl::kTypeTransportDataBlock, nvme::sgl::kSubtypeTransport);
// Keyed SGL Data Block (RDMA): subtype 0h address, Fh address and invalidate the key.
inline constexpr uint8_t kSubtypeInvalidateKey = 0xf;

constexpr nvme::SglDescriptor in_capsule(uint32_t length, uint64_t offset = 0) {
  return nvme::SglDescriptor{offset, length, {}, kIdInCapsule};
}
constexpr nvme::SglDescriptor transport(uint32_t length) {
  return nvme::SglDescriptor{0, length, {}, kIdTransport};
}
}  // namespace sgl

// Keyed SGL Data Block descriptor (type 4h): a 3-byte length and a 4-byte remote key, both
// little-endian and unaligned, hence byte arrays with accessors.
struct KeyedSglDescriptor {
  uint64_t address;
  uint8_t length_bytes[3];
  uint8_t key_bytes[4];
  uint8_t id;  // [7:4] type (kTypeKeyedDataBlock), [3:0] subtype

  constexpr uint32_t length() const {
    return uint32_t{length_bytes[0]} | uint32_t{length_bytes[1]} << 8 |
           uint32_t{length_bytes[2]} << 16;
  }
  constexpr uint32_t key() const {
    return uint32_t{key_bytes[0]} | uint32_t{key_bytes[1]} << 8 | uint32_t{key_bytes[2]} << 16 |
           uint32_t{key_bytes[3]} << 24;
  }
  // `length` must fit in 24 bits (16 MiB - 1).
  static constexpr KeyedSglDescriptor make(uint64_t address, uint32_t length, uint32_t key,
                                           uint8_t subtype = nvme::sgl::kSubtypeAddress) {
    return KeyedSglDescriptor{
        address,
        {static_cast<uint8_t>(length), static_cast<uint8_t>(length >> 8),
         static_cast<uint8_t>(length >> 16)},
        {static_cast<uint8_t>(key), static_cast<uint8_t>(key >> 8), static_cast<uint8_t>(key >> 16),
         static_cast<uint8_t>(key >> 24)},
        nvme::SglDescriptor::make_id(nvme::sgl::kTypeKeyedDataBlock, subtype)};
  }
};
static_assert(sizeof(KeyedSglDescriptor) == 16);
static_assert(offsetof(KeyedSglDescriptor, length_bytes) == 8 &&
              offsetof(KeyedSglDescriptor, key_bytes) == 11 &&
              offsetof(KeyedSglDescriptor, id) == 15);
inline constexpr uint32_t kKeyedSglMaxLength = (1u << 24) - 1;

// ------------------------------------------------------------------------ commands ---
// Common layout of every fabrics command (Base 2.0, 6: Fabrics Command SQE).
struct FabricsCommand {
  uint8_t opcode;  // kOpcodeFabrics
  uint8_t flags;   // [7:6] PSDT, as in nvme::SubmissionEntry; fabrics use SGLs (01b)
  uint16_t cid;
  uint8_t fctype;  // fctype::k*
  uint8_t reserved5[35];
  uint8_t specific[24];  // bytes 63:40, per FCTYPE
};
static_assert(sizeof(FabricsCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(FabricsCommand, fctype) == 4 && offsetof(FabricsCommand, specific) == 40);

// Connect (Base 2.0, 6.3): creates the admin queue (and with it the association with a
// controller) or an I/O queue. Its 1024-byte ConnectData travels as data, in-capsule on TCP.
struct ConnectCommand {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;  // fctype::kConnect
  uint8_t reserved5[19];
  nvme::SglDescriptor sgl1;  // the ConnectData
  uint16_t recfmt;           // connect::kRecfmt
  uint16_t qid;              // 0: admin queue
  uint16_t sqsize;           // 0's based; also sizes the paired CQ
  uint8_t cattr;             // connect::kCattr*
  uint8_t reserved47;
  uint32_t kato;  // keep alive timeout in ms, admin queue only; 0 disables it
  uint8_t reserved52[12];
};
static_assert(sizeof(ConnectCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(ConnectCommand, sgl1) == 24 && offsetof(ConnectCommand, recfmt) == 40 &&
              offsetof(ConnectCommand, qid) == 42 && offsetof(ConnectCommand, sqsize) == 44 &&
              offsetof(ConnectCommand, cattr) == 46 && offsetof(ConnectCommand, kato) == 48);

namespace connect {
inline constexpr uint16_t kRecfmt = 0;  // the only Connect record format defined
inline constexpr uint16_t kAdminQid = 0;
// CATTR.
inline constexpr uint8_t kCattrPriorityClassMask = 0x3;         // I/O SQ priority (WRR arbitration)
inline constexpr uint8_t kCattrDisableSqFlowControl = 1u << 2;  // CQEs then carry SQHD FFFFh
inline constexpr uint16_t kSqhdFlowControlDisabled = 0xffff;
// CNTLID in ConnectData: FFFFh asks for a dynamic controller; FFFEh for any static one.
inline constexpr uint16_t kCntlidDynamic = 0xffff;
inline constexpr uint16_t kCntlidAnyStatic = 0xfffe;
inline constexpr uint16_t kCntlidMax = 0xffef;  // largest a controller may be given

// Response DW0 on success: CNTLID [15:0], AUTHREQ [31:16].
inline constexpr uint16_t kAuthreqAtr = 1u << 1;   // authentication transaction required
inline constexpr uint16_t kAuthreqAscr = 1u << 2;  // ... and secure channel concatenation
constexpr uint32_t make_success_dw0(uint16_t id, uint16_t auth = 0) {
  return uint32_t{id} | uint32_t{auth} << 16;
}
constexpr uint16_t cntlid(uint32_t dw0) { return dw0 & 0xffff; }
constexpr uint16_t authreq(uint32_t dw0) { return dw0 >> 16; }

// Response DW0 with sc::kConnectInvalidParameters: the byte offset of the offending field
// (IPO) and where it lies (IATTR bit 0: 0 the command, 1 the ConnectData).
inline constexpr uint8_t kIattrInData = 1u << 0;
constexpr uint32_t make_invalid_parameter_dw0(uint16_t offset, bool in_data) {
  return uint32_t{offset} | uint32_t{in_data ? kIattrInData : 0u} << 16;
}
constexpr uint16_t ipo(uint32_t dw0) { return dw0 & 0xffff; }
constexpr uint8_t iattr(uint32_t dw0) { return (dw0 >> 16) & 0xff; }
}  // namespace connect

// NQN (Base 2.0, 4.5: NVMe Qualified Names): UTF-8, at most 223 bytes plus a NUL, in 256-byte
// fields.
inline constexpr std::size_t kNqnMaxLength = 223;
inline constexpr std::size_t kNqnFieldSize = 256;
inline constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";
inline constexpr const char* kNqnUuidPrefix = "nqn.2014-08.org.nvmexpress:uuid:";

// Connect data (Base 2.0, 6.3: Connect command data), 1024 bytes.
struct ConnectData {
  uint8_t hostid[16];  // the host identifier (a UUID), the same on every queue
  uint16_t cntlid;     // admin queue: connect::kCntlid*; I/O queue: the CNTLID Connect returned
  uint8_t reserved18[238];
  char subnqn[kNqnFieldSize];
  char hostnqn[kNqnFieldSize];
  uint8_t reserved768[256];
};
static_assert(sizeof(ConnectData) == 1024);
static_assert(offsetof(ConnectData, cntlid) == 16 && offsetof(ConnectData, subnqn) == 256 &&
              offsetof(ConnectData, hostnqn) == 512 && offsetof(ConnectData, reserved768) == 768);

// Property Get / Property Set (Base 2.0, 6.5 / 6.6): the controller registers of a PCIe
// controller become properties at the same offsets (nvme::reg::kCap, kVs, kCc, kCsts, kNssr);
// the interrupt mask, admin queue and doorbell registers have no property.
namespace property {
inline constexpr uint8_t kSize4 = 0;  // ATTRIB [2:0]
inline constexpr uint8_t kSize8 = 1;
constexpr uint8_t size_bytes(uint8_t attrib) { return (attrib & 7) == kSize8 ? 8 : 4; }
}  // namespace property

struct PropertyGetCommand {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;  // fctype::kPropertyGet
  uint8_t reserved5[35];
  uint8_t attrib;  // property::kSize*
  uint8_t reserved41[3];
  uint32_t ofst;  // property offset
  uint8_t reserved48[16];
};
static_assert(sizeof(PropertyGetCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(PropertyGetCommand, attrib) == 40 &&
              offsetof(PropertyGetCommand, ofst) == 44);

// Property Get returns the value in CQE DW0 (low) and DW1 (high, 8-byte properties).
constexpr uint64_t property_value(const nvme::CompletionEntry& cqe) {
  return uint64_t{cqe.dw1} << 32 | cqe.dw0;
}

struct PropertySetCommand {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;  // fctype::kPropertySet
  uint8_t reserved5[35];
  uint8_t attrib;
  uint8_t reserved41[3];
  uint32_t ofst;
  uint64_t value;  // bytes 55:48; a 4-byte property uses the low half, the rest is reserved
  uint8_t reserved56[8];
};
static_assert(sizeof(PropertySetCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(PropertySetCommand, attrib) == 40 &&
              offsetof(PropertySetCommand, ofst) == 44 &&
              offsetof(PropertySetCommand, value) == 48);

// Disconnect (Base 2.0, 6.4): deletes the I/O queue it is sent on (never the admin queue:
// sc::kInvalidQueueType). Supported when Identify Controller OFCS bit 0 is set.
struct DisconnectCommand {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;  // fctype::kDisconnect
  uint8_t reserved5[35];
  uint16_t recfmt;  // 0
  uint8_t reserved42[22];
};
static_assert(sizeof(DisconnectCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(DisconnectCommand, recfmt) == 40);

// Authentication Send / Receive (Base 2.0, 6.2 / 6.1): carry the in-band authentication
// protocol (DH-HMAC-CHAP) messages. LENGTH is TL (Send) or AL (Receive).
struct AuthenticationCommand {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;  // fctype::kAuthenticationSend / kAuthenticationReceive
  uint8_t reserved5[19];
  nvme::SglDescriptor sgl1;
  uint8_t reserved40;
  uint8_t spsp0;  // security protocol specific
  uint8_t spsp1;
  uint8_t secp;  // kSecpNvme
  uint32_t length;
  uint8_t reserved48[16];
};
static_assert(sizeof(AuthenticationCommand) == sizeof(nvme::SubmissionEntry));
static_assert(offsetof(AuthenticationCommand, sgl1) == 24 &&
              offsetof(AuthenticationCommand, spsp0) == 41 &&
              offsetof(AuthenticationCommand, secp) == 43 &&
              offsetof(AuthenticationCommand, length) == 44);
inline constexpr uint8_t kSecpNvme = 0xe9;  // the NVMe in-band authentication protocols

// ----------------------------------------------------------- Identify Controller ---
// Bytes 2047:1792 of Identify Controller (nvme::IdentifyController::nvmeof), defined for
// fabrics controllers only (Base 2.0, 5.17.2.1: Identify Controller data structure).
struct IdentifyControllerFabrics {
  uint32_t ioccsz;  // I/O command capsule size, 16-byte units (SQE included, >= 4)
  uint32_t iorcsz;  // I/O response capsule size, 16-byte units (CQE included, >= 1)
  uint16_t icdoff;  // in-capsule data offset after the SQE, 16-byte units; 0 on TCP
  uint8_t fcatt;    // bit 0: static controller model
  uint8_t msdbd;    // SGL data block descriptors per command; 0 = no limit
  uint16_t ofcs;    // optional fabrics commands: bit 0 Disconnect
  uint8_t reserved14[242];
};
static_assert(sizeof(IdentifyControllerFabrics) == sizeof(nvme::IdentifyController::nvmeof));
static_assert(offsetof(nvme::IdentifyController, nvmeof) == 1792);
static_assert(offsetof(IdentifyControllerFabrics, iorcsz) == 4 &&
              offsetof(IdentifyControllerFabrics, icdoff) == 8 &&
              offsetof(IdentifyControllerFabrics, fcatt) == 10 &&
              offsetof(IdentifyControllerFabrics, msdbd) == 11 &&
              offsetof(IdentifyControllerFabrics, ofcs) == 12);
inline constexpr uint32_t kCapsuleSizeUnit = 16;
inline constexpr uint8_t kFcattStaticModel = 1u << 0;
inline constexpr uint16_t kOfcsDisconnect = 1u << 0;

// --------------------------------------------------------------- discovery log page ---
// Get Log Page 70h on a discovery controller (Base 2.0, 5.16 Get Log Page: Discovery): a 1024-byte
// header, then NUMREC 1024-byte entries. A changed GENCTR between reads means start again.
inline constexpr uint8_t kLogDiscovery = 0x70;

struct DiscoveryLogHeader {
  uint64_t genctr;  // generation counter, +1 on every change
  uint64_t numrec;  // entries that follow
  uint16_t recfmt;  // 0
  uint8_t reserved18[1006];
};
static_assert(sizeof(DiscoveryLogHeader) == 1024);
static_assert(offsetof(DiscoveryLogHeader, numrec) == 8 &&
              offsetof(DiscoveryLogHeader, recfmt) == 16);

inline constexpr std::size_t kTrsvcidSize = 32;
inline constexpr std::size_t kTraddrSize = 256;
inline constexpr std::size_t kTsasSize = 256;

struct DiscoveryLogEntry {
  uint8_t trtype;   // trtype::k*
  uint8_t adrfam;   // adrfam::k*
  uint8_t subtype;  // subtype::k*
  uint8_t treq;     // treq::k*
  uint16_t portid;
  uint16_t cntlid;  // connect::kCntlidDynamic for a dynamic controller model
  uint16_t asqsz;   // largest admin SQ (entries, >= 32)
  uint16_t eflags;  // eflags::k*
  uint8_t reserved12[20];
  char trsvcid[kTrsvcidSize];  // TCP: the port, ASCII decimal, space padded
  uint8_t reserved64[192];
  char subnqn[kNqnFieldSize];
  char traddr[kTraddrSize];  // TCP: the IP address, ASCII, space padded
  uint8_t tsas[kTsasSize];   // transport specific; TCP: byte 0 SECTYPE (tsas::kSectype*)
};
static_assert(sizeof(DiscoveryLogEntry) == 1024);
static_assert(offsetof(DiscoveryLogEntry, portid) == 4 &&
              offsetof(DiscoveryLogEntry, cntlid) == 6 && offsetof(DiscoveryLogEntry, asqsz) == 8 &&
              offsetof(DiscoveryLogEntry, eflags) == 10 &&
              offsetof(DiscoveryLogEntry, trsvcid) == 32 &&
              offsetof(DiscoveryLogEntry, subnqn) == 256 &&
              offsetof(DiscoveryLogEntry, traddr) == 512 &&
              offsetof(DiscoveryLogEntry, tsas) == 768);

namespace trtype {
inline constexpr uint8_t kRdma = 1;
inline constexpr uint8_t kFc = 2;
inline constexpr uint8_t kTcp = 3;
inline constexpr uint8_t kIntraHost = 0xfe;  // loopback
}  // namespace trtype

namespace adrfam {
inline constexpr uint8_t kIpv4 = 1;
inline constexpr uint8_t kIpv6 = 2;
inline constexpr uint8_t kIb = 3;
inline constexpr uint8_t kFc = 4;
inline constexpr uint8_t kIntraHost = 0xfe;
}  // namespace adrfam

namespace subtype {
inline constexpr uint8_t kDiscoveryReferral = 1;  // another discovery service
inline constexpr uint8_t kNvm = 2;                // an NVM subsystem
inline constexpr uint8_t kCurrentDiscovery = 3;   // the discovery subsystem answering
}  // namespace subtype

namespace treq {
inline constexpr uint8_t kSecureChannelMask = 0x3;  // [1:0]
inline constexpr uint8_t kSecureChannelNotSpecified = 0;
inline constexpr uint8_t kSecureChannelRequired = 1;
inline constexpr uint8_t kSecureChannelNotRequired = 2;
inline constexpr uint8_t kSqFlowControlDisableSupported = 1u << 2;
}  // namespace treq

namespace eflags {
inline constexpr uint16_t kDuplicateReturnedInformation = 1u << 0;  // DUPRETINFO
inline constexpr uint16_t kExplicitPersistentConnection = 1u << 1;  // EPCSD
}  // namespace eflags

namespace tsas {
inline constexpr uint8_t kSectypeNone = 0;   // TCP SECTYPE: plain TCP
inline constexpr uint8_t kSectypeTls12 = 1;  // TLS 1.2
inline constexpr uint8_t kSectypeTls13 = 2;  // TLS 1.3 or later
// RDMA: byte 0 RDMA_QPTYPE, byte 1 RDMA_PRTYPE, byte 2 RDMA_CMS, bytes 8-9 RDMA_PKEY.
inline constexpr uint8_t kRdmaQptypeConnected = 1;  // reliable connected
inline constexpr uint8_t kRdmaPrtypeRoceV2 = 4;
inline constexpr uint8_t kRdmaCmsRdmaCm = 1;  // the RDMA IP connection manager
}  // namespace tsas

}  // namespace pollux::spec::nvmf
