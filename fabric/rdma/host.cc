#include "fabric/rdma/host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "driver/nvme/connect.h"
#include "fabric/rdma/device.h"
#include "fabric/rdma/queue.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma {

namespace nf = spec::nvmf;
namespace nr = spec::nvme_rdma;

Result<std::unique_ptr<RdmaTransport>> RdmaTransport::create(const nvme::TransportId& trid,
                                                             RdmaHostOptions options) {
  if (trid.trtype != nvme::TransportType::kRdma)
    return make_error(EINVAL, "not an rdma transport ID");
  if (options.context == nullptr)
    return make_error(ENODEV, "trtype:rdma needs an RDMA device (RdmaHostOptions::context)");
  if (options.registry == nullptr)
    return make_error(EINVAL, "trtype:rdma needs the registry of the data buffers' memory");
  if (trid.traddr.empty())
    return make_error(EINVAL, "trtype:rdma needs traddr (the target's CM address)");
  if (trid.subnqn.empty())
    return make_error(EINVAL, "trtype:rdma needs subnqn (the subsystem's NQN)");
  if (trid.subnqn.size() > nf::kNqnMaxLength)
    return make_error(EINVAL, "subnqn: longer than " + std::to_string(nf::kNqnMaxLength));
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->traddr = trid.traddr;
  shared->trsvcid = trid.trsvcid.empty() ? std::to_string(nr::kIoPort) : trid.trsvcid;
  auto pd = options.context->alloc_pd();
  if (!pd) return make_error(pd.error().code, "RDMA PD: " + pd.error().message);
  shared->pd = std::move(pd).value();
  auto cm = connection_manager_for(*options.context, options.cm_network, options.qp);
  if (!cm) return make_error(cm.error().code, "RDMA CM: " + cm.error().message);
  shared->cm = std::move(cm).value();
  shared->pd_generation = options.context->generation();
  if (std::string e = options.registry->add_listener(shared.get()); !e.empty())
    return make_error(EIO, "RDMA host: " + e);
  shared->listening = true;
  return std::unique_ptr<RdmaTransport>(new RdmaTransport(std::move(shared), trid.subnqn));
}

std::string RdmaTransport::Shared::ensure_device() {
  std::lock_guard<std::mutex> lock(device_mu);
  verbs::Context& ctx = *options.context;
  if (ctx.probe_fatal()) {
    if (const int rc = ctx.recover(); rc != 0)
      return "the RDMA device failed and did not come back (" + std::to_string(rc) + ")";
  }
  if (pd_generation == ctx.generation()) return "";
  pd.reset();  // dead with the device's reset: its destruction sends nothing
  auto p = ctx.alloc_pd();
  if (!p) return "RDMA PD after a device reset: " + p.error().message;
  pd = std::move(p).value();
  pd_generation = ctx.generation();
  return "";
}

RdmaTransport::Shared::~Shared() {
  if (listening) options.registry->remove_listener(this);
}

RdmaTransport::~RdmaTransport() = default;

std::string RdmaTransport::address() const {
  return "rdma:" + shared_->traddr + ":" + shared_->trsvcid + "/" + subnqn_;
}

void RdmaTransport::identified(const sn::IdentifyController& id) {
  nf::IdentifyControllerFabrics f;
  static_assert(sizeof f == sizeof id.nvmeof);
  std::memcpy(&f, id.nvmeof, sizeof f);
  // IOCCSZ counts 16-byte units of the whole capsule, SQE included; in-capsule data starts at
  // ICDOFF (only 0 is used here: data right after the SQE).
  const uint64_t capsule = uint64_t{f.ioccsz} * nf::kCapsuleSizeUnit;
  io_msdbd_ =
      f.msdbd == 0 ? RdmaQueue::kMaxKeyed : std::min<uint32_t>(f.msdbd, RdmaQueue::kMaxKeyed);
  io_in_capsule_ = f.icdoff == 0 && capsule > sizeof(sn::SubmissionEntry)
                       ? static_cast<uint32_t>(
                             std::min<uint64_t>(capsule - sizeof(sn::SubmissionEntry), 128 * 1024))
                       : 0;
}

Result<std::unique_ptr<nvme::QueueTransport>> RdmaTransport::create_queue(
    const nvme::QueueParams& p) {
  // The admin queue sends its data by keyed SGL (Connect's 1024 bytes too); I/O queues carry
  // writes up to IOCCSZ in the capsule.
  auto q = std::make_unique<RdmaQueue>(shared_, p, p.qid == 0 ? 0 : io_in_capsule_,
                                       p.qid == 0 ? 1 : io_msdbd_);
  // Without its connection: the controller connects it (reset, or its owner's polls).
  if (!p.connect) return std::unique_ptr<nvme::QueueTransport>(std::move(q));
  if (std::string e = q->open(); !e.empty()) return make_error(ECONNREFUSED, e);
  return std::unique_ptr<nvme::QueueTransport>(std::move(q));
}

namespace {
std::mutex default_mu;
RdmaHostOptions default_options;  // guarded by default_mu
}  // namespace

void set_default_rdma_host(const RdmaHostOptions& options) {
  std::lock_guard<std::mutex> lock(default_mu);
  default_options = options;
}

void register_rdma_transport() {
  nvme::register_transport(
      nvme::TransportType::kRdma,
      [](const nvme::TransportId& trid,
         env::MemoryRegistry& registry) -> Result<std::unique_ptr<nvme::Transport>> {
        RdmaHostOptions o;
        {
          std::lock_guard<std::mutex> lock(default_mu);
          o = default_options;
        }
        if (o.context == nullptr) {
          // A program that sets no device (pollux-perf) names one in the environment.
          // Unset: the machine's first libibverbs device, if it has one.
          const char* env = std::getenv("POLLUX_RDMA_DEVICE");
          const std::string dev = env != nullptr && *env != '\0' ? env : "ibverbs:";
          std::lock_guard<std::mutex> lock(default_mu);
          if (default_options.context == nullptr) {
            auto ctx = open_rdma_device(dev, registry);
            if (!ctx && env == nullptr)
              return make_error(ctx.error().code,
                                "trtype:rdma: no RDMA device (" + ctx.error().message +
                                    "); set POLLUX_RDMA_DEVICE, e.g. ibverbs:rxe0 or "
                                    "vfio-user:/tmp/rnic/rnic1.sock");
            if (!ctx) return ctx.error();
            // Kept for the process's life: controllers may outlive any one connect.
            default_options.context = ctx.value().release();
            default_options.registry = &registry;
          }
          o = default_options;
        }
        if (o.registry == nullptr) o.registry = &registry;
        auto t = RdmaTransport::create(trid, o);
        if (!t) return t.error();
        return std::unique_ptr<nvme::Transport>(std::move(t).value());
      });
}

namespace {
const bool registered = (register_rdma_transport(), true);
}  // namespace

}  // namespace pollux::fabric::rdma
