#include "driver/nvme/pcie.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spec/pci.h"

namespace pollux::nvme {

namespace {

constexpr uint32_t kPage = 4096;  // ring alignment and the size of a request's list page

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

inline void store_doorbell(volatile uint32_t* db, uint32_t value) {
  // A release store: SQEs (or consumed CQEs) are visible before the device sees the doorbell.
  // On x86 this is a plain mov; the ordering is what the compiler must keep.
  __atomic_store_n(db, value, __ATOMIC_RELEASE);
}

}  // namespace

// ----------------------------------------------------------------------------- queue ---

PcieQueue::PcieQueue(env::PciDevice& device, env::MemoryRegistry& registry,
                     const QueueParams& params, uint32_t doorbell_stride)
    : device_(device),
      registry_(registry),
      params_(params),
      doorbell_stride_(doorbell_stride),
      use_sgl_(params.prefer_sgl && params.sgl_supported) {}

int PcieQueue::init_requests(uint32_t n) {
  const std::size_t sq_bytes = align_up(std::size_t{params_.entries} * 64, kPage);
  const std::size_t cq_bytes = align_up(std::size_t{params_.entries} * 16, kPage);
  auto mem = env::DmaRegion::create(registry_, sq_bytes + cq_bytes + std::size_t{n} * kPage);
  if (!mem) return -mem.error().code;
  memory_ = std::move(mem).value();
  auto* base = static_cast<uint8_t*>(memory_->data());
  std::memset(base, 0, sq_bytes + cq_bytes);
  sq_ = reinterpret_cast<sn::SubmissionEntry*>(base);
  cq_ = reinterpret_cast<sn::CompletionEntry*>(base + sq_bytes);
  lists_ = reinterpret_cast<uint64_t*>(base + sq_bytes + cq_bytes);
  sq_iova_ = memory_->iova();
  cq_iova_ = sq_iova_ + sq_bytes;
  lists_iova_ = cq_iova_ + cq_bytes;
  const uint32_t sq_db = sn::reg::sq_tail_doorbell(params_.qid, doorbell_stride_);
  const uint32_t cq_db = sn::reg::cq_head_doorbell(params_.qid, doorbell_stride_);
  sq_doorbell_ = static_cast<volatile uint32_t*>(device_.bar_map(0, sq_db, 4));
  cq_doorbell_ = static_cast<volatile uint32_t*>(device_.bar_map(0, cq_db, 4));
  return 0;
}

int PcieQueue::map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                        uint32_t len) {
  if (iovcnt <= 0) return -EINVAL;
  if (use_sgl_) return build_sgl(index, cmd, iov, iovcnt, len);
  return build_prp(index, cmd, iov, iovcnt, len);
}

// PRP: the first entry may start anywhere (dword aligned); every later page starts at a page
// boundary, so every iovec but the first must start page-aligned and all but the last must
// end page-aligned.
int PcieQueue::build_prp(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                         uint32_t len) {
  const uint32_t page = params_.page_size;
  cmd.set_psdt(sn::kPsdtPrp);
  if (iovcnt == 1) {  // the common case: one buffer, at most two pages, no list
    const uint64_t iova = registry_.translate(iov[0].iov_base, len, translations_);
    if (iova == env::kInvalidIova || (iova & 3) || len == 0) return -EINVAL;
    const uint64_t in_page = iova & (page - 1);
    if (in_page + len <= 2ull * page) {
      cmd.dptr.prp.prp1 = iova;
      cmd.dptr.prp.prp2 = in_page + len <= page ? 0 : iova - in_page + page;
      return 0;
    }
  }
  uint64_t* lst = list(index);
  uint64_t first = 0;
  uint32_t nlist = 0;
  uint64_t second = 0;
  uint32_t pages_seen = 0;
  uint64_t left = len;  // describe the transfer, not whatever the iovecs hold beyond it
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
    const std::size_t n = std::min<uint64_t>(iov[i].iov_len, left);
    left -= n;
    const uint64_t iova = registry_.translate(p, n, translations_);
    if (iova == env::kInvalidIova || n == 0) return -EINVAL;
    if (i > 0 && iova % page != 0) return -EINVAL;
    if (left > 0 && (iova + n) % page != 0) return -EINVAL;
    if (iova & 3) return -EINVAL;
    // Walk the pages of this element.
    uint64_t cur = iova;
    const uint64_t end = iova + n;
    while (cur < end) {
      if (pages_seen == 0) {
        first = cur;
      } else if (pages_seen == 1) {
        second = cur;
      } else {
        if (pages_seen == 2) lst[nlist++] = second;  // list starts with the 2nd page
        if (nlist >= kPage / 8) return -E2BIG;        // one list page: 512 entries
        lst[nlist++] = cur;
      }
      ++pages_seen;
      cur = (cur / page + 1) * page;
    }
  }
  cmd.dptr.prp.prp1 = first;
  cmd.dptr.prp.prp2 = pages_seen <= 1 ? 0 : (pages_seen == 2 ? second : list_iova(index));
  return 0;
}

// SGL: one Data Block descriptor in the SQE for one element, else a Last Segment descriptor
// pointing at a list of Data Block descriptors in the request's page.
int PcieQueue::build_sgl(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                         uint32_t len) {
  // Describe the transfer only: trailing iovec bytes beyond it are left out.
  uint64_t left = len;
  int used = 0;
  while (used < iovcnt && left > 0) left -= std::min<uint64_t>(iov[used++].iov_len, left);
  iovcnt = used;
  auto* descs = reinterpret_cast<sn::SglDescriptor*>(list(index));
  if (static_cast<uint32_t>(iovcnt) > kPage / sizeof(sn::SglDescriptor)) return -E2BIG;
  const uint8_t data_id =
      sn::SglDescriptor::make_id(sn::sgl::kTypeDataBlock, sn::sgl::kSubtypeAddress);
  cmd.set_psdt(sn::kPsdtSglMptrContiguous);
  left = len;
  for (int i = 0; i < iovcnt; ++i) {
    const uint64_t iova = registry_.translate(iov[i].iov_base, iov[i].iov_len, translations_);
    if (iova == env::kInvalidIova || iov[i].iov_len == 0 || iov[i].iov_len > UINT32_MAX)
      return -EINVAL;
    sn::SglDescriptor d{};
    d.address = iova;
    d.length = static_cast<uint32_t>(std::min<uint64_t>(iov[i].iov_len, left));
    left -= d.length;
    d.id = data_id;
    if (iovcnt == 1) {
      cmd.dptr.sgl1 = d;
      return 0;
    }
    descs[i] = d;
  }
  sn::SglDescriptor seg{};
  seg.address = list_iova(index);
  seg.length = static_cast<uint32_t>(iovcnt * sizeof(sn::SglDescriptor));
  seg.id = sn::SglDescriptor::make_id(sn::sgl::kTypeLastSegment, sn::sgl::kSubtypeAddress);
  cmd.dptr.sgl1 = seg;
  return 0;
}

void PcieQueue::flush(uint32_t tail) {
  if (sq_doorbell_) {
    store_doorbell(sq_doorbell_, tail);
  } else {
    device_.write32(0, sn::reg::sq_tail_doorbell(params_.qid, doorbell_stride_), tail);
  }
}

int PcieQueue::poll(sn::CompletionEntry* out, uint32_t max) {
  // Locals: the stores into out[] would otherwise make the compiler reload every member.
  uint32_t head = cq_head_, n = 0;
  uint16_t phase = phase_;
  const uint32_t entries = params_.entries;
  const sn::CompletionEntry* const cq = cq_;
  while (n < max) {
    const sn::CompletionEntry* slot = &cq[head];
    const uint16_t status = __atomic_load_n(&slot->status, __ATOMIC_ACQUIRE);
    if ((status & 1) != phase) break;
    out[n++] = *slot;
    if (++head == entries) {
      head = 0;
      phase ^= 1;
    }
  }
  cq_head_ = head;
  phase_ = phase;
  if (n) {  // the entries are copied: their slots are the device's again
    if (cq_doorbell_) {
      store_doorbell(cq_doorbell_, cq_head_);
    } else {
      device_.write32(0, sn::reg::cq_head_doorbell(params_.qid, doorbell_stride_), cq_head_);
    }
  }
  return static_cast<int>(n);
}

void PcieQueue::reset() {
  std::memset(static_cast<void*>(sq_), 0, std::size_t{params_.entries} * sizeof *sq_);
  std::memset(static_cast<void*>(cq_), 0, std::size_t{params_.entries} * sizeof *cq_);
  cq_head_ = 0;
  phase_ = 1;
}

// ------------------------------------------------------------------------- transport ---

PcieTransport::PcieTransport(std::unique_ptr<env::PciDevice> device, env::MemoryRegistry& registry)
    : device_(std::move(device)), registry_(registry) {
  follow_gone_flag(&device_->removed_flag());
}

int PcieTransport::prepare() {
  // Memory space and bus mastering on: without the latter a real function cannot DMA.
  // Interrupt Disable too: we poll and give the device no interrupt to signal.
  namespace pc = spec::pci::command;
  uint16_t command = 0;
  if (device_->config_read(spec::pci::kCommand, &command, 2) == 0) {
    command |= pc::kMemorySpace | pc::kBusMaster | pc::kInterruptDisable;
    device_->config_write(spec::pci::kCommand, &command, 2);
  }
  const uint64_t cap = read64(sn::reg::kCap);
  if (cap == ~0ull) return -ENODEV;
  doorbell_stride_ = static_cast<uint32_t>(sn::cap::dstrd(cap));
  return 0;
}

Result<std::unique_ptr<QueueTransport>> PcieTransport::create_queue(const QueueParams& params) {
  return std::unique_ptr<QueueTransport>(
      new PcieQueue(*device_, registry_, params, doorbell_stride_));
}

// AQA/ASQ/ACQ for the admin queue; the controller enables afterwards.
void PcieTransport::program_admin_queue(QueueTransport& admin) {
  auto& q = static_cast<PcieQueue&>(admin);
  write32(sn::reg::kAqa, sn::aqa::make(q.entries() - 1, q.entries() - 1));
  write64(sn::reg::kAsq, q.sq_iova());
  write64(sn::reg::kAcq, q.cq_iova());
}

// Create I/O CQ then SQ (same id, memory and size); a CQ whose SQ could not be created is
// deleted again.
std::string PcieTransport::start_io_queue(QueueTransport& queue, const AdminCommand& admin) {
  auto& q = static_cast<PcieQueue&>(queue);
  const uint16_t qid = q.qid();
  sn::SubmissionEntry cq{};
  cq.opcode = sn::admin::kCreateIoCq;
  cq.dptr.prp.prp1 = q.cq_iova();
  cq.cdw10 = (q.entries() - 1) << 16 | qid;
  cq.cdw11 = 1;  // physically contiguous, interrupts off: we poll
  if (auto r = admin(cq); !r) return "create I/O CQ " + std::to_string(qid) + ": " + r.error().message;
  sn::SubmissionEntry sq{};
  sq.opcode = sn::admin::kCreateIoSq;
  sq.dptr.prp.prp1 = q.sq_iova();
  sq.cdw10 = (q.entries() - 1) << 16 | qid;
  sq.cdw11 = uint32_t{qid} << 16 | 1;  // bound to CQ qid, physically contiguous
  if (auto r = admin(sq); !r) {
    sn::SubmissionEntry del{};
    del.opcode = sn::admin::kDeleteIoCq;
    del.cdw10 = qid;
    (void)admin(del);
    return "create I/O SQ " + std::to_string(qid) + ": " + r.error().message;
  }
  return "";
}

std::string PcieTransport::stop_io_queue(QueueTransport& queue, const AdminCommand& admin) {
  const uint16_t qid = static_cast<PcieQueue&>(queue).qid();
  std::string e;
  sn::SubmissionEntry del{};
  del.opcode = sn::admin::kDeleteIoSq;
  del.cdw10 = qid;
  if (auto r = admin(del); !r) e = "delete I/O SQ " + std::to_string(qid) + ": " + r.error().message;
  del.opcode = sn::admin::kDeleteIoCq;
  if (auto r = admin(del); !r && e.empty()) {
    e = "delete I/O CQ " + std::to_string(qid) + ": " + r.error().message;
  }
  return e;
}

// ------------------------------------------------------------------ without a controller ---

Result<std::unique_ptr<Qpair>> make_pcie_qpair(const PcieQueueContext& ctx, uint16_t qid,
                                               const QpairOptions& options) {
  if (ctx.device == nullptr || ctx.registry == nullptr || ctx.clock == nullptr) {
    return make_error(EINVAL, "pcie queue: device, registry and clock are required");
  }
  QueueParams p;
  p.qid = qid;
  p.entries = options.queue_size;
  p.page_size = ctx.page_size;
  p.prefer_sgl = options.prefer_sgl;
  p.sgl_supported = ctx.sgl_supported;
  auto queue = std::make_unique<PcieQueue>(*ctx.device, *ctx.registry, p, ctx.doorbell_stride);
  QpairContext qctx;
  qctx.gone = &ctx.device->removed_flag();
  qctx.clock = ctx.clock;
  qctx.max_transfer = ctx.max_transfer;
  return Qpair::create(qctx, std::move(queue), qid, options);
}

}  // namespace pollux::nvme
