// The Pollux RNIC provider: device bring-up, the command mailbox, PDs and MRs, object creation.
#include "driver/rdma/rnic_provider.h"

#include <chrono>
#include <cstring>

#include "driver/rdma/rnic_internal.h"
#include "spec/pci.h"

namespace pollux::rdma {

namespace rnic {

namespace {

int errno_of(sr::CmdStatus s) {
  switch (s) {
    case sr::CmdStatus::kOk:
      return 0;
    case sr::CmdStatus::kBadOpcode:
      return -EOPNOTSUPP;
    case sr::CmdStatus::kBadParam:
    case sr::CmdStatus::kBadResource:
    case sr::CmdStatus::kBadState:
      return -EINVAL;
    case sr::CmdStatus::kNoResources:
      return -ENOMEM;
    case sr::CmdStatus::kBusy:
      return -EBUSY;
    case sr::CmdStatus::kDmaError:
      return -EFAULT;
    case sr::CmdStatus::kNotEnabled:
      return -ENODEV;
  }
  return -EIO;
}

uint32_t log2_at_least(uint32_t n) {
  uint32_t log = 1;
  while ((1u << log) < n && log < 31) ++log;
  return log;
}

class RnicPd final : public Pd {
 public:
  RnicPd(RnicContext& ctx, uint32_t pdn) : ctx_(ctx), gen_(ctx.generation()), pdn_(pdn) {}
  ~RnicPd() override {
    if (gen_ != ctx_.generation()) return;  // the device was reset: nothing of it is left
    const sr::HandleIn in{pdn_};
    ctx_.command(sr::CmdOpcode::kDeallocPd, &in, sizeof in, nullptr, 0);
  }
  uint32_t handle() const override { return pdn_; }
  uint32_t generation() const { return gen_; }

 private:
  RnicContext& ctx_;
  uint32_t gen_;
  uint32_t pdn_;
};

class RnicMr final : public Mr {
 public:
  RnicMr(RnicContext& ctx, uint32_t lkey, uint32_t rkey, void* addr, std::size_t length)
      : ctx_(ctx), gen_(ctx.generation()) {
    lkey_ = lkey;
    rkey_ = rkey;
    addr_ = addr;
    length_ = length;
  }
  ~RnicMr() override {
    if (gen_ != ctx_.generation()) return;
    const sr::HandleIn in{lkey_};
    ctx_.command(sr::CmdOpcode::kDeregMr, &in, sizeof in, nullptr, 0);
  }

 private:
  RnicContext& ctx_;
  uint32_t gen_;
};

// Objects of an older generation than the context's are dead (the device was reset since).
template <typename T>
bool stale(const RnicContext& ctx, const T& object) {
  return object.generation() != ctx.generation();
}

}  // namespace

RnicContext::RnicContext(std::unique_ptr<env::PciDevice> pci, env::MemoryRegistry& registry,
                         RnicOptions options)
    : pci_(std::move(pci)),
      removed_(&pci_->removed_flag()),
      registry_(registry),
      options_(options) {}

RnicContext::~RnicContext() {
  if (pci_ != nullptr) pci_->write32(0, sr::reg::kControl, 0);  // the NIC forgets everything
}

template <typename T>
int RnicContext::alloc_ring(Ring<T>& ring, uint32_t log) {
  env::DmaOptions o;
  o.allow_hugepages = false;  // small rings: 4 KiB pages
  auto mem = env::DmaRegion::create(registry_, sizeof(T) << log, o);
  if (!mem.ok()) return mem.error().code;
  ring.mem = std::move(mem).value();
  ring.log = log;
  std::memset(ring.mem->data(), 0, ring.mem->size());
  return 0;
}

int RnicContext::init() {
  uint16_t ids[2] = {0, 0};
  if (pci_->config_read(0, ids, sizeof ids) != 0 || ids[0] != sr::kPciVendorId ||
      ids[1] != sr::kPciDeviceId) {
    why_ = "not a Pollux RNIC (PCI ids)";
    return -ENODEV;
  }
  if (int rc = enable_function(); rc != 0) return rc;
  doorbells_ = static_cast<volatile uint8_t*>(
      pci_->bar_map(0, sr::reg::kDoorbellBase, sr::reg::kDoorbellSize));
  if (doorbells_ == nullptr) {
    why_ = "the doorbell page cannot be mapped";
    return -ENXIO;
  }
  // Optional: without it (or where the window cannot be mapped) every WQE is read from the ring.
  if (options_.push_wqes) {
    push_ = static_cast<volatile uint8_t*>(
        pci_->bar_map(0, sr::reg::kPushBase, sr::reg::kPushSize));
  }
  auto mb = env::DmaRegion::create(registry_, 4096, env::DmaOptions{false});
  if (!mb.ok()) {
    why_ = "mailbox: " + mb.error().message;
    return mb.error().code;
  }
  mailbox_ = std::move(mb).value();
  // One event queue with room for an event per resource and then some.
  if (int rc = alloc_ring(eq_, 10); rc != 0) {
    why_ = "event queue memory";
    return rc;
  }
  return start();
}

int RnicContext::enable_function() {
  uint16_t cmd = 0;
  pci_->config_read(spec::pci::kCommand, &cmd, sizeof cmd);
  cmd |= spec::pci::command::kMemorySpace | spec::pci::command::kBusMaster |
         spec::pci::command::kInterruptDisable;
  if (pci_->config_write(spec::pci::kCommand, &cmd, sizeof cmd) != 0) {
    why_ = "cannot enable the PCI function";
    return -EIO;
  }
  if (pci_->read32(0, sr::reg::kId) != sr::reg::kIdValue) {
    why_ = "BAR0 does not identify a Pollux RNIC";
    return -ENODEV;
  }
  return 0;
}

// Also after a reset of the NIC (recover()): a function-level reset clears the command
// register too.
int RnicContext::start() {
  if (int rc = enable_function(); rc != 0) return rc;
  pci_->write32(0, sr::reg::kControl, 0);  // start from a clean device
  pci_->write64(0, sr::reg::kCmdAddr, mailbox_->iova());
  pci_->write32(0, sr::reg::kControl, sr::control::kEnable);
  if (!(pci_->read32(0, sr::reg::kStatus) & sr::status::kReady)) {
    why_ = "the NIC did not become ready";
    return -EIO;
  }
  sr::QueryDeviceOut q{};
  if (int rc = command(sr::CmdOpcode::kQueryDevice, nullptr, 0, &q, sizeof q); rc != 0) {
    why_ = "QUERY_DEVICE failed";
    return rc;
  }
  attr_.max_qp = q.max_qp;
  attr_.max_cq = q.max_cq;
  attr_.max_srq = q.max_srq;
  attr_.max_pd = q.max_pd;
  attr_.max_mr = q.max_mr;
  attr_.max_qp_wr = q.max_queue_entries;
  attr_.max_cqe = q.max_queue_entries;
  attr_.max_sge = q.max_sge;
  attr_.max_msg_bytes = q.max_msg_bytes;
  attr_.max_qp_init_rd_atom = q.max_qp_rd_atomic;
  attr_.max_qp_rd_atom = q.max_qp_dest_rd_atomic;
  attr_.max_mtu = static_cast<Mtu>(q.max_mtu);
  attr_.port_address = q.port_address;
  std::memset(eq_.mem->data(), 0, eq_.mem->size());
  eq_consumed_ = 0;
  const sr::CreateEqIn eq{eq_.iova(), eq_.log};
  if (int rc = command(sr::CmdOpcode::kCreateEq, &eq, sizeof eq, nullptr, 0); rc != 0) {
    why_ = "CREATE_EQ failed";
    return rc;
  }
  return 0;
}

int RnicContext::command(sr::CmdOpcode op, const void* in, std::size_t in_len, void* out,
                         std::size_t out_len) {
  std::lock_guard lock(command_mu_);
  if (removed()) return -ENODEV;
  if (fatal_.load(std::memory_order_acquire)) return -EIO;
  // A NIC that was reset has forgotten the mailbox: asking it would only time out.
  if (!(pci_->read32(0, sr::reg::kStatus) & sr::status::kReady)) {
    if (removed()) return -ENODEV;
    mark_fatal();
    return -EIO;
  }
  auto* m = static_cast<sr::CommandMailbox*>(mailbox_->data());
  std::memset(m, 0, sizeof *m);
  m->opcode = static_cast<uint8_t>(op);
  if (in_len > 0) std::memcpy(m->in, in, std::min(in_len, sizeof m->in));
  __atomic_store_n(&m->owner, sr::kOwnerDevice, __ATOMIC_RELEASE);
  if (int rc = pci_->write32(0, sr::reg::kCmdDoorbell, 1); rc != 0) return rc;
  // The emulated NIC answers within the doorbell write; hardware may take a while.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (__atomic_load_n(&m->owner, __ATOMIC_ACQUIRE) != sr::kOwnerHost) {
    if (std::chrono::steady_clock::now() > deadline)
      return pci_->probe_removed() ? -ENODEV : -ETIMEDOUT;
  }
  last_syndrome_ = m->syndrome;
  const int rc = errno_of(static_cast<sr::CmdStatus>(m->status));
  if (rc == 0 && out_len > 0) std::memcpy(out, m->out, std::min(out_len, sizeof m->out));
  return rc;
}

bool RnicContext::probe_fatal() {
  if (fatal_.load(std::memory_order_acquire)) return true;
  // A removed device is gone, not failed (and its reads say nothing).
  if (removed() || (pci_->read32(0, sr::reg::kStatus) & sr::status::kReady)) return false;
  mark_fatal();
  return true;
}

int RnicContext::recover() {
  std::lock_guard lock(recover_mu_);  // two users of the device may find it failed at once
  if (removed()) return -ENODEV;
  if (!probe_fatal()) return 0;
  // Every object made so far is dead: its destructor must not touch the tables or the device.
  qps.fill(nullptr);
  srqs.fill(nullptr);
  cqs.fill(nullptr);
  gen_.fetch_add(1, std::memory_order_acq_rel);
  fatal_.store(false, std::memory_order_release);
  if (const int rc = start(); rc != 0) {
    mark_fatal();
    return rc;
  }
  return 0;
}

Result<std::unique_ptr<Pd>> RnicContext::alloc_pd() {
  sr::HandleOut o{};
  if (int rc = command(sr::CmdOpcode::kAllocPd, nullptr, 0, &o, sizeof o); rc != 0)
    return make_error(rc, "ALLOC_PD failed");
  return std::unique_ptr<Pd>(new RnicPd(*this, o.handle));
}

Result<std::unique_ptr<Mr>> RnicContext::reg_mr(Pd& pd, void* addr, std::size_t length,
                                                uint32_t access) {
  if (addr == nullptr || length == 0) return make_error(-EINVAL, "empty memory region");
  if (stale(*this, static_cast<const RnicPd&>(pd)))
    return make_error(-EIO, "the PD is older than the device's last reset");
  const uint64_t iova = registry_.translate(addr, length);
  if (iova == env::kInvalidIova)
    return make_error(-EFAULT, "the range is not inside one DMA-able region of the registry");
  const sr::RegMrIn in{pd.handle(), access, reinterpret_cast<uintptr_t>(addr), length, iova};
  sr::RegMrOut o{};
  if (int rc = command(sr::CmdOpcode::kRegMr, &in, sizeof in, &o, sizeof o); rc != 0)
    return make_error(rc, "REG_MR refused (access flags, length or PD)");
  return std::unique_ptr<Mr>(new RnicMr(*this, o.lkey, o.rkey, addr, length));
}

Result<std::unique_ptr<Cq>> RnicContext::create_cq(uint32_t min_entries) {
  if (min_entries == 0 || min_entries > attr_.max_cqe)
    return make_error(-EINVAL, "CQ size out of range");
  Ring<sr::Cqe> ring;
  if (int rc = alloc_ring(ring, log2_at_least(min_entries)); rc != 0)
    return make_error(rc, "CQ memory");
  const sr::CreateCqIn in{ring.iova(), ring.log};
  sr::HandleOut o{};
  if (int rc = command(sr::CmdOpcode::kCreateCq, &in, sizeof in, &o, sizeof o); rc != 0)
    return make_error(rc, "CREATE_CQ failed");
  auto* cq = new RnicCq(*this, o.handle, std::move(ring));
  cqs[o.handle] = cq;
  return std::unique_ptr<Cq>(cq);
}

Result<std::unique_ptr<Srq>> RnicContext::create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) {
  if (max_wr == 0 || max_wr > attr_.max_qp_wr || max_sge == 0 || max_sge > attr_.max_sge)
    return make_error(-EINVAL, "SRQ size out of range");
  if (stale(*this, static_cast<const RnicPd&>(pd)))
    return make_error(-EIO, "the PD is older than the device's last reset");
  Ring<sr::RecvWqe> ring;
  if (int rc = alloc_ring(ring, log2_at_least(max_wr)); rc != 0)
    return make_error(rc, "SRQ memory");
  const sr::CreateSrqIn in{ring.iova(), ring.log, pd.handle()};
  sr::HandleOut o{};
  if (int rc = command(sr::CmdOpcode::kCreateSrq, &in, sizeof in, &o, sizeof o); rc != 0)
    return make_error(rc, "CREATE_SRQ failed");
  auto* srq = new RnicSrq(*this, o.handle, std::move(ring), max_sge);
  srqs[o.handle] = srq;
  return std::unique_ptr<Srq>(srq);
}

Result<std::unique_ptr<Qp>> RnicContext::create_qp(Pd& pd, const QpInitAttr& init) {
  const QpCap& c = init.cap;
  if (init.send_cq == nullptr || init.recv_cq == nullptr)
    return make_error(-EINVAL, "a QP needs CQs");
  if (stale(*this, static_cast<const RnicPd&>(pd)) ||
      stale(*this, static_cast<const RnicCq&>(*init.send_cq)) ||
      stale(*this, static_cast<const RnicCq&>(*init.recv_cq)) ||
      (init.srq != nullptr && stale(*this, static_cast<const RnicSrq&>(*init.srq))))
    return make_error(-EIO, "a PD, CQ or SRQ older than the device's last reset");
  if (c.max_send_wr == 0 || c.max_send_wr > attr_.max_qp_wr || c.max_send_sge > attr_.max_sge ||
      c.max_recv_sge > attr_.max_sge || c.max_recv_wr > attr_.max_qp_wr ||
      (init.srq == nullptr && c.max_recv_wr == 0))
    return make_error(-EINVAL, "QP capabilities out of range");
  Ring<sr::SendWqe> sq;
  Ring<sr::RecvWqe> rq;
  if (int rc = alloc_ring(sq, log2_at_least(c.max_send_wr)); rc != 0)
    return make_error(rc, "SQ memory");
  if (init.srq == nullptr) {
    if (int rc = alloc_ring(rq, log2_at_least(c.max_recv_wr)); rc != 0)
      return make_error(rc, "RQ memory");
  }
  sr::CreateQpIn in{};
  in.sq_iova = sq.iova();
  in.rq_iova = init.srq == nullptr ? rq.iova() : 0;
  in.pdn = pd.handle();
  in.send_cqn = init.send_cq->handle();
  in.recv_cqn = init.recv_cq->handle();
  in.srqn = init.srq == nullptr ? sr::kNone : init.srq->handle();
  in.log_sq_size = static_cast<uint8_t>(sq.log);
  in.log_rq_size = static_cast<uint8_t>(rq.log);
  sr::HandleOut o{};
  if (int rc = command(sr::CmdOpcode::kCreateQp, &in, sizeof in, &o, sizeof o); rc != 0)
    return make_error(rc, "CREATE_QP failed");
  auto* qp = new RnicQp(*this, o.handle, init, std::move(sq), std::move(rq));
  qps[o.handle] = qp;
  return std::unique_ptr<Qp>(qp);
}

bool RnicContext::get_async_event(AsyncEvent* event) {
  const sr::EventEntry* e = eq_.at(eq_consumed_);
  if (__atomic_load_n(&e->owner, __ATOMIC_ACQUIRE) != sr::phase_for(eq_consumed_, eq_.log))
    return false;
  event->type = static_cast<EventType>(e->type);
  event->resource = e->resource;
  event->detail = e->detail;
  ++eq_consumed_;
  return true;
}

}  // namespace rnic

Result<std::unique_ptr<Context>> open_rnic(std::unique_ptr<env::PciDevice> pci,
                                           env::MemoryRegistry& registry, RnicOptions options) {
  if (pci == nullptr) return make_error(-EINVAL, "no device");
  auto ctx = std::make_unique<rnic::RnicContext>(std::move(pci), registry, options);
  if (int rc = ctx->init(); rc != 0) return make_error(rc, ctx->why());
  return std::unique_ptr<Context>(std::move(ctx));
}

}  // namespace pollux::rdma
