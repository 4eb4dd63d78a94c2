#include "scenarios/sim/rdma_fabric.h"

#include <algorithm>
#include <vector>

#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/metrics.h"

namespace pollux::sim {

namespace sr = spec::rnic;

const char* to_string(RdmaSide s) {
  return s == RdmaSide::kTarget ? "target" : "host";
}

namespace {
// Guaranteed copy elision: a Cluster (not movable) built either way in place.
emu::rnic::Cluster make_cluster(const RdmaFabricOptions& o) {
  const uint64_t seed = o.seed ^ 0x7d3a11ce5eedull;
  if (o.nic_profile != nullptr) return emu::rnic::Cluster(seed, *o.nic_profile);
  return emu::rnic::Cluster(seed, {}, o.latency_ns);
}
}  // namespace

RdmaFabric::RdmaFabric(const env::Clock& clock, const RdmaFabricOptions& o)
    : clock_(clock), o_(o), cluster_(make_cluster(o)) {}

std::unique_ptr<RdmaFabric> RdmaFabric::create(const env::Clock& clock,
                                               env::MemoryRegistry& registry,
                                               const RdmaFabricOptions& options,
                                               std::string* error) {
  std::unique_ptr<RdmaFabric> f(new RdmaFabric(clock, options));
  f->apply(clock.now());
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost}) {
    emu::rnic::RnicDevice* d = f->cluster_.add_nic();
    if (d == nullptr) {
      *error = std::string("RDMA: the ") + to_string(s) + "'s NIC could not be created";
      return nullptr;
    }
    f->devices_[index(s)] = d;
    auto pci = env::VfioUserDevice::attach(d->connect(), registry);
    if (!pci) {
      *error = std::string("RDMA: ") + to_string(s) + "'s NIC: " + pci.error().message;
      return nullptr;
    }
    auto ctx = rdma::open_rnic(std::move(pci).value(), registry, {options.push_wqes});
    if (!ctx) {
      *error = std::string("RDMA: ") + to_string(s) + "'s NIC: " + ctx.error().message;
      return nullptr;
    }
    f->contexts_[index(s)] = std::move(ctx).value();
  }
  return f;
}

// The contexts go first (they disable their NICs), then the cluster and its devices.
RdmaFabric::~RdmaFabric() {
  for (auto& c : contexts_) c.reset();
}

void RdmaFabric::apply(uint64_t now) {
  emu::rnic::WireFaults f;
  f.loss = o_.loss;
  if (now < loss_until_) f.loss = std::max(f.loss, loss_rate_);
  if (now < corrupt_until_) f.corrupt = corrupt_rate_;
  cluster_.wire().set_faults(f);
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost}) {
    const bool down = now < down_until_[index(s)];
    if (down == down_[index(s)] || devices_[index(s)] == nullptr) continue;
    down_[index(s)] = down;
    cluster_.wire().set_link_up(port(s), !down);
  }
}

bool RdmaFabric::step() {
  const uint64_t now = clock_.now();
  apply(now);
  return cluster_.step_at(now);
}

uint64_t RdmaFabric::next_event_ns() const {
  uint64_t next = cluster_.next_event_ns();
  const uint64_t now = clock_.now();
  for (uint64_t t : {down_until_[0], down_until_[1], loss_until_, corrupt_until_})
    if (t > now) next = std::min(next, t);
  return next;
}

void RdmaFabric::link_down(RdmaSide s, uint64_t duration_ns) {
  const uint64_t now = clock_.now();
  down_until_[index(s)] = std::max(down_until_[index(s)], now + duration_ns);
  ++link_flaps_;
  apply(now);
}

void RdmaFabric::partition(uint64_t duration_ns) {
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost}) link_down(s, duration_ns);
}

void RdmaFabric::loss(double rate, uint64_t duration_ns) {
  loss_rate_ = rate;
  loss_until_ = clock_.now() + duration_ns;
  apply(clock_.now());
}

void RdmaFabric::corrupt(double rate, uint64_t duration_ns) {
  corrupt_rate_ = rate;
  corrupt_until_ = clock_.now() + duration_ns;
  apply(clock_.now());
}

uint32_t RdmaFabric::fail_qp(RdmaSide s, uint64_t n) {
  std::vector<uint32_t> connected;
  nic(s).for_each_qp([&](uint32_t qpn, sr::QpState st, const emu::rnic::QpCounters&) {
    if (st == sr::QpState::kRtr || st == sr::QpState::kRts) connected.push_back(qpn);
  });
  if (connected.empty()) return 0;
  const uint32_t qpn = connected[n % connected.size()];
  return devices_[index(s)]->nic().force_qp_error(qpn) ? qpn : 0;
}

void RdmaFabric::reset_nic(RdmaSide s) {
  devices_[index(s)]->on_reset();
}

void RdmaFabric::collect_metrics(metrics::Builder& b) const {
  std::vector<prometheus::MetricFamily> families;
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost})
    emu::rnic::append_nic_metrics({&nic(s), to_string(s), port(s), cluster_.wire().link_up(port(s))},
                                  families);
  emu::rnic::append_wire_metrics(cluster_.wire().stats(), families);
  for (const prometheus::MetricFamily& f : families) b.family(f);
  b.counter("pollux_rnic_link_flaps_total", "Links taken down by a fault", {},
            static_cast<double>(link_flaps_));
}

}  // namespace pollux::sim
