#include "fabric/rdma/queue.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spec/nvme_fabrics.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma {

namespace nf = spec::nvmf;
namespace nr = spec::nvme_rdma;

namespace {

constexpr uint64_t kRecvTag = 1ull << 32, kSendTag = 2ull << 32;
constexpr uint32_t kSqe = nr::kCommandCapsuleHeader;
constexpr uint32_t kPostBatch = 16;

// Data direction of a command: opcode bits [1:0], or for a fabrics command its FCTYPE's.
bool writes(const sn::SubmissionEntry& cmd) {
  if (cmd.opcode == nf::kOpcodeFabrics) {
    uint8_t fctype;
    std::memcpy(&fctype, reinterpret_cast<const uint8_t*>(&cmd) + 4, 1);
    return fctype & 1;
  }
  return cmd.opcode & 1;
}

uint32_t start_psn(uint32_t qp_num) {
  return (qp_num * 2246822519u + 77) & 0xffffff;
}

const char* reject_reason(uint16_t sts) {
  switch (sts) {
    case nr::cm_status::kInvalidLength:
      return "invalid private data length";
    case nr::cm_status::kInvalidRecfmt:
      return "invalid RECFMT";
    case nr::cm_status::kInvalidQid:
      return "invalid QID";
    case nr::cm_status::kInvalidHsqsize:
      return "invalid HSQSIZE";
    case nr::cm_status::kInvalidHrqsize:
      return "invalid HRQSIZE";
    case nr::cm_status::kNoResources:
      return "no resources";
    case nr::cm_status::kInvalidIrd:
      return "invalid IRD";
    case nr::cm_status::kInvalidOrd:
      return "invalid ORD";
    case nr::cm_status::kInvalidCntlid:
      return "invalid CNTLID";
  }
  return "unknown status";
}

}  // namespace

RdmaQueue::RdmaQueue(std::shared_ptr<RdmaTransport::Shared> shared, const nvme::QueueParams& params,
                     uint32_t in_capsule, uint32_t max_keyed)
    : shared_(std::move(shared)),
      params_(params),
      in_capsule_(in_capsule),
      max_keyed_(std::min(max_keyed, kMaxKeyed)),
      faults_(shared_->options.faults.get()),
      device_generation_(shared_->options.context->generation()) {}

RdmaQueue::~RdmaQueue() {
  close_qp();
  region_mr_.reset();
  mrs_.clear();
}

void RdmaQueue::close_qp() {
  if (cm_) cm_->disconnect();
  cm_.reset();
  qp_.reset();  // before its CQ
  cq_.reset();
}

// ----------------------------------------------------------------------- connection ---

// The exchange runs without blocking (start_connect, then poll_connect until it is done);
// open() is the same, waiting on the CM between polls.
std::string RdmaQueue::open() {
  (void)start_connect();
  for (;;) {
    const int rc = poll_connect();
    if (rc != -EAGAIN) return rc == 0 ? "" : connect_error_;
    cm_->wait(cm_deadline_);
  }
}

int RdmaQueue::start_connect() {
  // Nothing in flight survives; requests not sent yet keep what map_data described.
  for (Request& r : reqs_)
    if (r.sent) r = Request{};
  produced_ = tail_ = 0;
  outstanding_ = empty_polls_ = 0;
  quiet_since_ns_ = 0;
  broken_.store(true, std::memory_order_release);  // until the exchange is done
  connect_error_.clear();
  if (std::string e = begin_qp(); !e.empty()) {
    close_qp();
    connect_error_ = std::move(e);
    conn_ = Conn::kFailed;
    return 0;
  }
  conn_ = Conn::kConnecting;
  return 0;
}

int RdmaQueue::poll_connect() {
  switch (conn_) {
    case Conn::kIdle:
      return broken() ? -ENOTCONN : 0;
    case Conn::kDone:
      return 0;
    case Conn::kFailed:
      return -ECONNREFUSED;
    case Conn::kConnecting:
      break;
  }
  std::string e;
  const int rc = step_qp(&e);
  if (rc == -EAGAIN) return rc;
  if (rc != 0) {
    close_qp();
    connect_error_ = std::move(e);
    conn_ = Conn::kFailed;
    return -ECONNREFUSED;
  }
  conn_ = Conn::kDone;
  return 0;
}

// After a reset of the device (a NIC reset): the MRs this queue held died with it.
std::string RdmaQueue::renew_device_objects() {
  region_mr_.reset();
  mrs_.clear();
  bounce_mr_.reset();
  device_generation_ = shared_->options.context->generation();
  if (bounce_) {
    auto mr = shared_->options.context->reg_mr(
        *shared_->pd, bounce_->data(), bounce_->size(),
        verbs::access::kLocalWrite | verbs::access::kRemoteRead | verbs::access::kRemoteWrite);
    if (!mr) return "bounce slots MR: " + mr.error().message;
    bounce_mr_ = std::move(mr).value();
  }
  return "";
}

std::string RdmaQueue::begin_qp() {
  close_qp();
  verbs::Context& ctx = *shared_->options.context;
  const std::string where = "NVMe/RDMA " + shared_->traddr + ":" + shared_->trsvcid + " qid " +
                            std::to_string(params_.qid);
  const uint32_t entries = params_.entries;
  if (entries < 2 || entries > 0x10000) return where + ": queue size out of range";
  if (std::string e = shared_->ensure_device(); !e.empty()) return where + ": " + e;
  if (device_generation_ != ctx.generation()) {
    if (std::string e = renew_device_objects(); !e.empty()) return where + ": " + e;
  }
  if (!region_) {
    capsule_stride_ = (kSqe + in_capsule_ + 63) / 64 * 64;
    const std::size_t bytes =
        std::size_t{capsule_stride_} * entries + std::size_t{nr::kResponseCapsule} * entries;
    auto region = env::DmaRegion::create(*shared_->options.registry, bytes, env::DmaOptions{false});
    if (!region) return where + ": capsule buffers: " + region.error().message;
    region_ = std::move(region).value();
  }
  if (!region_mr_) {
    auto mr =
        ctx.reg_mr(*shared_->pd, region_->data(), region_->size(), verbs::access::kLocalWrite);
    if (!mr) return where + ": capsule buffers MR: " + mr.error().message;
    region_mr_ = std::move(mr).value();
  }
  auto cq = ctx.create_cq(2 * entries + 8);
  if (!cq) return where + ": CQ: " + cq.error().message;
  cq_ = std::move(cq).value();
  verbs::QpInitAttr init;
  init.send_cq = init.recv_cq = cq_.get();
  init.cap = verbs::QpCap{entries + 4, entries, 1, 1};
  auto qp = ctx.create_qp(*shared_->pd, init);
  if (!qp) return where + ": QP: " + qp.error().message;
  qp_ = std::move(qp).value();

  nr::CmRequest req{};
  req.recfmt = nr::kRecfmt10;
  req.qid = params_.qid;
  req.hrqsize = static_cast<uint16_t>(entries);
  req.hsqsize = static_cast<uint16_t>(entries - 1);
  req.cntlid = 0xffff;  // the dynamic model: the Connect command names the controller
  const uint32_t psn = start_psn(qp_->qp_num());
  ConnectionManager& cmgr = *shared_->cm;
  auto cm = cmgr.connect(shared_->traddr, shared_->trsvcid,
                         CmQpInfo{qp_->qp_num(), ctx.port_address(), psn}, &req, sizeof req);
  if (!cm) return where + ": CM: " + cm.error().message;
  cm_ = std::move(cm).value();
  cm_deadline_ = cmgr.now_ns() + uint64_t{shared_->options.connect_timeout_ms} * 1'000'000;
  cm_psn_ = psn;
  return "";
}

// One look at the CM: -EAGAIN (nothing yet), 0 (connected: the QP in RTS, receives posted), or
// -ECONNREFUSED with *err.
int RdmaQueue::step_qp(std::string* err) {
  const std::string where = "NVMe/RDMA " + shared_->traddr + ":" + shared_->trsvcid + " qid " +
                            std::to_string(params_.qid);
  const uint32_t entries = params_.entries;
  ConnectionManager& cmgr = *shared_->cm;
  auto fail = [&](std::string why) {
    *err = where + ": " + why;
    return -ECONNREFUSED;
  };
  {
    const CmEvent e = cm_->poll();
    switch (e.type) {
      case CmEventType::kNone:
        if (cmgr.now_ns() >= cm_deadline_)
          return fail("no answer within " + std::to_string(shared_->options.connect_timeout_ms) +
                      " ms");
        return -EAGAIN;
      case CmEventType::kRejected: {
        nr::CmReject rej{};
        if (e.private_data_len < sizeof rej) return fail("rejected");
        std::memcpy(&rej, e.private_data, sizeof rej);
        return fail(std::string("rejected: ") + reject_reason(rej.sts) + " (status " +
                    std::to_string(rej.sts) + ")");
      }
      case CmEventType::kConnectResponse: {
        nr::CmAccept acc{};
        if (e.private_data_len < 4) return fail("accept without private data");
        std::memcpy(&acc, e.private_data, std::min<std::size_t>(e.private_data_len, sizeof acc));
        if (acc.recfmt != nr::kRecfmt10) return fail("accept with an unknown RECFMT");
        if (acc.crqsize < entries)
          return fail("the controller's receive queue (" + std::to_string(acc.crqsize) +
                      ") is smaller than the queue (" + std::to_string(entries) + ")");
        crqsize_ = acc.crqsize;
        if (int rc = cm_->ready_qp(*qp_, e, cm_psn_, shared_->options.qp); rc != 0)
          return fail("QP: cannot move to RTS (" + std::to_string(rc) + ")");
        for (uint32_t i = 0; i < entries; ++i)
          if (!post_recv(i)) return fail("receives could not be posted");
        if (cm_->establish() != 0) return fail("the CM stream broke");
        broken_.store(false, std::memory_order_release);
        return 0;
      }
      default: {
        const std::string why = cm_->reason();
        return fail(to_string(e.type) + (why.empty() ? "" : " (" + why + ")"));
      }
    }
  }
}

void RdmaQueue::reset() {
  (void)open();  // a failure leaves the queue broken(): the reset fails and is tried again
}

int RdmaQueue::init_requests(uint32_t n) {
  uint32_t bits = 1;
  while ((1u << bits) < n) ++bits;  // the Qpair's CIDs: the request index in the low bits
  cid_mask_ = (1u << bits) - 1;
  reqs_.assign(n, Request{});
  iovs_.assign(std::size_t{n} * kMaxIov, iovec{});
  segments_.assign(std::size_t{n} * kMaxKeyed, spec::nvmf::KeyedSglDescriptor{});
  sq_.assign(params_.entries, sn::SubmissionEntry{});
  mrs_.reserve(64);  // the regions a program uses: a handful
  bounce_mr_.reset();
  auto b = env::DmaRegion::create(*shared_->options.registry, std::size_t{kBounceBytes} * n,
                                  env::DmaOptions{false});
  if (!b) return -ENOMEM;
  bounce_ = std::move(b).value();
  auto mr = shared_->options.context->reg_mr(
      *shared_->pd, bounce_->data(), bounce_->size(),
      verbs::access::kLocalWrite | verbs::access::kRemoteRead | verbs::access::kRemoteWrite);
  if (!mr) return -ENOMEM;
  bounce_mr_ = std::move(mr).value();
  return 0;
}

// ------------------------------------------------------------------------ commands ---

void RdmaQueue::drop_stale_mrs() {
  regions_removed_seen_ = shared_->regions_removed.load(std::memory_order_acquire);
  env::MemoryRegistry& registry = *shared_->options.registry;
  std::erase_if(mrs_, [&](const MrEntry& m) {
    const env::MemoryRegion now = registry.find(reinterpret_cast<void*>(m.base));
    return reinterpret_cast<uintptr_t>(now.vaddr) != m.base || now.length != m.length ||
           now.iova != m.iova;
  });
}

const verbs::Mr* RdmaQueue::mr_for(const void* p, std::size_t len) {
  if (shared_->regions_removed.load(std::memory_order_acquire) != regions_removed_seen_)
      [[unlikely]]
    drop_stale_mrs();
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const MrEntry& m : mrs_)
    if (a >= m.base && len <= m.length && a - m.base <= m.length - len) return m.mr.get();
  return register_region(p, len);
}

uint32_t RdmaQueue::rkey_of(const verbs::Mr& mr) {
  if (faults_ == nullptr) [[likely]]
    return mr.rkey();
  uint32_t n = faults_->bad_rkeys.load(std::memory_order_relaxed);
  while (n != 0 && !faults_->bad_rkeys.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  if (n == 0) return mr.rkey();
  faults_->bad_rkeys_sent.fetch_add(1, std::memory_order_relaxed);
  return mr.rkey() ^ 0x80;  // another tag of the same slot: a stale key the NIC refuses
}

const verbs::Mr* RdmaQueue::register_region(const void* p, std::size_t len) {
  const env::MemoryRegion region = shared_->options.registry->find(p);
  if (region.length == 0 || !region.contains(p, len)) return nullptr;
  auto mr = shared_->options.context->reg_mr(
      *shared_->pd, region.vaddr, region.length,
      verbs::access::kLocalWrite | verbs::access::kRemoteRead | verbs::access::kRemoteWrite);
  if (!mr) return nullptr;
  mrs_.push_back(MrEntry{reinterpret_cast<uintptr_t>(region.vaddr), region.length, region.iova,
                         std::move(mr).value()});
  return mrs_.back().mr.get();
}

int RdmaQueue::map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                        uint32_t len) {
  if (index >= reqs_.size() || iovcnt <= 0 || len == 0) return -EINVAL;
  uint32_t left = len, n = 0;
  iovec* dst = &iovs_[std::size_t{index} * kMaxIov];
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    if (n == kMaxIov) return -E2BIG;
    const uint32_t take = static_cast<uint32_t>(std::min<std::size_t>(iov[i].iov_len, left));
    if (take == 0 || iov[i].iov_base == nullptr) return -EINVAL;
    dst[n++] = iovec{iov[i].iov_base, take};
    left -= take;
  }
  if (left != 0) return -EINVAL;
  Request& r = reqs_[index];
  r = Request{};
  r.cid = cmd.cid;
  r.len = len;
  r.iovcnt = n;
  r.in_capsule = writes(cmd) && len <= in_capsule_;
  cmd.set_psdt(sn::kPsdtSglMptrContiguous);
  if (r.in_capsule) {
    cmd.dptr.sgl1 = nf::sgl::in_capsule(len);
  } else {
    bool contiguous = true;
    for (uint32_t i = 1; i < n; ++i)
      contiguous &=
          static_cast<uint8_t*>(dst[i - 1].iov_base) + dst[i - 1].iov_len == dst[i].iov_base;
    if (!contiguous) return map_segment(r, index, cmd, dst, n);
    if (len > nf::kKeyedSglMaxLength) return -E2BIG;
    void* addr = dst[0].iov_base;
    const verbs::Mr* mr = mr_for(addr, len);
    if (mr == nullptr) {
      if (len > kBounceBytes) return -EINVAL;  // not DMA memory of the registry
      if (bounce_mr_ == nullptr) return -EIO;  // the device failed: the reset renews it
      addr = static_cast<uint8_t*>(bounce_->data()) + std::size_t{kBounceBytes} * index;
      mr = bounce_mr_.get();
      if (writes(cmd)) {
        std::memcpy(addr, dst[0].iov_base, len);
      } else {
        r.bounced_read = true;
      }
    }
    const auto k =
        nf::KeyedSglDescriptor::make(reinterpret_cast<uintptr_t>(addr), len, rkey_of(*mr));
    std::memcpy(&cmd.dptr.sgl1, &k, sizeof k);
  }
  r.mapped = true;
  return 0;
}

// Pieces that are not one range: a keyed descriptor per run of adjacent pieces, listed in
// the capsule behind a Last Segment descriptor (offset 0 of the in-capsule data).
int RdmaQueue::map_segment(Request& r, uint16_t index, sn::SubmissionEntry& cmd, const iovec* v,
                           uint32_t n) {
  nf::KeyedSglDescriptor* out = &segments_[std::size_t{index} * kMaxKeyed];
  uint32_t k = 0;
  for (uint32_t i = 0; i < n;) {
    auto* base = static_cast<uint8_t*>(v[i].iov_base);
    std::size_t len = v[i].iov_len;
    for (++i; i < n && base + len == v[i].iov_base; ++i) len += v[i].iov_len;
    if (k == max_keyed_ || (k + 1) * sizeof *out > in_capsule_) return -EINVAL;
    if (len > nf::kKeyedSglMaxLength) return -E2BIG;
    const verbs::Mr* mr = mr_for(base, len);
    if (mr == nullptr) return -EINVAL;  // not DMA memory of the registry
    out[k++] = nf::KeyedSglDescriptor::make(reinterpret_cast<uintptr_t>(base),
                                            static_cast<uint32_t>(len), rkey_of(*mr));
  }
  r.segment = static_cast<uint8_t>(k);
  cmd.dptr.sgl1 = sn::SglDescriptor{
      0,
      static_cast<uint32_t>(k * sizeof *out),
      {},
      sn::SglDescriptor::make_id(sn::sgl::kTypeLastSegment, sn::sgl::kSubtypeOffset)};
  r.mapped = true;
  return 0;
}

RdmaQueue::Request* RdmaQueue::request_of(uint16_t cid) {
  const uint32_t index = cid & cid_mask_;
  if (index >= reqs_.size()) return nullptr;
  Request& r = reqs_[index];
  return r.mapped && r.cid == cid ? &r : nullptr;
}

void RdmaQueue::flush(uint32_t tail) {
  tail_ = tail;
  if (!broken()) send_capsules();
}

// Capsules for the SQ slots written since the last post, in chains of up to kPostBatch.
void RdmaQueue::send_capsules() {
  auto* base = static_cast<uint8_t*>(region_->data());
  while (produced_ != tail_) {
    verbs::SendWr wrs[kPostBatch];
    verbs::Sge sges[kPostBatch];
    uint32_t k = 0, slot = produced_;
    while (k < kPostBatch && slot != tail_) {
      sn::SubmissionEntry& sqe = sq_[slot];
      Request* r = request_of(sqe.cid);
      uint8_t* cap = base + std::size_t{capsule_stride_} * slot;
      uint32_t bytes = kSqe;
      if (r == nullptr) {  // no data: a null keyed SGL
        sqe.set_psdt(sn::kPsdtSglMptrContiguous);
        const auto none = nf::KeyedSglDescriptor::make(0, 0, 0);
        std::memcpy(&sqe.dptr.sgl1, &none, sizeof none);
      } else {
        r->sent = true;
        if (r->segment > 0) {
          const std::size_t bytes_of = r->segment * sizeof(nf::KeyedSglDescriptor);
          std::memcpy(cap + bytes, &segments_[std::size_t(r - reqs_.data()) * kMaxKeyed], bytes_of);
          bytes += static_cast<uint32_t>(bytes_of);
        } else if (r->in_capsule) {
          const iovec* v = &iovs_[std::size_t(r - reqs_.data()) * kMaxIov];
          for (uint32_t i = 0; i < r->iovcnt; ++i) {
            std::memcpy(cap + bytes, v[i].iov_base, v[i].iov_len);
            bytes += static_cast<uint32_t>(v[i].iov_len);
          }
        }
      }
      std::memcpy(cap, &sqe, kSqe);
      sges[k] = verbs::Sge{reinterpret_cast<uintptr_t>(cap), bytes, region_mr_->lkey()};
      wrs[k] = verbs::SendWr{};
      wrs[k].wr_id = kSendTag | slot;
      wrs[k].sg_list = &sges[k];
      wrs[k].num_sge = 1;
      wrs[k].opcode = verbs::WrOpcode::kSend;
      wrs[k].send_flags = verbs::send_flag::kSignaled;
      if (k > 0) wrs[k - 1].next = &wrs[k];
      ++k;
      slot = slot + 1 == params_.entries ? 0 : slot + 1;
    }
    const verbs::SendWr* bad = nullptr;
    const int rc = qp_->post_send(wrs[0], &bad);
    const uint32_t posted = rc == 0 ? k : static_cast<uint32_t>(bad - wrs);
    produced_ = (produced_ + posted) % params_.entries;
    outstanding_ += posted;
    if (rc == -ENOMEM) return;  // the send queue is full: the next poll goes on
    if (rc != 0) {
      broken_.store(true, std::memory_order_release);
      return;
    }
  }
}

bool RdmaQueue::post_recv(uint32_t slot) {
  auto* rsp = static_cast<uint8_t*>(region_->data()) +
              std::size_t{capsule_stride_} * params_.entries +
              std::size_t{nr::kResponseCapsule} * slot;
  const verbs::Sge sge{reinterpret_cast<uintptr_t>(rsp), nr::kResponseCapsule, region_mr_->lkey()};
  verbs::RecvWr wr;
  wr.wr_id = kRecvTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const verbs::RecvWr* bad = nullptr;
  return qp_->post_recv(wr, &bad) == 0;
}

// ---------------------------------------------------------------------- receiving ---

int RdmaQueue::poll(sn::CompletionEntry* out, uint32_t max) {
  if (broken()) return 0;
  if (produced_ != tail_) send_capsules();
  uint32_t n = 0;
  const auto* rsp_base =
      static_cast<const uint8_t*>(region_->data()) + std::size_t{capsule_stride_} * params_.entries;
  verbs::WorkCompletion wc[kPostBatch];
  while (n < max) {
    // No more completions than out[] has room for: each receive is one response.
    const int got = cq_->poll(wc, static_cast<int>(std::min<uint32_t>(kPostBatch, max - n)));
    if (got < 0) {
      broken_.store(true, std::memory_order_release);
      break;
    }
    if (got == 0) break;
    for (int i = 0; i < got; ++i) {
      if (wc[i].status != verbs::WcStatus::kSuccess) {
        // The QP is in error: nothing more completes until the controller resets it.
        broken_.store(true, std::memory_order_release);
        continue;
      }
      if ((wc[i].wr_id & ~0xffffffffull) != kRecvTag) continue;  // a capsule's SEND
      const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id);
      if (wc[i].byte_len != nr::kResponseCapsule) {
        broken_.store(true, std::memory_order_release);  // not a response capsule
        continue;
      }
      sn::CompletionEntry cqe;
      std::memcpy(&cqe, rsp_base + std::size_t{nr::kResponseCapsule} * slot, sizeof cqe);
      cqe.sqid = params_.qid;
      if (Request* r = request_of(cqe.cid)) {
        r->mapped = false;
        if (r->bounced_read) {
          const uint32_t index = static_cast<uint32_t>(r - reqs_.data());
          std::memcpy(iovs_[std::size_t{index} * kMaxIov].iov_base,
                      static_cast<uint8_t*>(bounce_->data()) + std::size_t{kBounceBytes} * index,
                      r->len);
        }
      }
      out[n++] = cqe;
      if (outstanding_ > 0) --outstanding_;
      if (!post_recv(slot)) broken_.store(true, std::memory_order_release);
    }
    if (broken()) break;
  }
  if (n > 0 || outstanding_ == 0) {
    empty_polls_ = 0;
    quiet_since_ns_ = 0;
  } else if (params_.qid == 0 || ++empty_polls_ == kClockPolls) [[unlikely]] {
    empty_polls_ = 0;
    const uint64_t now = shared_->cm->now_ns();  // the CM's clock (virtual in the lockstep)
    if (quiet_since_ns_ == 0) quiet_since_ns_ = now;
    // The admin queue always waits (its AERs): its NIC is probed every 1 ms of quiet only.
    const bool quiet = now - quiet_since_ns_ >= (params_.qid == 0 ? 10 : 1) * kCmCheckNs;
    if (quiet) quiet_since_ns_ = now;
    // Nothing answers: the target may have ended the connection (its DREQ), or our own NIC
    // may have failed or been reset under us (a register read).
    if ((params_.qid == 0 || quiet) && cm_ && cm_->poll().type != CmEventType::kNone)
      broken_.store(true, std::memory_order_release);
    if (quiet && shared_->options.context->probe_fatal())
      broken_.store(true, std::memory_order_release);
  }
  return static_cast<int>(n);
}

}  // namespace pollux::fabric::rdma
