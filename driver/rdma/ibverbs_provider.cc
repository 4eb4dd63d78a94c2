#include "driver/rdma/ibverbs_provider.h"

#include <fcntl.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace pollux::rdma {

namespace {

// The verbs ABI numbering spec/rnic.h promises, checked against libibverbs' own headers.
static_assert(static_cast<int>(WrOpcode::kRdmaWrite) == IBV_WR_RDMA_WRITE);
static_assert(static_cast<int>(WrOpcode::kRdmaWriteWithImm) == IBV_WR_RDMA_WRITE_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::kSend) == IBV_WR_SEND);
static_assert(static_cast<int>(WrOpcode::kSendWithImm) == IBV_WR_SEND_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::kRdmaRead) == IBV_WR_RDMA_READ);
static_assert(static_cast<int>(WcOpcode::kSend) == IBV_WC_SEND);
static_assert(static_cast<int>(WcOpcode::kRdmaWrite) == IBV_WC_RDMA_WRITE);
static_assert(static_cast<int>(WcOpcode::kRdmaRead) == IBV_WC_RDMA_READ);
static_assert(static_cast<int>(WcOpcode::kRecv) == IBV_WC_RECV);
static_assert(static_cast<int>(WcOpcode::kRecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(static_cast<int>(WcStatus::kRemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(WcStatus::kWrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::kRetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::kGeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(static_cast<int>(QpState::kRts) == IBV_QPS_RTS);
static_assert(static_cast<int>(QpState::kErr) == IBV_QPS_ERR);
static_assert(static_cast<int>(Mtu::k1024) == IBV_MTU_1024);
static_assert(static_cast<int>(Mtu::k4096) == IBV_MTU_4096);
static_assert(access::kLocalWrite == IBV_ACCESS_LOCAL_WRITE);
static_assert(access::kRemoteWrite == IBV_ACCESS_REMOTE_WRITE);
static_assert(access::kRemoteRead == IBV_ACCESS_REMOTE_READ);
static_assert(access::kRemoteAtomic == IBV_ACCESS_REMOTE_ATOMIC);
static_assert(qp_attr::kState == IBV_QP_STATE && qp_attr::kAv == IBV_QP_AV);
static_assert(qp_attr::kAccessFlags == IBV_QP_ACCESS_FLAGS && qp_attr::kPort == IBV_QP_PORT);
static_assert(qp_attr::kPathMtu == IBV_QP_PATH_MTU && qp_attr::kDestQpn == IBV_QP_DEST_QPN);
static_assert(qp_attr::kSqPsn == IBV_QP_SQ_PSN && qp_attr::kRqPsn == IBV_QP_RQ_PSN);
static_assert(qp_attr::kMaxQpRdAtomic == IBV_QP_MAX_QP_RD_ATOMIC);
static_assert(qp_attr::kMaxDestRdAtomic == IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(qp_attr::kMinRnrTimer == IBV_QP_MIN_RNR_TIMER);
static_assert(wc_flag::kWithImm == IBV_WC_WITH_IMM);
static_assert(static_cast<int>(EventType::kQpFatal) == IBV_EVENT_QP_FATAL);
static_assert(static_cast<int>(EventType::kDeviceFatal) == IBV_EVENT_DEVICE_FATAL);
static_assert(static_cast<int>(EventType::kQpLastWqeReached) == IBV_EVENT_QP_LAST_WQE_REACHED);
// Scatter lists go to libibverbs as they are.
static_assert(sizeof(Sge) == sizeof(ibv_sge) && alignof(Sge) == alignof(ibv_sge));
static_assert(offsetof(Sge, addr) == offsetof(ibv_sge, addr));
static_assert(offsetof(Sge, length) == offsetof(ibv_sge, length));
static_assert(offsetof(Sge, lkey) == offsetof(ibv_sge, lkey));

constexpr int kChunk = 16;  // work requests translated per ibv_post_* call
constexpr int kPollBatch = 32;

Error ibv_error(int err, const std::string& what) {
  if (err == 0) err = EIO;
  return make_error(err, what + ": " + std::strerror(err));
}

ibv_sge* sges(const Sge* s) {
  return reinterpret_cast<ibv_sge*>(const_cast<Sge*>(s));
}

unsigned send_flags(uint32_t f) {
  unsigned o = 0;
  if (f & send_flag::kSignaled) o |= IBV_SEND_SIGNALED;
  if (f & send_flag::kSolicited) o |= IBV_SEND_SOLICITED;
  if (f & send_flag::kFence) o |= IBV_SEND_FENCE;
  return o;
}

class IbvPd final : public Pd {
 public:
  explicit IbvPd(ibv_pd* pd) : pd_(pd) {}
  ~IbvPd() override { ibv_dealloc_pd(pd_); }
  uint32_t handle() const override { return pd_->handle; }
  ibv_pd* pd() const { return pd_; }

 private:
  ibv_pd* pd_;
};

class IbvMr final : public Mr {
 public:
  explicit IbvMr(ibv_mr* mr) : mr_(mr) {
    lkey_ = mr->lkey;
    rkey_ = mr->rkey;
    addr_ = mr->addr;
    length_ = mr->length;
  }
  ~IbvMr() override { ibv_dereg_mr(mr_); }

 private:
  ibv_mr* mr_;
};

class IbvCq final : public Cq {
 public:
  explicit IbvCq(ibv_cq* cq) : cq_(cq) {}
  ~IbvCq() override { ibv_destroy_cq(cq_); }
  ibv_cq* cq() const { return cq_; }
  uint32_t handle() const override { return cq_->handle; }
  uint32_t capacity() const override { return static_cast<uint32_t>(cq_->cqe); }

  int poll(WorkCompletion* out, int n) override {
    ibv_wc wc[kPollBatch];
    int total = 0;
    while (total < n) {
      const int want = std::min(n - total, kPollBatch);
      const int got = ibv_poll_cq(cq_, want, wc);
      if (got < 0) return total > 0 ? total : -EIO;
      for (int i = 0; i < got; ++i) {
        WorkCompletion& o = out[total + i];
        o.wr_id = wc[i].wr_id;
        o.status = static_cast<WcStatus>(wc[i].status);
        o.opcode = static_cast<WcOpcode>(wc[i].opcode);
        o.vendor_err = wc[i].vendor_err;
        o.byte_len = wc[i].byte_len;
        o.imm_data = wc[i].imm_data;
        o.qp_num = wc[i].qp_num;
        o.wc_flags = wc[i].wc_flags;
      }
      total += got;
      if (got < want) break;
    }
    return total;
  }

 private:
  ibv_cq* cq_;
};

class IbvSrq final : public Srq {
 public:
  explicit IbvSrq(ibv_srq* srq) : srq_(srq) {}
  ~IbvSrq() override { ibv_destroy_srq(srq_); }
  ibv_srq* srq() const { return srq_; }
  uint32_t handle() const override { return srq_->handle; }

  int post_recv(const RecvWr& wr, const RecvWr** bad_wr) override;

 private:
  ibv_srq* srq_;
};

// A chain of receive requests in chunks; post(chunk, &bad) is ibv_post_recv or its SRQ form.
template <typename Post>
int post_recv_chain(const RecvWr& first, const RecvWr** bad_wr, Post post) {
  const RecvWr* w = &first;
  while (w != nullptr) {
    ibv_recv_wr v[kChunk];
    const RecvWr* src[kChunk];
    int n = 0;
    for (; w != nullptr && n < kChunk; w = w->next, ++n) {
      v[n].wr_id = w->wr_id;
      v[n].next = nullptr;
      v[n].sg_list = sges(w->sg_list);
      v[n].num_sge = w->num_sge;
      if (n > 0) v[n - 1].next = &v[n];
      src[n] = w;
    }
    ibv_recv_wr* bad = nullptr;
    if (const int rc = post(v, &bad); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = bad != nullptr ? src[bad - v] : src[0];
      return -rc;
    }
  }
  return 0;
}

int IbvSrq::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  return post_recv_chain(wr, bad_wr, [this](ibv_recv_wr* v, ibv_recv_wr** bad) {
    return ibv_post_srq_recv(srq_, v, bad);
  });
}

class IbvQp final : public Qp {
 public:
  explicit IbvQp(ibv_qp* qp) : qp_(qp) {}
  ~IbvQp() override { ibv_destroy_qp(qp_); }
  ibv_qp* qp() const { return qp_; }
  uint32_t qp_num() const override { return qp_->qp_num; }

  int modify(const QpAttr& a, uint32_t mask) override {
    // The path to the peer is rdma_cm's (rdma_init_qp_attr), not a 64-bit port address.
    if ((mask & qp_attr::kAv) != 0 || (mask & ~qp_attr::kSupported) != 0) return -EINVAL;
    ibv_qp_attr o{};
    o.qp_state = static_cast<ibv_qp_state>(a.qp_state);
    o.cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
    o.path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    o.qp_access_flags = static_cast<int>(a.qp_access_flags);
    o.pkey_index = a.pkey_index;
    o.port_num = a.port_num;
    o.dest_qp_num = a.dest_qp_num;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    o.min_rnr_timer = a.min_rnr_timer;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    return -ibv_modify_qp(qp_, &o, static_cast<int>(mask));
  }

  int query(QpAttr* out) override {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    const int mask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                     IBV_QP_PORT | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                     IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                     IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                     IBV_QP_DEST_QPN;
    if (const int rc = ibv_query_qp(qp_, &a, mask, &init); rc != 0) return -rc;
    *out = QpAttr{};
    out->qp_state = static_cast<QpState>(a.qp_state);
    out->cur_qp_state = static_cast<QpState>(a.cur_qp_state);
    out->path_mtu = static_cast<Mtu>(a.path_mtu);
    out->qp_access_flags = static_cast<uint32_t>(a.qp_access_flags);
    out->pkey_index = a.pkey_index;
    out->port_num = a.port_num;
    out->dest_qp_num = a.dest_qp_num;
    out->rq_psn = a.rq_psn;
    out->sq_psn = a.sq_psn;
    out->timeout = a.timeout;
    out->retry_cnt = a.retry_cnt;
    out->rnr_retry = a.rnr_retry;
    out->min_rnr_timer = a.min_rnr_timer;
    out->max_rd_atomic = a.max_rd_atomic;
    out->max_dest_rd_atomic = a.max_dest_rd_atomic;
    return 0;
  }

  int post_send(const SendWr& first, const SendWr** bad_wr) override {
    const SendWr* w = &first;
    while (w != nullptr) {
      ibv_send_wr v[kChunk];
      const SendWr* src[kChunk];
      int n = 0;
      for (; w != nullptr && n < kChunk; w = w->next, ++n) {
        ibv_send_wr& o = v[n];
        o = ibv_send_wr{};
        o.wr_id = w->wr_id;
        o.sg_list = sges(w->sg_list);
        o.num_sge = w->num_sge;
        o.opcode = static_cast<ibv_wr_opcode>(w->opcode);
        o.send_flags = send_flags(w->send_flags);
        o.imm_data = w->imm_data;  // opaque: delivered to the peer as stored here
        o.wr.rdma.remote_addr = w->remote_addr;
        o.wr.rdma.rkey = w->rkey;
        if (n > 0) v[n - 1].next = &o;
        src[n] = w;
      }
      ibv_send_wr* bad = nullptr;
      if (const int rc = ibv_post_send(qp_, v, &bad); rc != 0) {
        if (bad_wr != nullptr) *bad_wr = bad != nullptr ? src[bad - v] : src[0];
        return -rc;
      }
    }
    return 0;
  }

  int post_recv(const RecvWr& wr, const RecvWr** bad_wr) override {
    return post_recv_chain(wr, bad_wr, [this](ibv_recv_wr* v, ibv_recv_wr** bad) {
      return ibv_post_recv(qp_, v, bad);
    });
  }

 private:
  ibv_qp* qp_;
};

class IbvContext final : public Context {
 public:
  IbvContext(ibv_context* ctx, ReleaseFn release, void* arg)
      : ctx_(ctx), release_(release), arg_(arg) {}
  ~IbvContext() override {
    if (release_ != nullptr) release_(arg_);
  }
  ibv_context* context() const { return ctx_; }

  std::string init() {
    ibv_device_attr d{};
    if (const int rc = ibv_query_device(ctx_, &d); rc != 0)
      return std::string("ibv_query_device: ") + std::strerror(rc);
    ibv_port_attr p{};
    if (const int rc = ibv_query_port(ctx_, kPort, &p); rc != 0)
      return std::string("ibv_query_port: ") + std::strerror(rc);
    attr_.max_qp = static_cast<uint32_t>(d.max_qp);
    attr_.max_cq = static_cast<uint32_t>(d.max_cq);
    attr_.max_srq = static_cast<uint32_t>(d.max_srq);
    attr_.max_pd = static_cast<uint32_t>(d.max_pd);
    attr_.max_mr = static_cast<uint32_t>(d.max_mr);
    attr_.max_qp_wr = static_cast<uint32_t>(d.max_qp_wr);
    attr_.max_cqe = static_cast<uint32_t>(d.max_cqe);
    attr_.max_sge = static_cast<uint32_t>(d.max_sge);
    attr_.max_msg_bytes = p.max_msg_sz;
    attr_.max_qp_rd_atom = static_cast<uint8_t>(std::min(d.max_qp_rd_atom, 255));
    attr_.max_qp_init_rd_atom = static_cast<uint8_t>(std::min(d.max_qp_init_rd_atom, 255));
    attr_.max_mtu = static_cast<Mtu>(p.active_mtu);
    attr_.port_address = 0;  // RoCE ports are addressed by GID, through rdma_cm
    // Asynchronous events are read without blocking (get_async_event).
    const int fl = fcntl(ctx_->async_fd, F_GETFL);
    if (fl < 0 || fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
      return std::string("async fd: ") + std::strerror(errno);
    return "";
  }

  const DeviceAttr& attr() const override { return attr_; }

  Result<std::unique_ptr<Pd>> alloc_pd() override {
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    if (pd == nullptr) return ibv_error(errno, "ibv_alloc_pd");
    return std::unique_ptr<Pd>(new IbvPd(pd));
  }

  Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, std::size_t length,
                                     uint32_t access) override {
    auto* p = dynamic_cast<IbvPd*>(&pd);
    if (p == nullptr) return make_error(EINVAL, "reg_mr: a PD of another provider");
    ibv_mr* mr = ibv_reg_mr(p->pd(), addr, length, static_cast<int>(access));
    if (mr == nullptr) return ibv_error(errno, "ibv_reg_mr");
    return std::unique_ptr<Mr>(new IbvMr(mr));
  }

  Result<std::unique_ptr<Cq>> create_cq(uint32_t min_entries) override {
    if (min_entries == 0 || min_entries > attr_.max_cqe)
      return make_error(EINVAL, "create_cq: " + std::to_string(min_entries) +
                                    " entries (the device allows 1 to " +
                                    std::to_string(attr_.max_cqe) + ")");
    ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(min_entries), nullptr, nullptr, 0);
    if (cq == nullptr) return ibv_error(errno, "ibv_create_cq");
    return std::unique_ptr<Cq>(new IbvCq(cq));
  }

  Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) override {
    auto* p = dynamic_cast<IbvPd*>(&pd);
    if (p == nullptr) return make_error(EINVAL, "create_srq: a PD of another provider");
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = max_sge;
    ibv_srq* srq = ibv_create_srq(p->pd(), &init);
    if (srq == nullptr) return ibv_error(errno, "ibv_create_srq");
    return std::unique_ptr<Srq>(new IbvSrq(srq));
  }

  Result<std::unique_ptr<Qp>> create_qp(Pd& pd, const QpInitAttr& init) override {
    auto* p = dynamic_cast<IbvPd*>(&pd);
    auto* scq = dynamic_cast<IbvCq*>(init.send_cq);
    auto* rcq = dynamic_cast<IbvCq*>(init.recv_cq);
    auto* srq = init.srq != nullptr ? dynamic_cast<IbvSrq*>(init.srq) : nullptr;
    if (p == nullptr || scq == nullptr || rcq == nullptr || (init.srq != nullptr && srq == nullptr))
      return make_error(EINVAL, "create_qp: a PD, CQ or SRQ missing or of another provider");
    ibv_qp_init_attr a{};
    a.send_cq = scq->cq();
    a.recv_cq = rcq->cq();
    a.srq = srq != nullptr ? srq->srq() : nullptr;
    a.cap.max_send_wr = init.cap.max_send_wr;
    a.cap.max_recv_wr = init.cap.max_recv_wr;
    a.cap.max_send_sge = init.cap.max_send_sge;
    a.cap.max_recv_sge = init.cap.max_recv_sge;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = init.sq_sig_all ? 1 : 0;
    ibv_qp* qp = ibv_create_qp(p->pd(), &a);
    if (qp == nullptr) return ibv_error(errno, "ibv_create_qp");
    return std::unique_ptr<Qp>(new IbvQp(qp));
  }

  bool get_async_event(AsyncEvent* out) override {
    ibv_async_event e{};
    if (ibv_get_async_event(ctx_, &e) != 0) return false;  // EAGAIN: none
    out->type = static_cast<EventType>(e.event_type);
    out->detail = 0;
    switch (e.event_type) {
      case IBV_EVENT_CQ_ERR:
        out->resource = e.element.cq->handle;
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        out->resource = e.element.qp->qp_num;
        break;
      case IBV_EVENT_SRQ_ERR:
      case IBV_EVENT_SRQ_LIMIT_REACHED:
        out->resource = e.element.srq->handle;
        break;
      default:
        out->resource = static_cast<uint32_t>(e.element.port_num);
        break;
    }
    if (e.event_type == IBV_EVENT_DEVICE_FATAL) removed_ = true;
    ibv_ack_async_event(&e);
    return true;
  }

  bool probe_removed() override {
    if (removed_) return true;
    ibv_device_attr d{};
    removed_ = ibv_query_device(ctx_, &d) != 0;
    return removed_;
  }

 private:
  static constexpr uint8_t kPort = 1;
  ibv_context* ctx_;
  ReleaseFn release_;
  void* arg_;
  DeviceAttr attr_;
  bool removed_ = false;
};

}  // namespace

std::vector<std::string> ibverbs_device_names() {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return names;
  for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
}

Result<std::unique_ptr<Context>> wrap_ibverbs(ibv_context* ctx, ReleaseFn release, void* arg) {
  auto c = std::make_unique<IbvContext>(ctx, release, arg);
  if (std::string e = c->init(); !e.empty())
    return make_error(EIO, std::string(ibv_get_device_name(ctx->device)) + ": " + e);
  return std::unique_ptr<Context>(std::move(c));
}

Result<std::unique_ptr<Context>> open_ibverbs(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return ibv_error(errno, "libibverbs device '" + name + "': no RDMA devices");
  ibv_context* ctx = nullptr;
  int err = ENODEV;
  for (int i = 0; i < n && ctx == nullptr; ++i) {
    if (name != ibv_get_device_name(list[i])) continue;
    ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) err = errno;
  }
  ibv_free_device_list(list);
  if (ctx == nullptr) {
    const auto names = ibverbs_device_names();
    std::string have;
    for (const auto& s : names) have += (have.empty() ? "" : ", ") + s;
    return make_error(
        err, "libibverbs device '" + name + "': " +
                 (err == ENODEV ? "not found (devices: " + (have.empty() ? "none" : have) + ")"
                                : std::string(std::strerror(err))));
  }
  return wrap_ibverbs(
      ctx, [](void* c) { ibv_close_device(static_cast<ibv_context*>(c)); }, ctx);
}

ibv_context* ibverbs_context(Context& ctx) {
  auto* c = dynamic_cast<IbvContext*>(&ctx);
  return c != nullptr ? c->context() : nullptr;
}

ibv_pd* ibverbs_pd(Pd& pd) {
  auto* p = dynamic_cast<IbvPd*>(&pd);
  return p != nullptr ? p->pd() : nullptr;
}

ibv_qp* ibverbs_qp(Qp& qp) {
  auto* q = dynamic_cast<IbvQp*>(&qp);
  return q != nullptr ? q->qp() : nullptr;
}

}  // namespace pollux::rdma
