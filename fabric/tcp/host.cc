#include "fabric/tcp/host.h"

#include <algorithm>
#include <cstring>

#include "driver/nvme/connect.h"
#include "fabric/tcp/queue.h"
#include "spec/nvme_fabrics.h"

namespace pollux::fabric::tcp {

namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;

Result<std::unique_ptr<TcpTransport>> TcpTransport::create(const nvme::TransportId& trid,
                                                           TcpOptions options) {
  if (trid.trtype != nvme::TransportType::kTcp) return make_error(EINVAL, "not a tcp transport ID");
  if (trid.traddr.empty())
    return make_error(EINVAL, "trtype:tcp needs traddr (the target's address)");
  if (trid.subnqn.empty())
    return make_error(EINVAL, "trtype:tcp needs subnqn (the subsystem's NQN)");
  if (trid.subnqn.size() > nf::kNqnMaxLength) {
    return make_error(EINVAL,
                      "subnqn: longer than " + std::to_string(nf::kNqnMaxLength) + " bytes");
  }
  Endpoint ep{trid.traddr, trid.trsvcid.empty() ? std::to_string(nt::kIoPort) : trid.trsvcid};
  options.header_digest |= trid.header_digest;
  options.data_digest |= trid.data_digest;
  return std::unique_ptr<TcpTransport>(new TcpTransport(std::move(ep), trid.subnqn, options));
}

namespace {
std::string address_of(const Endpoint& e, const std::string& subnqn) {
  return "tcp:" + e.traddr + ":" + e.trsvcid + "/" + subnqn;
}
}  // namespace

std::string TcpTransport::address() const {
  return address_of(paths_->active(), subnqn_);
}

std::string TcpTransport::add_path(const nvme::TransportId& trid) {
  if (trid.trtype != nvme::TransportType::kTcp) return "a path of a tcp controller must be tcp";
  if (trid.traddr.empty()) return "a path needs traddr";
  if (trid.subnqn != subnqn_)
    return "a path must lead to the same subsystem (" + subnqn_ + "), not '" + trid.subnqn + "'";
  return paths_->add(
      Endpoint{trid.traddr, trid.trsvcid.empty() ? std::to_string(nt::kIoPort) : trid.trsvcid});
}

nvme::Transport::PathInfo TcpTransport::paths() const {
  const Paths::Snapshot s = paths_->snapshot();
  PathInfo info;
  for (const Endpoint& e : s.all) info.addresses.push_back(address_of(e, subnqn_));
  info.active = s.active;
  info.failovers = s.failovers;
  return info;
}

void TcpTransport::identified(const sn::IdentifyController& id) {
  nf::IdentifyControllerFabrics f;
  static_assert(sizeof f == sizeof id.nvmeof);
  std::memcpy(&f, id.nvmeof, sizeof f);
  // IOCCSZ counts 16-byte units of the whole capsule, SQE included; ICDOFF is 0 on TCP.
  const uint64_t capsule = uint64_t{f.ioccsz} * nf::kCapsuleSizeUnit;
  io_in_capsule_ = capsule > sizeof(sn::SubmissionEntry)
                       ? static_cast<uint32_t>(
                             std::min<uint64_t>(capsule - sizeof(sn::SubmissionEntry), UINT32_MAX))
                       : 0;
}

Result<std::unique_ptr<nvme::QueueTransport>> TcpTransport::create_queue(
    const nvme::QueueParams& p) {
  // The admin queue takes 8 KiB in its capsules (Connect's 1024 bytes fit); an I/O queue
  // what Identify Controller says.
  const uint32_t in_capsule = p.qid == 0 ? nt::kAdminInCapsuleDataSize : io_in_capsule_;
  auto q = std::make_unique<TcpQueue>(paths_, p, options_, in_capsule);
  if (!p.connect) {
    q->mark_broken();  // no connection yet: the controller's reset() opens it
    return std::unique_ptr<nvme::QueueTransport>(std::move(q));
  }
  const Endpoint tried = paths_->active();
  if (std::string e = q->open(); !e.empty()) {
    // An I/O queue that cannot connect: the reset that will connect it tries the next path
    // first (chaos seeds 7861628, 7400099: it went back to a partitioned path and spent its
    // connect timeout there). The admin queue's open already tries every path.
    if (p.qid != 0) paths_->fail_over_from(tried);
    return make_error(ECONNREFUSED, e);
  }
  return std::unique_ptr<nvme::QueueTransport>(std::move(q));
}

void register_tcp_transport() {
  nvme::register_transport(nvme::TransportType::kTcp,
                           [](const nvme::TransportId& trid,
                              env::MemoryRegistry&) -> Result<std::unique_ptr<nvme::Transport>> {
                             auto t = TcpTransport::create(trid);
                             if (!t) return t.error();
                             return std::unique_ptr<nvme::Transport>(std::move(t).value());
                           });
}

namespace {
// Linking the host transport in makes trtype:tcp work in nvme::connect.
const bool registered = (register_tcp_transport(), true);
}  // namespace

}  // namespace pollux::fabric::tcp
