// NVMe wire formats (NVM Express Base Specification 1.4c / 2.0): controller registers,
// submission and completion queue entries, opcodes, status codes, identify data, SGL
// descriptors, features, log pages. No behaviour: the driver, the emulator and the fabric
// code all include this and nothing of each other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::spec::nvme {

// ---------------------------------------------------------------- controller registers ---
namespace reg {
inline constexpr uint32_t kCap = 0x00;    // 64-bit
inline constexpr uint32_t kVs = 0x08;
inline constexpr uint32_t kIntms = 0x0c;
inline constexpr uint32_t kIntmc = 0x10;
inline constexpr uint32_t kCc = 0x14;
inline constexpr uint32_t kCsts = 0x1c;
inline constexpr uint32_t kNssr = 0x20;
inline constexpr uint32_t kAqa = 0x24;
inline constexpr uint32_t kAsq = 0x28;    // 64-bit
inline constexpr uint32_t kAcq = 0x30;    // 64-bit
inline constexpr uint32_t kCmbloc = 0x38;
inline constexpr uint32_t kCmbsz = 0x3c;
inline constexpr uint32_t kDoorbellBase = 0x1000;
inline constexpr uint32_t kNssrReset = 0x4e564d65;  // "NVMe"

// Doorbell offsets for queue `qid` with stride CAP.DSTRD.
constexpr uint32_t sq_tail_doorbell(uint16_t qid, uint32_t dstrd) {
  return kDoorbellBase + (2u * qid) * (4u << dstrd);
}
constexpr uint32_t cq_head_doorbell(uint16_t qid, uint32_t dstrd) {
  return kDoorbellBase + (2u * qid + 1) * (4u << dstrd);
}
}  // namespace reg

// CAP (offset 0, 64 bits).
namespace cap {
constexpr uint64_t mqes(uint64_t c) { return c & 0xffff; }  // 0's based
constexpr bool cqr(uint64_t c) { return (c >> 16) & 1; }
constexpr uint64_t ams(uint64_t c) { return (c >> 17) & 3; }
constexpr uint64_t to(uint64_t c) { return (c >> 24) & 0xff; }  // units of 500 ms
constexpr uint64_t dstrd(uint64_t c) { return (c >> 32) & 0xf; }
constexpr bool nssrs(uint64_t c) { return (c >> 36) & 1; }
constexpr uint64_t css(uint64_t c) { return (c >> 37) & 0xff; }
constexpr uint64_t mpsmin(uint64_t c) { return (c >> 48) & 0xf; }  // 2^(12+n)
constexpr uint64_t mpsmax(uint64_t c) { return (c >> 52) & 0xf; }
inline constexpr uint64_t kCssNvm = 1u << 0;       // within CSS
inline constexpr uint64_t kCssNoIo = 1u << 7;
constexpr uint64_t make(uint16_t mqes, bool cqr, uint8_t to, uint8_t dstrd, bool nssrs,
                        uint8_t css, uint8_t mpsmin, uint8_t mpsmax) {
  return uint64_t{mqes} | (uint64_t{cqr} << 16) | (uint64_t{to} << 24) |
         (uint64_t{dstrd & 0xfu} << 32) | (uint64_t{nssrs} << 36) | (uint64_t{css} << 37) |
         (uint64_t{mpsmin & 0xfu} << 48) | (uint64_t{mpsmax & 0xfu} << 52);
}
}  // namespace cap

// CC (offset 0x14).
namespace cc {
inline constexpr uint32_t kEn = 1u << 0;
constexpr uint32_t css(uint32_t c) { return (c >> 4) & 7; }
constexpr uint32_t mps(uint32_t c) { return (c >> 7) & 0xf; }  // page = 2^(12+mps)
constexpr uint32_t ams(uint32_t c) { return (c >> 11) & 7; }
constexpr uint32_t shn(uint32_t c) { return (c >> 14) & 3; }
constexpr uint32_t iosqes(uint32_t c) { return (c >> 16) & 0xf; }
constexpr uint32_t iocqes(uint32_t c) { return (c >> 20) & 0xf; }
inline constexpr uint32_t kShnNone = 0, kShnNormal = 1, kShnAbrupt = 2;
inline constexpr uint32_t kAmsRoundRobin = 0, kAmsWeightedRoundRobin = 1;
constexpr uint32_t make(bool en, uint32_t css, uint32_t mps, uint32_t ams, uint32_t shn,
                        uint32_t iosqes, uint32_t iocqes) {
  return uint32_t{en} | (css & 7) << 4 | (mps & 0xf) << 7 | (ams & 7) << 11 | (shn & 3) << 14 |
         (iosqes & 0xf) << 16 | (iocqes & 0xf) << 20;
}
}  // namespace cc

// CSTS (offset 0x1c).
namespace csts {
inline constexpr uint32_t kRdy = 1u << 0;
inline constexpr uint32_t kCfs = 1u << 1;
constexpr uint32_t shst(uint32_t c) { return (c >> 2) & 3; }
inline constexpr uint32_t kShstNormal = 0, kShstOccurring = 1, kShstComplete = 2;
inline constexpr uint32_t kNssro = 1u << 4;
inline constexpr uint32_t kPp = 1u << 5;
}  // namespace csts

// AQA (offset 0x24): 0's based sizes.
namespace aqa {
constexpr uint32_t asqs(uint32_t a) { return a & 0xfff; }
constexpr uint32_t acqs(uint32_t a) { return (a >> 16) & 0xfff; }
constexpr uint32_t make(uint32_t asqs, uint32_t acqs) { return (asqs & 0xfff) | (acqs & 0xfff) << 16; }
}  // namespace aqa

constexpr uint32_t make_version(uint32_t major, uint32_t minor, uint32_t tertiary = 0) {
  return major << 16 | minor << 8 | tertiary;
}

// ------------------------------------------------------------------- SGL descriptors ---
namespace sgl {
inline constexpr uint8_t kTypeDataBlock = 0x0;
inline constexpr uint8_t kTypeBitBucket = 0x1;
inline constexpr uint8_t kTypeSegment = 0x2;
inline constexpr uint8_t kTypeLastSegment = 0x3;
inline constexpr uint8_t kTypeKeyedDataBlock = 0x4;
inline constexpr uint8_t kTypeTransportDataBlock = 0x5;
inline constexpr uint8_t kSubtypeAddress = 0x0;
inline constexpr uint8_t kSubtypeOffset = 0x1;
inline constexpr uint8_t kSubtypeTransport = 0xa;
}  // namespace sgl

struct SglDescriptor {
  uint64_t address;
  uint32_t length;
  uint8_t reserved[3];
  uint8_t id;  // [7:4] type, [3:0] subtype
  constexpr uint8_t type() const { return id >> 4; }
  constexpr uint8_t subtype() const { return id & 0xf; }
  static constexpr uint8_t make_id(uint8_t type, uint8_t subtype) {
    return static_cast<uint8_t>(type << 4 | (subtype & 0xf));
  }
};
static_assert(sizeof(SglDescriptor) == 16);

// ---------------------------------------------------------------- queue entries -------
// PSDT (CDW0[15:14]): how DPTR is to be read.
inline constexpr uint8_t kPsdtPrp = 0;
inline constexpr uint8_t kPsdtSglMptrContiguous = 1;
inline constexpr uint8_t kPsdtSglMptrSgl = 2;

struct SubmissionEntry {
  uint8_t opcode;
  uint8_t flags;  // [1:0] FUSE, [7:6] PSDT
  uint16_t cid;
  uint32_t nsid;
  uint32_t cdw2;
  uint32_t cdw3;
  uint64_t mptr;
  union {
    struct {
      uint64_t prp1;
      uint64_t prp2;
    } prp;
    SglDescriptor sgl1;
  } dptr;
  uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15;

  constexpr uint8_t fuse() const { return flags & 3; }
  // NVM commands with an LBA range (nvm::has_lba_range): first block, and block count.
  constexpr uint64_t slba() const { return uint64_t{cdw11} << 32 | cdw10; }
  constexpr uint32_t nlb() const { return (cdw12 & 0xffff) + 1; }
  constexpr uint8_t psdt() const { return (flags >> 6) & 3; }
  void set_psdt(uint8_t p) { flags = static_cast<uint8_t>((flags & 0x3f) | (p & 3) << 6); }
};
static_assert(sizeof(SubmissionEntry) == 64);
static_assert(offsetof(SubmissionEntry, dptr) == 24);
static_assert(offsetof(SubmissionEntry, cdw10) == 40);

// Completion status field (CQE DW3[31:16]), with the phase tag in bit 0.
namespace status {
constexpr bool phase(uint16_t s) { return s & 1; }
constexpr uint8_t sc(uint16_t s) { return (s >> 1) & 0xff; }
constexpr uint8_t sct(uint16_t s) { return (s >> 9) & 7; }
constexpr uint8_t crd(uint16_t s) { return (s >> 12) & 3; }
constexpr bool more(uint16_t s) { return (s >> 14) & 1; }
constexpr bool dnr(uint16_t s) { return (s >> 15) & 1; }
// Command Retry Delay: meaningful only while the host has enabled ACRE (Host Behavior
// Support) and DNR is clear; reserved otherwise.
inline constexpr uint16_t kCrdMask = 3u << 12;
// Status without the phase tag.
constexpr uint16_t make(uint8_t sct, uint8_t sc, bool dnr = false, bool more = false) {
  return static_cast<uint16_t>(uint16_t{sc} << 1 | uint16_t(sct & 7) << 9 | uint16_t{more} << 14 |
                               uint16_t{dnr} << 15);
}
}  // namespace status

struct CompletionEntry {
  uint32_t dw0;
  uint32_t dw1;
  uint16_t sqhd;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // phase tag in bit 0
};
static_assert(sizeof(CompletionEntry) == 16);

// ------------------------------------------------------------------------- opcodes ----
namespace admin {
inline constexpr uint8_t kDeleteIoSq = 0x00;
inline constexpr uint8_t kCreateIoSq = 0x01;
inline constexpr uint8_t kGetLogPage = 0x02;
inline constexpr uint8_t kDeleteIoCq = 0x04;
inline constexpr uint8_t kCreateIoCq = 0x05;
inline constexpr uint8_t kIdentify = 0x06;
inline constexpr uint8_t kAbort = 0x08;
inline constexpr uint8_t kSetFeatures = 0x09;
inline constexpr uint8_t kGetFeatures = 0x0a;
inline constexpr uint8_t kAsyncEventRequest = 0x0c;
inline constexpr uint8_t kNamespaceManagement = 0x0d;
inline constexpr uint8_t kFirmwareCommit = 0x10;
inline constexpr uint8_t kFirmwareImageDownload = 0x11;
inline constexpr uint8_t kDeviceSelfTest = 0x14;
inline constexpr uint8_t kNamespaceAttachment = 0x15;
inline constexpr uint8_t kKeepAlive = 0x18;
inline constexpr uint8_t kDoorbellBufferConfig = 0x7c;
inline constexpr uint8_t kFormatNvm = 0x80;
inline constexpr uint8_t kSecuritySend = 0x81;
inline constexpr uint8_t kSecurityReceive = 0x82;
inline constexpr uint8_t kSanitize = 0x84;
}  // namespace admin

namespace nvm {
inline constexpr uint8_t kFlush = 0x00;
inline constexpr uint8_t kWrite = 0x01;
inline constexpr uint8_t kRead = 0x02;
inline constexpr uint8_t kWriteUncorrectable = 0x04;
inline constexpr uint8_t kCompare = 0x05;
inline constexpr uint8_t kWriteZeroes = 0x08;
inline constexpr uint8_t kDatasetManagement = 0x09;
inline constexpr uint8_t kVerify = 0x0c;
// Commands whose CDW10/11 hold the SLBA and CDW12[15:0] the block count (0's based).
constexpr bool has_lba_range(uint8_t opcode) {
  return opcode == kRead || opcode == kWrite || opcode == kCompare || opcode == kWriteZeroes ||
         opcode == kWriteUncorrectable || opcode == kVerify;
}
// Read/Write CDW12 bits.
inline constexpr uint32_t kCdw12Fua = 1u << 30;
inline constexpr uint32_t kCdw12LimitedRetry = 1u << 31;
inline constexpr uint32_t kCdw12Deac = 1u << 25;  // Write Zeroes: deallocate
// Dataset Management CDW11 attributes.
inline constexpr uint32_t kDsmDeallocate = 1u << 2;

struct DsmRange {
  uint32_t attributes;
  uint32_t length;  // in logical blocks (not 0's based)
  uint64_t slba;
};
static_assert(sizeof(DsmRange) == 16);
}  // namespace nvm

// --------------------------------------------------------------------- status codes ---
namespace sct {
inline constexpr uint8_t kGeneric = 0;
inline constexpr uint8_t kCommandSpecific = 1;
inline constexpr uint8_t kMediaError = 2;
inline constexpr uint8_t kPath = 3;
inline constexpr uint8_t kVendor = 7;
}  // namespace sct

namespace sc {  // Generic command status (SCT 0)
inline constexpr uint8_t kSuccess = 0x00;
inline constexpr uint8_t kInvalidOpcode = 0x01;
inline constexpr uint8_t kInvalidField = 0x02;
inline constexpr uint8_t kCommandIdConflict = 0x03;
inline constexpr uint8_t kDataTransferError = 0x04;
inline constexpr uint8_t kAbortedPowerLoss = 0x05;
inline constexpr uint8_t kInternalError = 0x06;
inline constexpr uint8_t kAbortedByRequest = 0x07;
inline constexpr uint8_t kAbortedSqDeletion = 0x08;
inline constexpr uint8_t kAbortedFailedFused = 0x09;
inline constexpr uint8_t kAbortedMissingFused = 0x0a;
inline constexpr uint8_t kInvalidNamespaceOrFormat = 0x0b;
inline constexpr uint8_t kCommandSequenceError = 0x0c;
inline constexpr uint8_t kInvalidSglSegmentDescriptor = 0x0d;
inline constexpr uint8_t kInvalidNumberOfSglDescriptors = 0x0e;
inline constexpr uint8_t kDataSglLengthInvalid = 0x0f;
inline constexpr uint8_t kMetadataSglLengthInvalid = 0x10;
inline constexpr uint8_t kSglDescriptorTypeInvalid = 0x11;
inline constexpr uint8_t kInvalidUseOfCmb = 0x12;
inline constexpr uint8_t kPrpOffsetInvalid = 0x13;
inline constexpr uint8_t kAtomicWriteUnitExceeded = 0x14;
inline constexpr uint8_t kOperationDenied = 0x15;
inline constexpr uint8_t kSglOffsetInvalid = 0x16;
inline constexpr uint8_t kKeepAliveExpired = 0x19;
inline constexpr uint8_t kKeepAliveInvalid = 0x1a;
inline constexpr uint8_t kAbortedPreempt = 0x1b;
inline constexpr uint8_t kSanitizeFailed = 0x1c;
inline constexpr uint8_t kSanitizeInProgress = 0x1d;
inline constexpr uint8_t kSglDataBlockGranularityInvalid = 0x1e;
inline constexpr uint8_t kNamespaceWriteProtected = 0x20;
inline constexpr uint8_t kCommandInterrupted = 0x21;
inline constexpr uint8_t kTransientTransportError = 0x22;
// NVM command set (SCT 0)
inline constexpr uint8_t kLbaOutOfRange = 0x80;
inline constexpr uint8_t kCapacityExceeded = 0x81;
inline constexpr uint8_t kNamespaceNotReady = 0x82;
inline constexpr uint8_t kReservationConflict = 0x83;
inline constexpr uint8_t kFormatInProgress = 0x84;
}  // namespace sc

namespace sc_cmd {  // Command specific status (SCT 1)
inline constexpr uint8_t kCompletionQueueInvalid = 0x00;
inline constexpr uint8_t kInvalidQueueIdentifier = 0x01;
inline constexpr uint8_t kInvalidQueueSize = 0x02;
inline constexpr uint8_t kAbortCommandLimitExceeded = 0x03;
inline constexpr uint8_t kAsyncEventRequestLimitExceeded = 0x05;
inline constexpr uint8_t kInvalidFirmwareSlot = 0x06;
inline constexpr uint8_t kInvalidFirmwareImage = 0x07;
inline constexpr uint8_t kInvalidInterruptVector = 0x08;
inline constexpr uint8_t kInvalidLogPage = 0x09;
inline constexpr uint8_t kInvalidFormat = 0x0a;
inline constexpr uint8_t kInvalidQueueDeletion = 0x0c;
inline constexpr uint8_t kFeatureIdNotSaveable = 0x0d;
inline constexpr uint8_t kFeatureNotChangeable = 0x0e;
inline constexpr uint8_t kFeatureNotNamespaceSpecific = 0x0f;
// NVM command set (SCT 1)
inline constexpr uint8_t kConflictingAttributes = 0x80;
inline constexpr uint8_t kInvalidProtectionInformation = 0x81;
inline constexpr uint8_t kWriteToReadOnlyRange = 0x82;
}  // namespace sc_cmd

namespace sc_media {  // Media and data integrity errors (SCT 2)
inline constexpr uint8_t kWriteFault = 0x80;
inline constexpr uint8_t kUnrecoveredReadError = 0x81;
inline constexpr uint8_t kGuardCheckError = 0x82;
inline constexpr uint8_t kApplicationTagCheckError = 0x83;
inline constexpr uint8_t kReferenceTagCheckError = 0x84;
inline constexpr uint8_t kCompareFailure = 0x85;
inline constexpr uint8_t kAccessDenied = 0x86;
inline constexpr uint8_t kDeallocatedOrUnwritten = 0x87;
}  // namespace sc_media

// -------------------------------------------------------------------------- identify ---
namespace cns {
inline constexpr uint8_t kNamespace = 0x00;
inline constexpr uint8_t kController = 0x01;
inline constexpr uint8_t kActiveNamespaceList = 0x02;
inline constexpr uint8_t kNamespaceIdDescriptors = 0x03;
}  // namespace cns

// Namespace identification descriptor types (CNS 03h).
namespace nidt {
inline constexpr uint8_t kEui64 = 1;    // 8 bytes
inline constexpr uint8_t kNguid = 2;    // 16 bytes
inline constexpr uint8_t kUuid = 3;     // 16 bytes
inline constexpr uint8_t kCsi = 4;      // 1 byte
}  // namespace nidt

struct PowerStateDescriptor {
  uint16_t mp;  // max power, centiwatts
  uint8_t reserved0;
  uint8_t flags;  // mxps, nops
  uint32_t enlat;
  uint32_t exlat;
  uint8_t rrt, rrl, rwt, rwl;
  uint16_t idlp;
  uint8_t ips;
  uint8_t reserved1;
  uint16_t actp;
  uint8_t apw_aps;
  uint8_t reserved2[9];
};
static_assert(sizeof(PowerStateDescriptor) == 32);

struct IdentifyController {
  uint16_t vid;
  uint16_t ssvid;
  char sn[20];
  char mn[40];
  char fr[8];
  uint8_t rab;
  uint8_t ieee[3];
  uint8_t cmic;
  uint8_t mdts;  // 2^n units of CAP.MPSMIN pages; 0 = no limit
  uint16_t cntlid;
  uint32_t ver;
  uint32_t rtd3r;
  uint32_t rtd3e;
  uint32_t oaes;
  uint32_t ctratt;
  uint16_t rrls;
  uint8_t reserved102[9];
  uint8_t cntrltype;
  uint8_t fguid[16];
  uint16_t crdt[3];
  uint8_t reserved134[106];
  uint8_t nvmmi[16];
  uint16_t oacs;
  uint8_t acl;   // 0's based
  uint8_t aerl;  // 0's based
  uint8_t frmw;
  uint8_t lpa;
  uint8_t elpe;  // 0's based
  uint8_t npss;
  uint8_t avscc;
  uint8_t apsta;
  uint16_t wctemp;
  uint16_t cctemp;
  uint16_t mtfa;
  uint32_t hmpre;
  uint32_t hmmin;
  uint8_t tnvmcap[16];
  uint8_t unvmcap[16];
  uint32_t rpmbs;
  uint16_t edstt;
  uint8_t dsto;
  uint8_t fwug;
  uint16_t kas;
  uint16_t hctma;
  uint16_t mntmt;
  uint16_t mxtmt;
  uint32_t sanicap;
  uint32_t hmminds;
  uint16_t hmmaxd;
  uint16_t nsetidmax;
  uint16_t endgidmax;
  uint8_t anatt;
  uint8_t anacap;
  uint32_t anagrpmax;
  uint32_t nanagrpid;
  uint32_t pels;
  uint8_t reserved356[30];
  // Command Quiesce Time (NVMe 2.1), ms: after a Keep Alive Timeout or other loss of
  // communication, the longest a command of the lost association may still take effect.
  uint16_t cqt;
  uint8_t reserved388[124];
  uint8_t sqes;  // [3:0] required, [7:4] max (log2)
  uint8_t cqes;
  uint16_t maxcmd;
  uint32_t nn;
  uint16_t oncs;
  uint16_t fuses;
  uint8_t fna;
  uint8_t vwc;
  uint16_t awun;
  uint16_t awupf;
  uint8_t nvscc;
  uint8_t nwpc;
  uint16_t acwu;
  uint16_t reserved534;
  uint32_t sgls;
  uint32_t mnan;
  uint8_t reserved544[224];
  char subnqn[256];
  uint8_t reserved1024[768];
  uint8_t nvmeof[256];
  PowerStateDescriptor psd[32];
  uint8_t vs[1024];
};
static_assert(sizeof(IdentifyController) == 4096);
static_assert(offsetof(IdentifyController, mdts) == 77);
static_assert(offsetof(IdentifyController, oacs) == 256);
static_assert(offsetof(IdentifyController, cqt) == 386);
static_assert(offsetof(IdentifyController, sqes) == 512);
static_assert(offsetof(IdentifyController, nn) == 516);
static_assert(offsetof(IdentifyController, sgls) == 536);
static_assert(offsetof(IdentifyController, subnqn) == 768);
static_assert(offsetof(IdentifyController, psd) == 2048);

// ONCS bits (optional NVM commands).
namespace oncs {
inline constexpr uint16_t kCompare = 1u << 0;
inline constexpr uint16_t kWriteUncorrectable = 1u << 1;
inline constexpr uint16_t kDatasetManagement = 1u << 2;
inline constexpr uint16_t kWriteZeroes = 1u << 3;
inline constexpr uint16_t kSaveSelect = 1u << 4;
inline constexpr uint16_t kReservations = 1u << 5;
inline constexpr uint16_t kTimestamp = 1u << 6;
inline constexpr uint16_t kVerify = 1u << 7;
}  // namespace oncs

// SGLS bits.
namespace sgls {
inline constexpr uint32_t kSupported = 1u << 0;  // SGLs supported, no alignment requirement
inline constexpr uint32_t kDwordAligned = 2u;     // value of [1:0]: dword alignment required
inline constexpr uint32_t kKeyed = 1u << 2;  // Keyed SGL Data Block descriptors
inline constexpr uint32_t kBitBucket = 1u << 16;
}  // namespace sgls

struct LbaFormat {
  uint16_t ms;     // metadata size
  uint8_t lbads;   // log2 of the LBA data size
  uint8_t rp;      // relative performance [1:0]
};
static_assert(sizeof(LbaFormat) == 4);

struct IdentifyNamespace {
  uint64_t nsze;
  uint64_t ncap;
  uint64_t nuse;
  uint8_t nsfeat;
  uint8_t nlbaf;  // 0's based
  uint8_t flbas;  // [3:0] format index
  uint8_t mc;
  uint8_t dpc;
  uint8_t dps;
  uint8_t nmic;
  uint8_t rescap;
  uint8_t fpi;
  uint8_t dlfeat;
  uint16_t nawun;
  uint16_t nawupf;
  uint16_t nacwu;
  uint16_t nabsn;
  uint16_t nabo;
  uint16_t nabspf;
  uint16_t noiob;
  uint8_t nvmcap[16];
  uint16_t npwg;
  uint16_t npwa;
  uint16_t npdg;
  uint16_t npda;
  uint16_t nows;
  uint8_t reserved74[18];
  uint32_t anagrpid;
  uint8_t reserved96[3];
  uint8_t nsattr;
  uint16_t nvmsetid;
  uint16_t endgid;
  uint8_t nguid[16];
  uint8_t eui64[8];
  LbaFormat lbaf[16];
  uint8_t reserved192[192];
  uint8_t vs[3712];
};
static_assert(sizeof(IdentifyNamespace) == 4096);
static_assert(offsetof(IdentifyNamespace, nguid) == 104);
static_assert(offsetof(IdentifyNamespace, lbaf) == 128);

// -------------------------------------------------------------------------- features ---
namespace feature {
inline constexpr uint8_t kArbitration = 0x01;
inline constexpr uint8_t kPowerManagement = 0x02;
inline constexpr uint8_t kLbaRangeType = 0x03;
inline constexpr uint8_t kTemperatureThreshold = 0x04;
inline constexpr uint8_t kErrorRecovery = 0x05;
inline constexpr uint8_t kVolatileWriteCache = 0x06;
inline constexpr uint8_t kNumberOfQueues = 0x07;
inline constexpr uint8_t kInterruptCoalescing = 0x08;
inline constexpr uint8_t kInterruptVectorConfig = 0x09;
inline constexpr uint8_t kWriteAtomicityNormal = 0x0a;
inline constexpr uint8_t kAsyncEventConfig = 0x0b;
inline constexpr uint8_t kAutonomousPowerStateTransition = 0x0c;
inline constexpr uint8_t kHostMemoryBuffer = 0x0d;
inline constexpr uint8_t kTimestamp = 0x0e;
inline constexpr uint8_t kKeepAliveTimer = 0x0f;
inline constexpr uint8_t kHostBehaviorSupport = 0x16;  // data: HostBehaviorSupport (512 B)
// Get Features CDW10[10:8] select.
inline constexpr uint8_t kSelCurrent = 0, kSelDefault = 1, kSelSaved = 2, kSelCapabilities = 3;
// Get Features with select kSelCapabilities: DW0 bits.
inline constexpr uint32_t kCapSaveable = 1u << 0;
inline constexpr uint32_t kCapNamespaceSpecific = 1u << 1;
inline constexpr uint32_t kCapChangeable = 1u << 2;
}  // namespace feature

// Host Behavior Support (feature 16h, NVMe Base 2.0 5.27.1): a data structure transferred
// by Set/Get Features. Each defined field is 00h (off) or 01h (on); other values are reserved.
struct HostBehaviorSupport {
  uint8_t acre;    // Advanced Command Retry Enable: Command Interrupted and CRD may be used
  uint8_t etdas;   // Extended Telemetry Data Area 4 Supported
  uint8_t lbafee;  // LBA Format Extension Enable
  uint8_t reserved[509];
};
static_assert(sizeof(HostBehaviorSupport) == 512);

// ------------------------------------------------------------------------ log pages ---
namespace log {
inline constexpr uint8_t kErrorInformation = 0x01;
inline constexpr uint8_t kSmartHealth = 0x02;
inline constexpr uint8_t kFirmwareSlot = 0x03;
inline constexpr uint8_t kChangedNamespaceList = 0x04;
inline constexpr uint8_t kCommandsSupportedEffects = 0x05;
// Vendor specific (C0h-FFh): the Pollux emulator's own status, read by hosts that want to
// know whether the timings they measured are the model's (PolluxEmulatorStatus).
inline constexpr uint8_t kPolluxEmulatorStatus = 0xc0;
}  // namespace log

// Log page C0h of a Pollux emulator (its Identify MN says so). A realtime model keeps the wall
// clock with the simulated one; when it falls behind (a busy host), the latencies a host
// measures are the host machine's, not the profile's.
struct PolluxEmulatorStatus {
  char signature[4];          // "PLXE"
  uint32_t version;           // 1
  uint8_t realtime;           // 1: a timed model paced to the wall clock
  uint8_t fell_behind;        // 1: the lag has exceeded warn_lag_ns since the start
  uint8_t reserved0[6];
  uint64_t lag_ns;            // now
  uint64_t max_lag_ns;        // since the start
  uint64_t warn_lag_ns;       // the threshold (pollux-emu --warn-lag-us)
  uint8_t reserved[472];
};
static_assert(sizeof(PolluxEmulatorStatus) == 512);
static_assert(offsetof(PolluxEmulatorStatus, lag_ns) == 16 &&
              offsetof(PolluxEmulatorStatus, warn_lag_ns) == 32);

struct ErrorLogEntry {
  uint64_t error_count;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // status field, phase bit cleared
  uint16_t parameter_error_location;
  uint64_t lba;
  uint32_t nsid;
  uint8_t vendor_specific;
  uint8_t trtype;
  uint8_t reserved30[2];
  uint64_t command_specific;
  uint16_t trtype_specific;
  uint8_t reserved42[22];
};
static_assert(sizeof(ErrorLogEntry) == 64);

struct SmartHealthLog {
  uint8_t critical_warning;
  uint16_t composite_temperature;  // kelvin (unaligned in the spec: byte 1)
  uint8_t available_spare;
  uint8_t available_spare_threshold;
  uint8_t percentage_used;
  uint8_t endurance_group_critical_warning;
  uint8_t reserved7[25];
  uint64_t data_units_read[2];     // 128-bit counters, units of 1000 × 512 bytes
  uint64_t data_units_written[2];
  uint64_t host_read_commands[2];
  uint64_t host_write_commands[2];
  uint64_t controller_busy_time[2];
  uint64_t power_cycles[2];
  uint64_t power_on_hours[2];
  uint64_t unsafe_shutdowns[2];
  uint64_t media_errors[2];
  uint64_t num_error_log_entries[2];
  uint32_t warning_temp_time;
  uint32_t critical_temp_time;
  uint16_t temperature_sensor[8];
  uint8_t reserved216[296];
} __attribute__((packed));
static_assert(sizeof(SmartHealthLog) == 512);
static_assert(offsetof(SmartHealthLog, data_units_read) == 32);
static_assert(offsetof(SmartHealthLog, media_errors) == 160);

// Asynchronous event completion DW0.
namespace aer {
inline constexpr uint8_t kTypeError = 0;
inline constexpr uint8_t kTypeSmart = 1;
inline constexpr uint8_t kTypeNotice = 2;
inline constexpr uint8_t kTypeIoCommandSet = 6;
inline constexpr uint8_t kInfoNoticeNamespaceChanged = 0x00;
inline constexpr uint8_t kInfoErrorInvalidDoorbellRegister = 0x00;     // type Error
inline constexpr uint8_t kInfoErrorInvalidDoorbellWriteValue = 0x01;   // type Error
inline constexpr uint8_t kInfoSmartTemperatureThreshold = 0x01;        // type SMART/health
constexpr uint32_t make_dw0(uint8_t type, uint8_t info, uint8_t log_page) {
  return (uint32_t{type} & 7) | uint32_t{info} << 8 | uint32_t{log_page} << 16;
}
}  // namespace aer

// ------------------------------------------------------------------ PCI identity ------
namespace pci {
inline constexpr uint32_t kClassCodeNvme = 0x010802;  // mass storage, NVM, NVMe I/O controller
inline constexpr uint16_t kVendorPollux = 0x1b36;     // the Red Hat/QEMU id used by emulated devices
inline constexpr uint16_t kDevicePolluxNvme = 0x0010;
}  // namespace pci

}  // namespace pollux::spec::nvme
