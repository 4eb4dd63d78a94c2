// A verbs-shaped RDMA API (in the manner of libibverbs): an open device (Context), protection
// domains, memory regions, completion queues, queue pairs and shared receive queues, with
// post_send / post_recv / poll on the hot path. The interfaces are abstract so that more than
// one provider can stand behind them: the Pollux RNIC (rnic_provider.h: rings and doorbells of
// the emulated NIC, through a PciDevice) and libibverbs (ibverbs_provider.h: real hardware and
// soft-RoCE).
//
// Conventions: 0 or a negative errno (-EINVAL for a malformed request or a call in the wrong
// QP state, -ENOMEM for a full queue, as verbs return them, but negative as in the rest of
// Pollux; -ENODEV once the device is gone). The enums carry libibverbs' numbering (spec/rnic.h). A
// Context must outlive every object it created; destroy QPs before their CQs, SRQ and PD, as verbs
// require. Hot path (post_send, post_recv, poll, get_async_event): no locks, no allocation, no
// system calls, no exceptions; one thread per QP/CQ (or the caller's own serialisation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "driver/env/result.h"
#include "spec/rnic.h"
#include "spec/roce.h"

namespace pollux::rdma {

using QpState = spec::rnic::QpState;
using WrOpcode = spec::rnic::WrOpcode;
using WcOpcode = spec::rnic::WcOpcode;
using WcStatus = spec::rnic::WcStatus;
using EventType = spec::rnic::EventType;
using Mtu = spec::roce::Mtu;
namespace access = spec::rnic::access;  // kLocalWrite, kRemoteWrite, kRemoteRead
namespace qp_attr = spec::rnic::attr;   // modify() masks: kState, kAv, kPathMtu, ...

const char* to_string(WcStatus s);
const char* to_string(QpState s);

namespace send_flag {
inline constexpr uint32_t kSignaled = 1u << 0;
inline constexpr uint32_t kSolicited = 1u << 1;
inline constexpr uint32_t kFence = 1u << 2;
}  // namespace send_flag

struct Sge {
  uint64_t addr = 0;  // a virtual address inside the MR of lkey
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  const SendWr* next = nullptr;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t send_flags = 0;
  uint32_t imm_data = 0;
  uint64_t remote_addr = 0;  // RDMA WRITE/READ
  uint32_t rkey = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  const RecvWr* next = nullptr;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
};

namespace wc_flag {
inline constexpr uint32_t kWithImm = 1u << 1;  // as IBV_WC_WITH_IMM
}

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;
  uint32_t qp_num = 0;
  uint32_t wc_flags = 0;
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  Mtu path_mtu = Mtu::k1024;
  uint32_t qp_access_flags = 0;
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  uint64_t dest_address = 0;  // the peer port's address (Context::port_address() there)
  uint32_t dest_qp_num = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint8_t timeout = 14;  // local ACK timeout: 4.096 us * 2^timeout
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;  // 7: forever
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
};

struct QpCap {
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
};

class Cq;
class Srq;

struct QpInitAttr {
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCap cap;
  bool sq_sig_all = false;  // every send WR completes as if kSignaled
};

struct DeviceAttr {
  uint32_t max_qp = 0, max_cq = 0, max_srq = 0, max_pd = 0, max_mr = 0;
  uint32_t max_qp_wr = 0, max_cqe = 0, max_sge = 0;
  uint32_t max_msg_bytes = 0;
  uint8_t max_qp_rd_atom = 0, max_qp_init_rd_atom = 0;
  Mtu max_mtu = Mtu::k4096;
  uint64_t port_address = 0;
};

struct AsyncEvent {
  EventType type = EventType::kDeviceFatal;
  uint32_t resource = 0;  // CQ handle, QP number or SRQ handle
  uint32_t detail = 0;
};

class Pd {
 public:
  virtual ~Pd() = default;
  virtual uint32_t handle() const = 0;
};

class Mr {
 public:
  virtual ~Mr() = default;
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  void* addr() const { return addr_; }
  std::size_t length() const { return length_; }

 protected:
  uint32_t lkey_ = 0, rkey_ = 0;
  void* addr_ = nullptr;
  std::size_t length_ = 0;
};

class Cq {
 public:
  virtual ~Cq() = default;
  // Up to n completions into wc; returns how many (0: none), or a negative errno.
  virtual int poll(WorkCompletion* wc, int n) = 0;
  virtual uint32_t handle() const = 0;
  virtual uint32_t capacity() const = 0;
};

class Srq {
 public:
  virtual ~Srq() = default;
  virtual int post_recv(const RecvWr& wr, const RecvWr** bad_wr) = 0;
  virtual uint32_t handle() const = 0;
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual uint32_t qp_num() const = 0;
  // The state machine RESET -> INIT -> RTR -> RTS (-> ERR, -> RESET) with the attributes each
  // transition requires (qp_attr masks); anything else is -EINVAL.
  virtual int modify(const QpAttr& attr, uint32_t mask) = 0;
  virtual int query(QpAttr* attr) = 0;
  // Posts a chain of WRs. On an error *bad_wr names the first WR not posted; those before it
  // were posted. Needs RTS (or ERR, where WRs complete with flush errors).
  virtual int post_send(const SendWr& wr, const SendWr** bad_wr) = 0;
  // Needs INIT, RTR or RTS (or ERR); not on a QP with an SRQ.
  virtual int post_recv(const RecvWr& wr, const RecvWr** bad_wr) = 0;
};

class Context {
 public:
  virtual ~Context() = default;
  virtual const DeviceAttr& attr() const = 0;
  uint64_t port_address() const { return attr().port_address; }

  virtual Result<std::unique_ptr<Pd>> alloc_pd() = 0;
  // [addr, addr + length) must be memory the device can reach (for the Pollux RNIC: inside one
  // region of the MemoryRegistry the device was opened with).
  virtual Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, std::size_t length,
                                             uint32_t access) = 0;
  virtual Result<std::unique_ptr<Cq>> create_cq(uint32_t min_entries) = 0;
  virtual Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) = 0;
  virtual Result<std::unique_ptr<Qp>> create_qp(Pd& pd, const QpInitAttr& init) = 0;
  // One asynchronous event if there is one (true), else false. Non-blocking.
  virtual bool get_async_event(AsyncEvent* event) = 0;
  // Looks actively for the device having gone (a control path: may make a system call).
  // Once it has, posts and polls return -ENODEV and set-up calls fail; destroying objects
  // still works (without the device).
  virtual bool probe_removed() = 0;
  // The device failed under us or was reset (a function-level reset after a fault: every
  // resource it held is gone). Looks actively (a control path: a register read); a failed
  // command finds it too. Once it has, the objects made before are dead for good: posts and
  // polls return -EIO, set-up calls on them fail, destroying them costs no command.
  virtual bool probe_fatal() { return false; }
  // After probe_fatal(): brings the device up again, as a fresh open would; the caller then
  // makes its PDs, MRs, CQs and QPs anew (as verbs users re-open a device after
  // IBV_EVENT_DEVICE_FATAL). 0 (also when nothing failed) or a negative errno. Set-up path.
  virtual int recover() { return probe_fatal() ? -EOPNOTSUPP : 0; }
  // Counts recoveries: an object made under an older generation is dead.
  virtual uint32_t generation() const { return 0; }
};

}  // namespace pollux::rdma
