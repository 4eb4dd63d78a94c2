#include "fabric/rdma/target_connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabric/rdma/target_transport.h"
#include "fabric/target/poll_group.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma {

namespace nr = spec::nvme_rdma;
namespace nf = spec::nvmf;
namespace sn = spec::nvme;

namespace {
constexpr uint32_t kSqe = nr::kCommandCapsuleHeader;
// Our first PSN: any 24-bit value does; one that differs per QP makes a stray packet of an
// earlier connection with the same QP number unlikely to fit.
uint32_t start_psn(uint32_t qp_num) {
  return (qp_num * 2654435761u) & 0xffffff;
}
// A keyed data block with an address (0h), or one whose key the host asks to have invalidated
// (Fh; Linux's host sends every keyed descriptor so). The answer is a plain SEND either way:
// without Send with Invalidate the host invalidates its key itself, as the RDMA transport
// binding allows.
bool keyed_subtype_ok(uint8_t id) {
  return id == sn::SglDescriptor::make_id(sn::sgl::kTypeKeyedDataBlock, sn::sgl::kSubtypeAddress) ||
         id == sn::SglDescriptor::make_id(sn::sgl::kTypeKeyedDataBlock,
                                          nf::sgl::kSubtypeInvalidateKey);
}
}  // namespace

RdmaConnection::RdmaConnection(RdmaTargetGroup& group, std::unique_ptr<CmId> cm,
                               target::ListenAddress listen)
    : Qpair(group.group(), group.transport()),
      tg_(group),
      transport_(group.transport()),
      cm_(std::move(cm)),
      listen_(std::move(listen)),
      peer_(cm_->peer_name()) {}

RdmaConnection::~RdmaConnection() {
  if (qp_ && tg_.srq()) tg_.remove_qp(qp_->qp_num());
  qp_.reset();  // its completions leave the group's CQ with it
  if (cq_reserved_ != 0) tg_.release_cq(cq_reserved_);
  mr_.reset();
  region_.reset();
}

// ---------------------------------------------------------------------- set-up ---

// The connect request's private data against the transport's limits: 0, or the REJECT status.
uint16_t RdmaConnection::validate(const CmEvent& e, uint16_t* qid, uint32_t* entries) const {
  if (e.private_data_len < sizeof(nr::CmRequest)) return nr::cm_status::kInvalidLength;
  nr::CmRequest req;
  std::memcpy(&req, e.private_data, sizeof req);
  if (req.recfmt != nr::kRecfmt10) return nr::cm_status::kInvalidRecfmt;
  const RdmaTargetOptions& o = transport_.options();
  if (req.qid > o.max_io_qpairs_per_ctrlr) return nr::cm_status::kInvalidQid;
  const uint32_t limit = req.qid == 0 ? o.max_aq_depth : o.max_queue_depth;
  // HSQSIZE is 0's based: at least 2 entries, at most the queue depth allowed.
  if (req.hsqsize < 1 || uint32_t{req.hsqsize} + 1 > limit) return nr::cm_status::kInvalidHsqsize;
  // A response for every command it may send: HRQSIZE at least the SQ's entries.
  if (req.hrqsize < uint32_t{req.hsqsize} + 1) return nr::cm_status::kInvalidHrqsize;
  *qid = req.qid;
  *entries = uint32_t{req.hsqsize} + 1;
  return 0;
}

void RdmaConnection::reject(uint16_t sts) {
  const nr::CmReject rej{nr::kRecfmt10, sts};
  (void)cm_->reject(&rej, sizeof rej);
  // The REJ may still be on its way: the CM id lingers with the group until it has gone.
  fmt::print(stderr, "nvmf/rdma {}: connect request rejected (status {:#x})\n", peer_, sts);
}

bool RdmaConnection::open(const CmEvent& request) {
  uint32_t entries = 0;
  if (const uint16_t sts = validate(request, &cm_qid_, &entries); sts != 0) {
    reject(sts);
    return false;
  }
  const RdmaTargetOptions& o = transport_.options();
  icd_size_ = o.in_capsule_data_size;
  // Twice the entries in receives: a capsule may arrive for an entry whose previous command's
  // response the host has seen before our SEND's completion freed the request.
  // With the group's SRQ the capsules land in its buffers instead.
  const bool srq = tg_.srq() != nullptr;
  const uint32_t recvs = srq ? 0 : 2 * entries;
  // Send WQEs per request at most: a WRITE per keyed descriptor and the response SEND.
  const uint32_t sends = (kMaxKeyedSgls + 1) * entries + 4;
  // A QP in error completes every WQE it holds (unsignaled ones too): room for them all.
  const uint32_t cqes = recvs + sends;
  if (!tg_.reserve_cq(cqes)) {
    reject(nr::cm_status::kNoResources);
    return false;
  }
  cq_reserved_ = cqes;
  const std::size_t stride = capsule_stride(icd_size_);
  const std::size_t bytes = stride * recvs + std::size_t{nr::kResponseCapsule} * entries;
  auto region = env::DmaRegion::create(transport_.registry(), bytes, env::DmaOptions{false});
  if (!region) {
    reject(nr::cm_status::kNoResources);
    return false;
  }
  region_ = std::move(region).value();
  auto mr = transport_.context().reg_mr(transport_.pd(), region_->data(), bytes,
                                        verbs::access::kLocalWrite);
  verbs::QpInitAttr init;
  init.send_cq = init.recv_cq = tg_.cq();
  init.srq = tg_.srq();
  init.cap = verbs::QpCap{sends, recvs, 1, 1};
  auto qp = mr ? transport_.context().create_qp(transport_.pd(), init)
               : Result<std::unique_ptr<verbs::Qp>>(mr.error());
  if (!qp) {
    reject(nr::cm_status::kNoResources);
    return false;
  }
  mr_ = std::move(mr).value();
  qp_ = std::move(qp).value();
  const uint32_t psn = start_psn(qp_->qp_num());
  if (int rc = cm_->ready_qp(*qp_, request, psn, o.qp); rc != 0) {
    fmt::print(stderr, "nvmf/rdma {}: QP to RTS: {}\n", peer_, std::strerror(-rc));
    reject(nr::cm_status::kNoResources);
    return false;
  }
  if (srq) tg_.add_qp(qp_->qp_num(), this);  // ready: capsules may come from here on
  auto* base = static_cast<uint8_t*>(region_->data());
  slots_.assign(recvs, RecvSlot{});
  for (uint32_t i = 0; i < recvs; ++i) {
    slots_[i].conn = this;
    slots_[i].buf = base + stride * i;
  }
  reqs_.assign(entries, RdmaRequest{});
  free_.clear();
  for (uint32_t i = 0; i < entries; ++i) {
    RdmaRequest& r = reqs_[i];
    r.conn = this;
    r.qpair = this;
    r.index = static_cast<uint16_t>(i);
    r.rsp_buf = base + stride * recvs + std::size_t{nr::kResponseCapsule} * i;
    free_.push_back(static_cast<uint16_t>(entries - 1 - i));
  }
  for (RecvSlot& s : slots_) post_recv(s);
  if (closing_) return false;
  nr::CmAccept acc{};
  acc.recfmt = nr::kRecfmt10;
  acc.crqsize = static_cast<uint16_t>(std::min<uint32_t>(srq ? 2 * entries : recvs, 0xffff));
  const CmQpInfo local{qp_->qp_num(), transport_.context().port_address(), psn};
  if (cm_->accept(local, &acc, sizeof acc) != 0) {
    begin_close("the CM accept failed");
    return false;
  }
  return true;
}

bool RdmaConnection::prepare(uint16_t q, uint32_t n) {
  // The Connect must name the queue the CM request did, at most the size it asked for.
  return q == cm_qid_ && n >= 1 && n <= reqs_.size();
}

void RdmaConnection::poll_cm() {
  if (!cm_) return;
  const CmEvent e = cm_->poll();
  if (e.type == CmEventType::kDisconnected) begin_close("the host disconnected");
}

// ---------------------------------------------------------------------- commands ---

void RdmaConnection::post_recv(RecvSlot& s) {
  if (s.shared) return tg_.repost(s);  // the SRQ's: back to it, closing or not
  if (closing_) return;
  const verbs::Sge sge{reinterpret_cast<uintptr_t>(s.buf), kSqe + icd_size_, mr_->lkey()};
  verbs::RecvWr wr;
  wr.wr_id = make_wr_id(&s, WrKind::kRecv);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const verbs::RecvWr* bad = nullptr;
  if (qp_->post_recv(wr, &bad) != 0) return begin_close("a receive could not be posted");
  ++recvs_posted_;
}

void RdmaConnection::on_drain_marker() {
  send_drained_ = true;
  const env::Clock& clock = tg_.group().thread()->clock();
  drain_deadline_ = clock.now() + clock.ticks_per_second() / 20;
}

bool RdmaConnection::finished() const {
  if (!closing_ || in_core_ != 0 || !send_drained_) return false;
  return recvs_posted_ == 0 || tg_.group().thread()->clock().now() >= drain_deadline_;
}

void RdmaConnection::on_completion(const verbs::WorkCompletion& wc) {
  const WrKind kind = wr_kind(wc.wr_id);
  if (kind == WrKind::kDrainSend) return on_drain_marker();
  if (kind == WrKind::kRecv && !wr_owner<RecvSlot>(wc.wr_id)->shared) --recvs_posted_;
  if (wc.status != verbs::WcStatus::kSuccess) {
    if (kind == WrKind::kRecv && wr_owner<RecvSlot>(wc.wr_id)->shared)
      tg_.repost(*wr_owner<RecvSlot>(wc.wr_id));  // a flushed SRQ buffer goes back
    if (!closing_ && wc.status != verbs::WcStatus::kWrFlushErr) {
      ++stats_.error_completions;
      ++tg_.mutable_stats().error_completions;
      fmt::print(stderr, "nvmf/rdma {}: work completion error: {}\n", peer_,
                 verbs::to_string(wc.status));
    }
    begin_close("a work request failed");
    if (kind == WrKind::kSend) release(*wr_owner<RdmaRequest>(wc.wr_id));
    return;
  }
  switch (kind) {
    case WrKind::kRecv: {
      RecvSlot& s = *wr_owner<RecvSlot>(wc.wr_id);
      if (closing_) return post_recv(s);  // an SRQ slot goes back
      s.byte_len = wc.byte_len;
      ++stats_.capsules;
      on_recv(s);
      return;
    }
    case WrKind::kRead: {
      RdmaRequest& r = *wr_owner<RdmaRequest>(wc.wr_id);
      if (r.state != RdmaRequest::State::kReading) return;  // dropped by a close
      to_core(r);
      return;
    }
    case WrKind::kWrite:
      return;  // unsignaled: only errors complete
    case WrKind::kSend:
      release(*wr_owner<RdmaRequest>(wc.wr_id));
      return;
    case WrKind::kDrainSend:
      return;  // taken above
  }
}

void RdmaConnection::on_recv(RecvSlot& s) {
  if (s.byte_len < kSqe) {
    // No SQE to answer: the host is not speaking NVMe/RDMA. Its buffer goes back: kept, an
    // SRQ's would be lost to every connection of the group, one per short capsule.
    ++stats_.bad_capsules;
    begin_close("a capsule shorter than a command");
    post_recv(s);
    return;
  }
  if (free_.empty()) {  // the previous command of that entry is still sending its response
    ++stats_.backlogged;
    s.next = nullptr;
    if (backlog_tail_ != nullptr) {
      backlog_tail_->next = &s;
    } else {
      backlog_head_ = &s;
    }
    backlog_tail_ = &s;
    return;
  }
  RdmaRequest& r = reqs_[free_.back()];
  free_.pop_back();
  start(r, s);
}

// The capsule's SGL decides where the data is: in the capsule, or behind a remote key.
void RdmaConnection::start(RdmaRequest& r, RecvSlot& s) {
  std::memcpy(&r.cmd, s.buf, kSqe);
  r.rsp = sn::CompletionEntry{};
  r.data = nullptr;
  r.length = 0;
  r.xfer = target::xfer_of(r.cmd);
  r.capsule = nullptr;
  r.pool_buffer = false;
  r.nsgl = 0;
  r.state = RdmaRequest::State::kNeedBuffer;
  const sn::SglDescriptor& sgl = r.cmd.dptr.sgl1;
  const uint32_t icd = s.byte_len - kSqe;
  if (r.cmd.psdt() != sn::kPsdtSglMptrContiguous) {
    post_recv(s);
    return fail_command(r, target::generic(sn::sc::kInvalidField));
  }
  if (sgl.type() == sn::sgl::kTypeKeyedDataBlock) {
    post_recv(s);  // the capsule is copied out
    nf::KeyedSglDescriptor k;
    std::memcpy(&k, &sgl, sizeof k);
    if (!keyed_subtype_ok(k.id))
      return fail_command(r, target::generic(sn::sc::kSglDescriptorTypeInvalid));
    if (r.xfer == target::Xfer::kNone || k.length() == 0) return to_core(r);
    if (r.xfer == target::Xfer::kBidirectional)
      return fail_command(r, target::generic(sn::sc::kInvalidField));
    if (k.length() > transport_.options().max_io_size)
      return fail_command(r, target::generic(sn::sc::kDataSglLengthInvalid));
    r.sgl[0] = RdmaRequest::Keyed{k.address, k.length(), k.key()};
    r.nsgl = 1;
    r.length = k.length();
    return need_buffer(r);
  }
  if (sgl.type() == sn::sgl::kTypeLastSegment) {
    const uint16_t st = take_segment(r, s);
    post_recv(s);  // the descriptors are copied out
    if (st != 0) return fail_command(r, st);
    if (r.length == 0) {
      r.nsgl = 0;
      return to_core(r);
    }
    return need_buffer(r);
  }
  if (sgl.id == nf::sgl::kIdInCapsule) {
    if (sgl.length == 0) {
      post_recv(s);
      return to_core(r);
    }
    if (r.xfer != target::Xfer::kHostToController) {
      post_recv(s);
      return fail_command(r, target::generic(sn::sc::kSglDescriptorTypeInvalid));
    }
    if (sgl.address > icd) {
      post_recv(s);
      return fail_command(r, target::generic(sn::sc::kSglOffsetInvalid));
    }
    if (sgl.length > icd - sgl.address) {
      post_recv(s);
      return fail_command(r, target::generic(sn::sc::kDataSglLengthInvalid));
    }
    ++tg_.mutable_stats().in_capsule;
    r.capsule = &s;  // the receive buffer is the data buffer until the command completes
    r.data = s.buf + kSqe + sgl.address;
    r.length = sgl.length;
    return to_core(r);
  }
  post_recv(s);
  if (sgl.length == 0 && r.xfer == target::Xfer::kNone) return to_core(r);
  fail_command(r, target::generic(sn::sc::kSglDescriptorTypeInvalid));
}

// SGL1 a Last Segment (offset subtype) into the capsule, listing keyed descriptors: the
// command's data is theirs, in order, gathered into (or scattered from) one pool buffer.
uint16_t RdmaConnection::take_segment(RdmaRequest& r, const RecvSlot& s) {
  const sn::SglDescriptor& sgl = r.cmd.dptr.sgl1;
  const uint32_t icd = s.byte_len - kSqe;
  if (sgl.subtype() != sn::sgl::kSubtypeOffset)
    return target::generic(sn::sc::kSglDescriptorTypeInvalid);
  if (sgl.length == 0 || sgl.length % sizeof(nf::KeyedSglDescriptor) != 0)
    return target::generic(sn::sc::kInvalidSglSegmentDescriptor);
  const uint32_t n = sgl.length / sizeof(nf::KeyedSglDescriptor);
  if (n > kMaxKeyedSgls) return target::generic(sn::sc::kInvalidNumberOfSglDescriptors);
  if (sgl.address > icd || sgl.length > icd - sgl.address)
    return target::generic(sn::sc::kSglOffsetInvalid);
  if (r.xfer == target::Xfer::kBidirectional) return target::generic(sn::sc::kInvalidField);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    nf::KeyedSglDescriptor k;
    std::memcpy(&k, s.buf + kSqe + sgl.address + i * sizeof k, sizeof k);
    if (!keyed_subtype_ok(k.id)) return target::generic(sn::sc::kSglDescriptorTypeInvalid);
    r.sgl[i] = RdmaRequest::Keyed{k.address, k.length(), k.key()};
    total += k.length();
  }
  if (total > transport_.options().max_io_size)
    return target::generic(sn::sc::kDataSglLengthInvalid);
  r.nsgl = n;
  r.length = r.xfer == target::Xfer::kNone ? 0 : static_cast<uint32_t>(total);
  return 0;
}

// The command does not run: its response carries `status`.
void RdmaConnection::fail_command(RdmaRequest& r, uint16_t status) {
  ++tg_.mutable_stats().bad_sgls;
  r.rsp = sn::CompletionEntry{};
  r.rsp.cid = r.cmd.cid;
  r.rsp.sqid = qid;
  sq_head = static_cast<uint16_t>(entries ? (sq_head + 1) % entries : sq_head + 1);
  r.rsp.sqhd = sq_flow_control ? sq_head : nf::connect::kSqhdFlowControlDisabled;
  r.rsp.status = status;
  r.length = 0;
  r.xfer = target::Xfer::kNone;
  r.state = RdmaRequest::State::kCore;
  ++in_core_;
  complete(r);
}

void RdmaConnection::need_buffer(RdmaRequest& r) {
  void* b = tg_.get_buffer();
  if (b == nullptr) {
    r.state = RdmaRequest::State::kNeedBuffer;
    tg_.wait_for_buffer(r);
    return;
  }
  buffer_ready(r, b);
}

void RdmaConnection::buffer_ready(RdmaRequest& r, void* buf) {
  r.data = buf;
  r.pool_buffer = true;
  if (r.xfer == target::Xfer::kHostToController) return post_read(r);
  to_core(r);
}

// One READ per keyed descriptor into consecutive parts of the buffer; only the last is
// signaled (an RC QP completes in order: its completion says all are in).
void RdmaConnection::post_read(RdmaRequest& r) {
  r.state = RdmaRequest::State::kReading;
  verbs::Sge sges[kMaxKeyedSgls];
  verbs::SendWr wrs[kMaxKeyedSgls];
  uint32_t off = 0, k = 0;
  for (uint32_t i = 0; i < r.nsgl; ++i) {
    if (r.sgl[i].length == 0) continue;
    sges[k] = verbs::Sge{reinterpret_cast<uintptr_t>(r.data) + off, r.sgl[i].length,
                         transport_.pool_lkey()};
    wrs[k] = verbs::SendWr{};
    wrs[k].wr_id = make_wr_id(&r, WrKind::kRead);
    wrs[k].sg_list = &sges[k];
    wrs[k].num_sge = 1;
    wrs[k].opcode = verbs::WrOpcode::kRdmaRead;
    wrs[k].remote_addr = r.sgl[i].addr;
    wrs[k].rkey = r.sgl[i].rkey;
    if (k > 0) wrs[k - 1].next = &wrs[k];
    off += r.sgl[i].length;
    ++k;
  }
  wrs[k - 1].send_flags = verbs::send_flag::kSignaled;
  const verbs::SendWr* bad = nullptr;
  if (qp_->post_send(wrs[0], &bad) != 0) return begin_close("an RDMA READ could not be posted");
  stats_.reads += k;
  tg_.mutable_stats().rdma_reads += k;
}

void RdmaConnection::to_core(RdmaRequest& r) {
  r.state = RdmaRequest::State::kCore;
  ++in_core_;
  target::execute(r);
}

// ---------------------------------------------------------------------- completions ---

void RdmaConnection::complete(target::Request& base) {
  auto& r = static_cast<RdmaRequest&>(base);
  --in_core_;
  if (closing_) return release(r);  // nobody to tell
  r.state = RdmaRequest::State::kSending;
  std::memcpy(r.rsp_buf, &r.rsp, nr::kResponseCapsule);
  const verbs::Sge rsp{reinterpret_cast<uintptr_t>(r.rsp_buf), nr::kResponseCapsule, mr_->lkey()};
  verbs::SendWr send;
  send.wr_id = make_wr_id(&r, WrKind::kSend);
  send.sg_list = &rsp;
  send.num_sge = 1;
  send.opcode = verbs::WrOpcode::kSend;
  send.send_flags = verbs::send_flag::kSignaled;
  // Read data goes first, on the same QP: the host sees it in place before the response.
  // One WRITE per keyed descriptor, as much as the command produced.
  verbs::Sge data[kMaxKeyedSgls];
  verbs::SendWr writes[kMaxKeyedSgls];
  uint32_t k = 0;
  if (r.xfer == target::Xfer::kControllerToHost && r.pool_buffer && r.rsp.status == 0) {
    uint32_t off = 0;
    for (uint32_t i = 0; i < r.nsgl && off < r.length; ++i) {
      const uint32_t len = std::min(r.sgl[i].length, r.length - off);
      if (len == 0) continue;
      data[k] = verbs::Sge{reinterpret_cast<uintptr_t>(r.data) + off, len, transport_.pool_lkey()};
      writes[k] = verbs::SendWr{};
      writes[k].wr_id = make_wr_id(&r, WrKind::kWrite);
      writes[k].sg_list = &data[k];
      writes[k].num_sge = 1;
      writes[k].opcode = verbs::WrOpcode::kRdmaWrite;
      writes[k].remote_addr = r.sgl[i].addr;
      writes[k].rkey = r.sgl[i].rkey;
      if (k > 0) writes[k - 1].next = &writes[k];
      off += len;
      ++k;
    }
    if (k > 0) writes[k - 1].next = &send;
  }
  const verbs::SendWr* bad = nullptr;
  if (qp_->post_send(k > 0 ? writes[0] : send, &bad) != 0) {
    begin_close("a response could not be posted");
    return release(r);
  }
  stats_.writes += k;
  tg_.mutable_stats().rdma_writes += k;
  ++stats_.sends;
}

void RdmaConnection::release(RdmaRequest& r) {
  if (r.state == RdmaRequest::State::kFree) return;
  if (r.pool_buffer) tg_.put_buffer(r.data);
  r.pool_buffer = false;
  r.data = nullptr;
  if (r.capsule != nullptr) post_recv(*r.capsule);
  r.capsule = nullptr;
  r.state = RdmaRequest::State::kFree;
  free_.push_back(r.index);
  if (backlog_head_ != nullptr && !closing_) {
    RecvSlot* s = backlog_head_;
    backlog_head_ = s->next;
    if (backlog_head_ == nullptr) backlog_tail_ = nullptr;
    RdmaRequest& next = reqs_[free_.back()];
    free_.pop_back();
    start(next, *s);
  }
}

// ---------------------------------------------------------------------- the end ---

void RdmaConnection::disconnect() {
  begin_close("the controller ends the queue");
}

void RdmaConnection::begin_close(const char* why) {
  if (closing_) return;
  closing_ = true;
  state = State::kClosing;
  fmt::print(stderr, "nvmf/rdma {} (qid {}): closing: {}\n", peer_, cm_qid_, why);
  tg_.forget_waits(*this);
  if (cm_) cm_->disconnect();
  if (qp_) {
    verbs::QpAttr a;
    a.qp_state = verbs::QpState::kErr;
    (void)qp_->modify(a, verbs::qp_attr::kState);  // what is posted completes flushed
    // A marker behind everything posted on the send queue (see finished()).
    verbs::SendWr sm;
    sm.wr_id = make_wr_id(this, WrKind::kDrainSend);
    sm.opcode = verbs::WrOpcode::kSend;
    sm.send_flags = verbs::send_flag::kSignaled;
    const verbs::SendWr* sbad = nullptr;
    if (qp_->post_send(sm, &sbad) != 0) on_drain_marker();  // nothing more will come
  } else {
    send_drained_ = true;
  }
  target::qpair_closing(*this);  // held AERs come back through complete()
  for (RdmaRequest& r : reqs_) {
    if (r.state == RdmaRequest::State::kNeedBuffer || r.state == RdmaRequest::State::kReading)
      release(r);
  }
  for (RecvSlot* s = backlog_head_; s != nullptr;) {  // an SRQ's slots go back to it
    RecvSlot* next = s->next;
    post_recv(*s);
    s = next;
  }
  backlog_head_ = backlog_tail_ = nullptr;
}

void RdmaConnection::finalize() {
  if (qp_ && tg_.srq()) tg_.remove_qp(qp_->qp_num());
  qp_.reset();  // nothing of it is left in the CQ, nothing more will be written
  for (RdmaRequest& r : reqs_) release(r);
  target::qpair_closed(*this);
}

}  // namespace pollux::fabric::rdma
