// The Pollux RNIC's programmer's reference: what its driver and the emulated device share.
// A RoCEv2 NIC of our own design (no real NIC's interface is copied); the numbering of QP
// states, access flags, attribute masks, work request and completion opcodes and completion
// statuses follows the verbs ABI (libibverbs' enums), so a verbs layer maps them 1:1.
//
// The device is a PCI function with one memory BAR:
//   BAR0 0x0000-0x0fff  registers (trapped accesses, 32/64-bit, aligned)
//   BAR0 0x1000-0x1fff  doorbells (plain memory the host may map; the device polls it)
//   BAR0 0x10000-0x1ffff push window: two SendWqe slots per QP (plain memory as the
//                       doorbells). A host that posts a single WQE may also write it into the
//                       QP's slot before ringing the doorbell; the device then takes it from
//                       there instead of reading the ring by DMA (the idea of Mellanox's
//                       BlueFlame: the WQE rides with the doorbell's MMIO write)
// Set-up goes through a command mailbox in host memory; work goes through rings in host
// memory that the device reaches only by DMA:
//   send queue    SendWqe[2^n]   host produces, rings the QP's SQ doorbell (producer count)
//   receive queue RecvWqe[2^n]   same with the RQ doorbell (or a shared receive queue's)
//   completion q  Cqe[2^n]       device produces with a phase bit, host returns consumed
//                                entries with the CQ doorbell (consumer count)
//   event queue   EventEntry[2^n] device produces with a phase bit (async errors)
// Producer and consumer counts are free-running 32-bit counters; slot = count & (2^n - 1).
// All structures are little-endian and used as they lie in memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::spec::rnic {

inline constexpr uint16_t kPciVendorId = 0x1b36;  // placeholder ids for an emulated device
inline constexpr uint16_t kPciDeviceId = 0x00fe;
inline constexpr uint32_t kPciClassCode = 0x020000;  // network controller, Ethernet
inline constexpr uint64_t kBar0Size = 0x20000;

// ------------------------------------------------------------------------ registers ---
namespace reg {
inline constexpr uint32_t kId = 0x000;       // RO kIdValue
inline constexpr uint32_t kVersion = 0x004;  // RO major[31:16] minor[15:0]
inline constexpr uint32_t kStatus = 0x008;   // RO status bits below
inline constexpr uint32_t kControl = 0x00c;  // RW control bits below
inline constexpr uint32_t kCmdAddr = 0x010;  // RW 64-bit IOVA of the command mailbox (64 B aligned)
inline constexpr uint32_t kCmdDoorbell = 0x018;  // WO any value: execute the mailbox's command
inline constexpr uint32_t kPortAddress = 0x020;  // RO 64-bit: this port's address on the wire
inline constexpr uint32_t kDoorbellBase = 0x1000;
inline constexpr uint32_t kDoorbellSize = 0x1000;
inline constexpr uint32_t kPushBase = 0x10000;
inline constexpr uint32_t kPushSize = 0x10000;  // kMaxQp x 2 slots x 128 bytes
inline constexpr uint32_t kIdValue = 0x494e5250;  // "PRNI" little-endian
inline constexpr uint32_t kVersionValue = 0x00010000;

// Doorbells (offsets in BAR0). Each is a 32-bit free-running counter the host stores.
constexpr uint32_t sq_doorbell(uint32_t qpn) {
  return kDoorbellBase + qpn * 8;
}
constexpr uint32_t rq_doorbell(uint32_t qpn) {
  return kDoorbellBase + qpn * 8 + 4;
}
constexpr uint32_t cq_doorbell(uint32_t cqn) {
  return kDoorbellBase + 0x800 + cqn * 4;
}
constexpr uint32_t srq_doorbell(uint32_t srqn) {
  return kDoorbellBase + 0xc00 + srqn * 4;
}
// The push slot (offset in BAR0) for the WQE a QP's SQ producer count reaches `count` with
// (count = its index + 1). The two slots alternate, so the host can fill the next while the
// device still reads the last.
constexpr uint32_t push_slot(uint32_t qpn, uint32_t count) {
  return kPushBase + qpn * 256 + (count & 1) * 128;
}
}  // namespace reg

namespace status {
inline constexpr uint32_t kReady = 1u << 0;  // enabled and accepting commands
inline constexpr uint32_t kFatal = 1u << 1;  // internal error: reset needed
}  // namespace status
namespace control {
inline constexpr uint32_t kEnable = 1u << 0;  // 1: run; 0: reset every resource
}  // namespace control

// Hard limits of this device (QUERY_DEVICE reports the same values).
inline constexpr uint32_t kMaxQp = 256;  // QPN 0 and 1 are reserved (IB's SMI/GSI): 2..255
static_assert(reg::kPushSize == kMaxQp * 256 && reg::kPushBase + reg::kPushSize <= kBar0Size);
inline constexpr uint32_t kFirstQpn = 2;
inline constexpr uint32_t kMaxCq = 256;
inline constexpr uint32_t kMaxSrq = 256;
inline constexpr uint32_t kMaxPd = 1024;
inline constexpr uint32_t kMaxMr = 4096;
inline constexpr uint32_t kMaxSge = 6;
inline constexpr uint32_t kMaxLogQueueSize = 15;  // 32,768 entries
inline constexpr uint8_t kMaxRdAtomic = 16;       // outstanding READs per QP, either side
inline constexpr uint32_t kMaxMessageBytes = 1u << 31;
inline constexpr uint32_t kNone = 0xffffffff;  // "no SRQ" and other absent handles

// ------------------------------------------------------------ verbs-numbered enums ---
enum class QpState : uint8_t {
  kReset = 0,
  kInit = 1,
  kRtr = 2,
  kRts = 3,
  kSqd = 4,
  kSqe = 5,
  kErr = 6
};

namespace access {
inline constexpr uint32_t kLocalWrite = 1u << 0;
inline constexpr uint32_t kRemoteWrite = 1u << 1;
inline constexpr uint32_t kRemoteRead = 1u << 2;
inline constexpr uint32_t kRemoteAtomic = 1u << 3;
inline constexpr uint32_t kAll = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
}  // namespace access

// MODIFY_QP attribute mask.
namespace attr {
inline constexpr uint32_t kState = 1u << 0;
inline constexpr uint32_t kCurState = 1u << 1;
inline constexpr uint32_t kAccessFlags = 1u << 3;
inline constexpr uint32_t kPkeyIndex = 1u << 4;
inline constexpr uint32_t kPort = 1u << 5;
inline constexpr uint32_t kAv = 1u << 7;  // address vector: dest_address
inline constexpr uint32_t kPathMtu = 1u << 8;
inline constexpr uint32_t kTimeout = 1u << 9;
inline constexpr uint32_t kRetryCnt = 1u << 10;
inline constexpr uint32_t kRnrRetry = 1u << 11;
inline constexpr uint32_t kRqPsn = 1u << 12;
inline constexpr uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr uint32_t kMinRnrTimer = 1u << 15;
inline constexpr uint32_t kSqPsn = 1u << 16;
inline constexpr uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr uint32_t kDestQpn = 1u << 20;
inline constexpr uint32_t kSupported =
    kState | kCurState | kAccessFlags | kPkeyIndex | kPort | kAv | kPathMtu | kTimeout | kRetryCnt |
    kRnrRetry | kRqPsn | kMaxQpRdAtomic | kMinRnrTimer | kSqPsn | kMaxDestRdAtomic | kDestQpn;
}  // namespace attr

enum class WrOpcode : uint8_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
};

enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kFatalErr = 19,
  kGeneralErr = 21,
};

// Asynchronous events (ibv_event_type numbering).
enum class EventType : uint8_t {
  kCqErr = 0,
  kQpFatal = 1,
  kQpReqErr = 2,
  kQpAccessErr = 3,
  kCommEst = 4,
  kDeviceFatal = 8,
  kSrqErr = 14,
  kQpLastWqeReached = 16,
};

// ------------------------------------------------------------------- work queues ---
struct Sge {
  uint64_t addr;  // virtual address inside the MR of lkey
  uint32_t length;
  uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

namespace wqe_flag {
inline constexpr uint8_t kSignaled = 1u << 0;   // generate a completion on success
inline constexpr uint8_t kSolicited = 1u << 1;  // BTH.SE on the last packet
inline constexpr uint8_t kFence = 1u << 2;      // wait for earlier RDMA READs to complete
}  // namespace wqe_flag

struct SendWqe {
  uint8_t opcode;  // WrOpcode
  uint8_t flags;   // wqe_flag
  uint8_t num_sge;
  uint8_t reserved0;
  uint32_t imm_data;  // sent as ImmDt (big-endian on the wire), delivered as stored here
  uint64_t wr_id;
  uint64_t remote_addr;  // RDMA WRITE/READ target virtual address
  uint32_t rkey;
  // In a push slot: the SQ producer count this WQE brings the queue to (its index + 1; 0 is
  // never valid). The host stores 0 here, then the rest of the slot, then the count (release);
  // the device takes the slot only if it reads the same count before and after copying it.
  // In the ring: ignored.
  uint32_t push_count;
  Sge sge[kMaxSge];
};
static_assert(sizeof(SendWqe) == 128);
static_assert(offsetof(SendWqe, push_count) == 28);
static_assert(offsetof(SendWqe, wr_id) == 8);
static_assert(offsetof(SendWqe, remote_addr) == 16);
static_assert(offsetof(SendWqe, rkey) == 24);
static_assert(offsetof(SendWqe, sge) == 32);

struct RecvWqe {
  uint64_t wr_id;
  uint8_t num_sge;
  uint8_t reserved[7];
  Sge sge[kMaxSge];
  uint8_t reserved1[16];
};
static_assert(sizeof(RecvWqe) == 128);
static_assert(offsetof(RecvWqe, sge) == 16);

// -------------------------------------------------------------- completion queue ---
namespace cqe_flag {
inline constexpr uint8_t kWithImm = 1u << 0;
inline constexpr uint8_t kRecv = 1u << 1;  // completes a receive queue's WQE
}  // namespace cqe_flag

struct Cqe {
  uint64_t wr_id;
  uint32_t byte_len;  // receives: bytes placed
  uint32_t imm_data;
  uint32_t qpn;
  uint16_t wqe_counter;  // low 16 bits of the completed WQE's producer count
  uint8_t status;        // WcStatus
  uint8_t opcode;        // WcOpcode
  uint8_t flags;         // cqe_flag
  uint8_t vendor_err;    // device detail (syndrome), 0 on success
  uint8_t reserved[5];
  uint8_t owner;  // bit 0: phase. Written last. The first pass over the ring writes 1.
};
static_assert(sizeof(Cqe) == 32);
static_assert(offsetof(Cqe, qpn) == 16);
static_assert(offsetof(Cqe, wqe_counter) == 20);
static_assert(offsetof(Cqe, status) == 22);
static_assert(offsetof(Cqe, owner) == 31);

// Phase the device writes into the entry at free-running producer count `count`.
constexpr uint8_t phase_for(uint32_t count, uint32_t log_size) {
  return static_cast<uint8_t>(((count >> log_size) & 1) ^ 1);
}

// ------------------------------------------------------------------- event queue ---
struct EventEntry {
  uint8_t type;  // EventType
  uint8_t reserved0[3];
  uint32_t resource;  // CQN / QPN / SRQN
  uint32_t detail;    // device syndrome
  uint8_t reserved1[3];
  uint8_t owner;  // bit 0: phase, as in Cqe
};
static_assert(sizeof(EventEntry) == 16);
static_assert(offsetof(EventEntry, owner) == 15);

// -------------------------------------------------------------- command mailbox ---
enum class CmdOpcode : uint8_t {
  kQueryDevice = 0x01,
  kCreateEq = 0x02,
  kAllocPd = 0x10,
  kDeallocPd = 0x11,
  kRegMr = 0x12,
  kDeregMr = 0x13,
  kCreateCq = 0x20,
  kDestroyCq = 0x21,
  kCreateSrq = 0x28,
  kDestroySrq = 0x29,
  kCreateQp = 0x30,
  kModifyQp = 0x31,
  kQueryQp = 0x32,
  kDestroyQp = 0x33,
};

enum class CmdStatus : uint8_t {
  kOk = 0,
  kBadOpcode = 1,
  kBadParam = 2,     // a field out of range; syndrome names it
  kBadResource = 3,  // no such handle
  kBadState = 4,     // not allowed in the resource's state (QP transitions)
  kNoResources = 5,  // a table is full
  kBusy = 6,         // the resource is still in use (a PD with MRs, a CQ with QPs)
  kDmaError = 7,     // a ring or the mailbox is not reachable by DMA
  kNotEnabled = 8,
};

inline constexpr uint8_t kOwnerHost = 0;
inline constexpr uint8_t kOwnerDevice = 1;

struct CommandMailbox {
  uint8_t opcode;  // CmdOpcode
  uint8_t owner;   // host sets kOwnerDevice, then rings kCmdDoorbell; device sets kOwnerHost
  uint8_t status;  // CmdStatus, valid once owner == kOwnerHost
  uint8_t reserved;
  uint32_t syndrome;  // which check failed (device detail, for diagnostics)
  uint8_t in[56];
  uint8_t out[64];
};
static_assert(sizeof(CommandMailbox) == 128);
static_assert(offsetof(CommandMailbox, in) == 8);
static_assert(offsetof(CommandMailbox, out) == 64);

struct QueryDeviceOut {
  uint32_t max_qp, max_cq, max_srq, max_pd, max_mr;
  uint32_t max_queue_entries;  // per SQ/RQ/SRQ/CQ
  uint32_t max_sge;
  uint32_t max_msg_bytes;
  uint8_t max_qp_rd_atomic;       // outstanding READs as requester
  uint8_t max_qp_dest_rd_atomic;  // ... as responder
  uint8_t max_mtu;                // roce::Mtu code
  uint8_t reserved;
  uint64_t port_address;
};
static_assert(sizeof(QueryDeviceOut) <= 64);

struct CreateEqIn {
  uint64_t ring_iova;
  uint32_t log_size;
};
struct HandleIn {  // DEALLOC_PD, DEREG_MR (lkey), DESTROY_CQ/SRQ/QP, QUERY_QP
  uint32_t handle;
};
struct HandleOut {  // ALLOC_PD, CREATE_CQ/SRQ/QP
  uint32_t handle;
};

struct RegMrIn {
  uint32_t pdn;
  uint32_t access;  // access::
  uint64_t va;      // the address work requests and peers name
  uint64_t length;
  uint64_t iova;  // where [va, va + length) lies for DMA (one contiguous IOVA range)
};
struct RegMrOut {
  uint32_t lkey;
  uint32_t rkey;
};

struct CreateCqIn {
  uint64_t ring_iova;
  uint32_t log_size;
};
struct CreateSrqIn {
  uint64_t ring_iova;
  uint32_t log_size;
  uint32_t pdn;
};

struct CreateQpIn {
  uint64_t sq_iova;
  uint64_t rq_iova;  // ignored with an SRQ
  uint32_t pdn;
  uint32_t send_cqn;
  uint32_t recv_cqn;
  uint32_t srqn;  // kNone: own receive queue
  uint8_t log_sq_size;
  uint8_t log_rq_size;
  uint8_t reserved[2];
};
static_assert(sizeof(CreateQpIn) <= 56);

struct QpAttrs {
  uint32_t qpn;
  uint32_t attr_mask;     // attr:: (MODIFY_QP input; QUERY_QP reports every field)
  uint64_t dest_address;  // kAv: the peer port's wire address
  uint32_t dest_qpn;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t access_flags;  // remote access allowed on this QP (access::kRemote*)
  uint8_t state;          // QpState
  uint8_t cur_state;
  uint8_t path_mtu;  // roce::Mtu code
  uint8_t timeout;   // local ACK timeout code
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t min_rnr_timer;  // roce RNR timer code
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t reserved[3];
};
static_assert(sizeof(QpAttrs) == 48);

}  // namespace pollux::spec::rnic
