// BAR0 registers and the command mailbox: resource creation, MODIFY_QP's state machine.
#include <algorithm>
#include <cstring>

#include "emulator/rnic/rnic.h"

namespace pollux::emu::rnic {

using spec::roce::Mtu;
namespace attr = sr::attr;

Rnic::Rnic(HostMemory& memory, volatile uint8_t* doorbells, uint64_t port_address,
           RnicConfig config, volatile uint8_t* push)
    : mem_(memory),
      doorbells_(doorbells),
      push_(push),
      port_address_(port_address),
      config_(config) {
  if (config_.timing) timing_ = std::make_unique<NicTiming>(*config_.timing);
  reset();
}

void Rnic::reset() {
  destroy_all();
  control_ = 0;
  cmd_addr_ = 0;
}

void Rnic::destroy_all() {
  pds_.assign(sr::kMaxPd, Pd{});
  mrs_.assign(sr::kMaxMr, Mr{});
  cqs_.assign(sr::kMaxCq, Cq{});
  srqs_.assign(sr::kMaxSrq, Srq{});
  qps_.assign(sr::kMaxQp, Qp{});
  live_qps_.clear();
  eq_valid_ = false;
  eq_ = {};
  rx_.clear();
  completions_.clear();
  for (uint32_t i = 0; i < sr::reg::kDoorbellSize; ++i) doorbells_[i] = 0;
  for (uint32_t qpn = 0; qpn < sr::kMaxQp; ++qpn) clear_push_slots(qpn);
}

uint32_t Rnic::read32(uint32_t offset) const {
  switch (offset) {
    case sr::reg::kId:
      return sr::reg::kIdValue;
    case sr::reg::kVersion:
      return sr::reg::kVersionValue;
    case sr::reg::kStatus:
      return (control_ & sr::control::kEnable) ? sr::status::kReady : 0;
    case sr::reg::kControl:
      return control_;
    case sr::reg::kCmdAddr:
      return static_cast<uint32_t>(cmd_addr_);
    case sr::reg::kCmdAddr + 4:
      return static_cast<uint32_t>(cmd_addr_ >> 32);
    case sr::reg::kPortAddress:
      return static_cast<uint32_t>(port_address_);
    case sr::reg::kPortAddress + 4:
      return static_cast<uint32_t>(port_address_ >> 32);
    default:
      return 0;
  }
}

uint64_t Rnic::read64(uint32_t offset) const {
  return read32(offset) | uint64_t{read32(offset + 4)} << 32;
}

void Rnic::write32(uint32_t offset, uint32_t value) {
  switch (offset) {
    case sr::reg::kControl:
      if (!(value & sr::control::kEnable)) destroy_all();
      control_ = value & sr::control::kEnable;
      break;
    case sr::reg::kCmdAddr:
      cmd_addr_ = (cmd_addr_ & ~0xffffffffull) | value;
      break;
    case sr::reg::kCmdAddr + 4:
      cmd_addr_ = (cmd_addr_ & 0xffffffffull) | uint64_t{value} << 32;
      break;
    case sr::reg::kCmdDoorbell:
      execute_command();
      break;
    default:
      break;  // read-only or reserved: ignored, as hardware does
  }
}

void Rnic::write64(uint32_t offset, uint64_t value) {
  write32(offset, static_cast<uint32_t>(value));
  if (offset != sr::reg::kCmdDoorbell) write32(offset + 4, static_cast<uint32_t>(value >> 32));
}

void Rnic::execute_command() {
  ++counters_.commands;
  uint8_t* p =
      (cmd_addr_ % 64 == 0) ? mem_.translate(cmd_addr_, sizeof(sr::CommandMailbox)) : nullptr;
  if (p == nullptr) {  // no mailbox to answer in: the host times out
    ++counters_.dma_faults;
    ++counters_.command_errors;
    return;
  }
  sr::CommandMailbox m;
  std::memcpy(&m, p, sizeof m);
  std::memset(m.out, 0, sizeof m.out);
  m.syndrome = 0;
  const sr::CmdStatus st =
      (control_ & sr::control::kEnable) ? run_command(m) : sr::CmdStatus::kNotEnabled;
  if (st != sr::CmdStatus::kOk) ++counters_.command_errors;
  m.status = static_cast<uint8_t>(st);
  m.owner = sr::kOwnerHost;
  std::memcpy(p + 2, reinterpret_cast<uint8_t*>(&m) + 2, sizeof m - 2);
  __atomic_store_n(p + 1, sr::kOwnerHost, __ATOMIC_RELEASE);  // owner last
}

namespace {

template <typename T>
T input(const sr::CommandMailbox& m) {
  T v;
  std::memcpy(&v, m.in, sizeof v);
  return v;
}
template <typename T>
void output(sr::CommandMailbox& m, const T& v) {
  std::memcpy(m.out, &v, sizeof v);
}
template <typename Table>
int free_slot(const Table& t, uint32_t first) {
  for (uint32_t i = first; i < t.size(); ++i)
    if (!t[i].valid) return static_cast<int>(i);
  return -1;
}
bool valid_log(uint32_t log) {
  return log >= 1 && log <= sr::kMaxLogQueueSize;
}

// Attributes a transition requires and those it may also carry (IBA 11.2.1 / the verbs
// modify_qp table, RC).
struct Transition {
  uint32_t required;
  uint32_t optional;
};
bool transition(sr::QpState from, sr::QpState to, Transition* t) {
  using S = sr::QpState;
  const uint32_t any = attr::kCurState;
  if (to == S::kReset || to == S::kErr) {
    *t = {attr::kState, any};
    return true;
  }
  if (from == S::kReset && to == S::kInit) {
    *t = {attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags, 0};
    return true;
  }
  if (from == S::kInit && to == S::kInit) {
    *t = {0, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags | any};
    return true;
  }
  if (from == S::kInit && to == S::kRtr) {
    *t = {attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn | attr::kRqPsn |
              attr::kMaxDestRdAtomic | attr::kMinRnrTimer,
          attr::kAccessFlags | attr::kPkeyIndex | any};
    return true;
  }
  if (from == S::kRtr && to == S::kRts) {
    *t = {attr::kState | attr::kSqPsn | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry |
              attr::kMaxQpRdAtomic,
          attr::kAccessFlags | attr::kMinRnrTimer | any};
    return true;
  }
  if (from == S::kRts && to == S::kRts) {
    *t = {0, attr::kState | attr::kAccessFlags | attr::kMinRnrTimer | any};
    return true;
  }
  return false;
}

}  // namespace

sr::CmdStatus Rnic::run_command(sr::CommandMailbox& m) {
  using St = sr::CmdStatus;
  switch (static_cast<sr::CmdOpcode>(m.opcode)) {
    case sr::CmdOpcode::kQueryDevice: {
      sr::QueryDeviceOut o{};
      o.max_qp = sr::kMaxQp - sr::kFirstQpn;
      o.max_cq = sr::kMaxCq;
      o.max_srq = sr::kMaxSrq;
      o.max_pd = sr::kMaxPd;
      o.max_mr = sr::kMaxMr - 1;
      o.max_queue_entries = 1u << sr::kMaxLogQueueSize;
      o.max_sge = sr::kMaxSge;
      o.max_msg_bytes = sr::kMaxMessageBytes;
      o.max_qp_rd_atomic = sr::kMaxRdAtomic;
      o.max_qp_dest_rd_atomic = sr::kMaxRdAtomic;
      o.max_mtu = static_cast<uint8_t>(config_.max_mtu);
      o.port_address = port_address_;
      output(m, o);
      return St::kOk;
    }
    case sr::CmdOpcode::kCreateEq: {
      const auto in = input<sr::CreateEqIn>(m);
      if (eq_valid_) return St::kBusy;
      if (!valid_log(in.log_size)) return St::kBadParam;
      if (!mem_.translate(in.ring_iova, sizeof(sr::EventEntry) << in.log_size))
        return St::kDmaError;
      eq_ = {in.ring_iova, in.log_size, 0};
      eq_valid_ = true;
      return St::kOk;
    }
    case sr::CmdOpcode::kAllocPd: {
      const int i = free_slot(pds_, 0);
      if (i < 0) return St::kNoResources;
      pds_[i] = Pd{true};
      output(m, sr::HandleOut{static_cast<uint32_t>(i)});
      return St::kOk;
    }
    case sr::CmdOpcode::kDeallocPd: {
      const uint32_t h = input<sr::HandleIn>(m).handle;
      if (h >= pds_.size() || !pds_[h].valid) return St::kBadResource;
      if (pds_[h].mr_count || pds_[h].qp_count || pds_[h].srq_count) return St::kBusy;
      pds_[h] = Pd{};
      return St::kOk;
    }
    case sr::CmdOpcode::kRegMr: {
      const auto in = input<sr::RegMrIn>(m);
      if (in.pdn >= pds_.size() || !pds_[in.pdn].valid) return St::kBadResource;
      m.syndrome = 1;
      if (in.access & ~sr::access::kAll) return St::kBadParam;
      // Remote write (or atomics) without local write is refused, as verbs do.
      if ((in.access & (sr::access::kRemoteWrite | sr::access::kRemoteAtomic)) &&
          !(in.access & sr::access::kLocalWrite))
        return St::kBadParam;
      m.syndrome = 2;
      if (in.length == 0 || in.length > (1ull << 32) || in.va + in.length < in.va)
        return St::kBadParam;
      if (!mem_.translate(in.iova, in.length)) return St::kDmaError;
      const int i = free_slot(mrs_, 1);  // key 0 is never valid
      if (i < 0) return St::kNoResources;
      const uint8_t tag = next_mr_tag_;
      next_mr_tag_ = static_cast<uint8_t>(next_mr_tag_ == 255 ? 1 : next_mr_tag_ + 1);
      mrs_[i] = Mr{true, tag, in.pdn, in.access, in.va, in.length, in.iova};
      ++pds_[in.pdn].mr_count;
      const uint32_t key = static_cast<uint32_t>(i) << 8 | tag;
      output(m, sr::RegMrOut{key, key});
      m.syndrome = 0;
      return St::kOk;
    }
    case sr::CmdOpcode::kDeregMr: {
      Mr* mr = find_mr(input<sr::HandleIn>(m).handle);
      if (mr == nullptr) return St::kBadResource;
      --pds_[mr->pdn].mr_count;
      *mr = Mr{};
      return St::kOk;
    }
    case sr::CmdOpcode::kCreateCq: {
      const auto in = input<sr::CreateCqIn>(m);
      if (!valid_log(in.log_size)) return St::kBadParam;
      if (!mem_.translate(in.ring_iova, sizeof(sr::Cqe) << in.log_size)) return St::kDmaError;
      const int i = free_slot(cqs_, 0);
      if (i < 0) return St::kNoResources;
      cqs_[i] = Cq{true, {in.ring_iova, in.log_size, 0}, false, 0};
      for (int b = 0; b < 4; ++b)  // the whole 32-bit consumer count, not its low byte
        doorbells_[sr::reg::cq_doorbell(i) - sr::reg::kDoorbellBase + b] = 0;
      output(m, sr::HandleOut{static_cast<uint32_t>(i)});
      return St::kOk;
    }
    case sr::CmdOpcode::kDestroyCq: {
      const uint32_t h = input<sr::HandleIn>(m).handle;
      if (h >= cqs_.size() || !cqs_[h].valid) return St::kBadResource;
      if (cqs_[h].qp_count) return St::kBusy;
      cqs_[h] = Cq{};
      return St::kOk;
    }
    case sr::CmdOpcode::kCreateSrq: {
      const auto in = input<sr::CreateSrqIn>(m);
      if (in.pdn >= pds_.size() || !pds_[in.pdn].valid) return St::kBadResource;
      if (!valid_log(in.log_size)) return St::kBadParam;
      if (!mem_.translate(in.ring_iova, sizeof(sr::RecvWqe) << in.log_size)) return St::kDmaError;
      const int i = free_slot(srqs_, 0);
      if (i < 0) return St::kNoResources;
      srqs_[i] = Srq{true, in.pdn, in.ring_iova, in.log_size, 0, 0};
      ++pds_[in.pdn].srq_count;
      for (int b = 0; b < 4; ++b)
        doorbells_[sr::reg::srq_doorbell(i) - sr::reg::kDoorbellBase + b] = 0;
      output(m, sr::HandleOut{static_cast<uint32_t>(i)});
      return St::kOk;
    }
    case sr::CmdOpcode::kDestroySrq: {
      const uint32_t h = input<sr::HandleIn>(m).handle;
      if (h >= srqs_.size() || !srqs_[h].valid) return St::kBadResource;
      if (srqs_[h].qp_count) return St::kBusy;
      --pds_[srqs_[h].pdn].srq_count;
      srqs_[h] = Srq{};
      return St::kOk;
    }
    case sr::CmdOpcode::kCreateQp: {
      const auto in = input<sr::CreateQpIn>(m);
      if (in.pdn >= pds_.size() || !pds_[in.pdn].valid) return St::kBadResource;
      if (in.send_cqn >= cqs_.size() || !cqs_[in.send_cqn].valid) return St::kBadResource;
      if (in.recv_cqn >= cqs_.size() || !cqs_[in.recv_cqn].valid) return St::kBadResource;
      const bool srq = in.srqn != sr::kNone;
      if (srq && (in.srqn >= srqs_.size() || !srqs_[in.srqn].valid)) return St::kBadResource;
      if (srq && srqs_[in.srqn].pdn != in.pdn) return St::kBadParam;
      if (!valid_log(in.log_sq_size) || (!srq && !valid_log(in.log_rq_size))) return St::kBadParam;
      if (!mem_.translate(in.sq_iova, sizeof(sr::SendWqe) << in.log_sq_size)) return St::kDmaError;
      if (!srq && !mem_.translate(in.rq_iova, sizeof(sr::RecvWqe) << in.log_rq_size))
        return St::kDmaError;
      const int i = free_slot(qps_, sr::kFirstQpn);
      if (i < 0) return St::kNoResources;
      Qp& qp = qps_[i];
      qp = Qp{};
      qp.valid = true;
      qp.pdn = in.pdn;
      qp.send_cqn = in.send_cqn;
      qp.recv_cqn = in.recv_cqn;
      qp.srqn = in.srqn;
      qp.sq_iova = in.sq_iova;
      qp.rq_iova = srq ? 0 : in.rq_iova;
      qp.log_sq = in.log_sq_size;
      qp.log_rq = srq ? 0 : in.log_rq_size;
      live_qps_.insert(std::lower_bound(live_qps_.begin(), live_qps_.end(), uint32_t(i)), i);
      ++pds_[in.pdn].qp_count;
      ++cqs_[in.send_cqn].qp_count;
      ++cqs_[in.recv_cqn].qp_count;
      if (srq) ++srqs_[in.srqn].qp_count;
      for (int b = 0; b < 8; ++b)
        doorbells_[sr::reg::sq_doorbell(i) - sr::reg::kDoorbellBase + b] = 0;
      clear_push_slots(static_cast<uint32_t>(i));
      output(m, sr::HandleOut{static_cast<uint32_t>(i)});
      return St::kOk;
    }
    case sr::CmdOpcode::kModifyQp:
      return modify_qp(input<sr::QpAttrs>(m), &m.syndrome);
    case sr::CmdOpcode::kQueryQp: {
      const uint32_t h = input<sr::HandleIn>(m).handle;
      if (h >= qps_.size() || !qps_[h].valid) return St::kBadResource;
      sr::QpAttrs o = qps_[h].attrs;
      o.qpn = h;
      o.attr_mask = 0;
      o.state = o.cur_state = static_cast<uint8_t>(qps_[h].state);
      output(m, o);
      return St::kOk;
    }
    case sr::CmdOpcode::kDestroyQp: {
      const uint32_t h = input<sr::HandleIn>(m).handle;
      if (h >= qps_.size() || !qps_[h].valid) return St::kBadResource;
      Qp& qp = qps_[h];
      --pds_[qp.pdn].qp_count;
      --cqs_[qp.send_cqn].qp_count;
      --cqs_[qp.recv_cqn].qp_count;
      if (qp.srqn != sr::kNone) --srqs_[qp.srqn].qp_count;
      drop_completions(h);  // a destroyed QP's completions never reach its CQs
      qp = Qp{};
      std::erase(live_qps_, h);
      return St::kOk;
    }
  }
  return St::kBadOpcode;
}

sr::CmdStatus Rnic::modify_qp(const sr::QpAttrs& in, uint32_t* syndrome) {
  using St = sr::CmdStatus;
  using S = sr::QpState;
  if (in.qpn >= qps_.size() || !qps_[in.qpn].valid) return St::kBadResource;
  Qp& qp = qps_[in.qpn];
  const uint32_t mask = in.attr_mask;
  *syndrome = mask;
  if (mask & ~attr::kSupported) return St::kBadParam;
  if ((mask & attr::kCurState) && in.cur_state != static_cast<uint8_t>(qp.state))
    return St::kBadState;
  if ((mask & attr::kState) && in.state > static_cast<uint8_t>(S::kErr)) return St::kBadParam;
  const S to = (mask & attr::kState) ? static_cast<S>(in.state) : qp.state;
  Transition t;
  if (!transition(qp.state, to, &t)) return St::kBadState;
  if ((mask & t.required) != t.required) return St::kBadParam;  // a required attribute missing
  if (mask & ~(t.required | t.optional)) return St::kBadParam;  // one this transition forbids
  // Value ranges.
  if ((mask & attr::kPathMtu) &&
      (!spec::roce::valid_mtu(in.path_mtu) || in.path_mtu > static_cast<uint8_t>(config_.max_mtu)))
    return St::kBadParam;
  if ((mask & attr::kAccessFlags) && (in.access_flags & ~sr::access::kAll)) return St::kBadParam;
  if ((mask & attr::kDestQpn) && in.dest_qpn > spec::roce::kQpnMask) return St::kBadParam;
  if ((mask & attr::kRqPsn) && in.rq_psn > spec::roce::kPsnMask) return St::kBadParam;
  if ((mask & attr::kSqPsn) && in.sq_psn > spec::roce::kPsnMask) return St::kBadParam;
  if ((mask & attr::kTimeout) && in.timeout > 31) return St::kBadParam;
  if ((mask & attr::kRetryCnt) && in.retry_cnt > spec::roce::kMaxRetryCount) return St::kBadParam;
  if ((mask & attr::kRnrRetry) && in.rnr_retry > spec::roce::kMaxRetryCount) return St::kBadParam;
  if ((mask & attr::kMinRnrTimer) && in.min_rnr_timer > 31) return St::kBadParam;
  if ((mask & attr::kMaxQpRdAtomic) && in.max_rd_atomic > sr::kMaxRdAtomic) return St::kBadParam;
  if ((mask & attr::kMaxDestRdAtomic) && in.max_dest_rd_atomic > sr::kMaxRdAtomic)
    return St::kBadParam;
  *syndrome = 0;

  sr::QpAttrs& a = qp.attrs;
  if (mask & attr::kAccessFlags) a.access_flags = in.access_flags;
  if (mask & attr::kAv) a.dest_address = in.dest_address;
  if (mask & attr::kPathMtu) a.path_mtu = in.path_mtu;
  if (mask & attr::kDestQpn) a.dest_qpn = in.dest_qpn;
  if (mask & attr::kRqPsn) a.rq_psn = in.rq_psn;
  if (mask & attr::kSqPsn) a.sq_psn = in.sq_psn;
  if (mask & attr::kTimeout) a.timeout = in.timeout;
  if (mask & attr::kRetryCnt) a.retry_cnt = in.retry_cnt;
  if (mask & attr::kRnrRetry) a.rnr_retry = in.rnr_retry;
  if (mask & attr::kMinRnrTimer) a.min_rnr_timer = in.min_rnr_timer;
  if (mask & attr::kMaxQpRdAtomic) a.max_rd_atomic = in.max_rd_atomic;
  if (mask & attr::kMaxDestRdAtomic) a.max_dest_rd_atomic = in.max_dest_rd_atomic;

  const S from = qp.state;
  if (to == S::kErr) {
    enter_error(in.qpn);
    return St::kOk;
  }
  qp.state = to;
  if (to == S::kReset) {
    // Back to the state CREATE_QP left: queues empty, counts and doorbells zero, and no
    // completion still on its way to the host.
    drop_completions(in.qpn);
    Qp fresh{};
    fresh.valid = true;
    fresh.pdn = qp.pdn;
    fresh.send_cqn = qp.send_cqn;
    fresh.recv_cqn = qp.recv_cqn;
    fresh.srqn = qp.srqn;
    fresh.sq_iova = qp.sq_iova;
    fresh.rq_iova = qp.rq_iova;
    fresh.log_sq = qp.log_sq;
    fresh.log_rq = qp.log_rq;
    qp = fresh;
    for (int b = 0; b < 8; ++b)
      doorbells_[sr::reg::sq_doorbell(in.qpn) - sr::reg::kDoorbellBase + b] = 0;
    clear_push_slots(in.qpn);
  } else if (from == S::kInit && to == S::kRtr) {
    qp.epsn = a.rq_psn;
  } else if (from == S::kRtr && to == S::kRts) {
    qp.next_psn = qp.una_psn = qp.tx_high = a.sq_psn;
    qp.retry_left = a.retry_cnt;
    qp.rnr_retry_left = a.rnr_retry;
  }
  return St::kOk;
}

sr::QpState Rnic::qp_state(uint32_t qpn) const {
  return qpn < qps_.size() && qps_[qpn].valid ? qps_[qpn].state : sr::QpState::kReset;
}

}  // namespace pollux::emu::rnic
