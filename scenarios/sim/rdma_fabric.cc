#include "scenarios/sim/rdma_fabric.h"

#include <algorithm>
#include <vector>

#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"

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
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost}) {
    const emu::rnic::Rnic& r = nic(s);
    const emu::rnic::RnicCounters& c = r.counters();
    const metrics::Labels l = {{"nic", to_string(s)}, {"port", std::to_string(port(s))}};
    b.counter("pollux_rnic_tx_packets_total", "RoCEv2 packets the NIC sent", l, n(c.tx_packets));
    b.counter("pollux_rnic_rx_packets_total", "RoCEv2 packets the NIC received", l,
              n(c.rx_packets));
    b.counter("pollux_rnic_tx_bytes_total", "Bytes the NIC sent (BTH to ICRC)", l, n(c.tx_bytes));
    b.counter("pollux_rnic_rx_bytes_total", "Bytes the NIC received (BTH to ICRC)", l,
              n(c.rx_bytes));
    b.counter("pollux_rnic_retransmitted_packets_total",
              "Request packets sent again (ACK timeout, NAK, RNR)", l, n(c.retransmitted_packets));
    b.counter("pollux_rnic_ack_timeouts_total", "Local ACK timeouts (go back to the oldest PSN)", l,
              n(c.timeouts));
    b.counter("pollux_rnic_rnr_naks_sent_total", "RNR NAKs sent (a SEND found no receive WQE)", l,
              n(c.rnr_naks_sent));
    b.counter("pollux_rnic_rnr_naks_received_total", "RNR NAKs received (the requester waits)", l,
              n(c.rnr_naks_received));
    b.counter("pollux_rnic_seq_naks_sent_total", "PSN sequence error NAKs sent (a gap)", l,
              n(c.seq_naks_sent));
    b.counter("pollux_rnic_duplicate_requests_total", "Request packets received twice", l,
              n(c.duplicate_requests));
    b.counter("pollux_rnic_icrc_errors_total", "Packets dropped for a bad ICRC (corrupted)", l,
              n(c.icrc_errors));
    b.counter("pollux_rnic_dropped_packets_total",
              "Packets dropped: unknown or unready QP, stale response, malformed", l,
              n(c.dropped_packets));
    b.counter("pollux_rnic_cq_overflows_total", "Completion queues that overflowed", l,
              n(c.cq_overflows));
    b.gauge("pollux_rnic_link_up", "The NIC's link is up (0: a flap or a partition)", l,
            cluster_.wire().link_up(port(s)) ? 1 : 0);
    b.gauge("pollux_rnic_enabled", "The NIC is enabled (0: reset, its driver not back yet)", l,
            r.enabled() ? 1 : 0);
    std::array<uint64_t, 7> by_state{};
    r.for_each_qp([&](uint32_t qpn, sr::QpState st, const emu::rnic::QpCounters& q) {
      const auto k = static_cast<std::size_t>(st);
      if (k < by_state.size()) ++by_state[k];
      metrics::Labels ql = l;
      ql.emplace_back("qpn", std::to_string(qpn));
      b.counter("pollux_rnic_qp_tx_packets_total", "Packets the QP sent", ql, n(q.tx_packets));
      b.counter("pollux_rnic_qp_rx_packets_total", "Packets the QP received", ql, n(q.rx_packets));
      b.counter("pollux_rnic_qp_tx_bytes_total", "Bytes the QP sent", ql, n(q.tx_bytes));
      b.counter("pollux_rnic_qp_rx_bytes_total", "Bytes the QP received", ql, n(q.rx_bytes));
      b.counter("pollux_rnic_qp_retransmitted_packets_total", "Packets the QP sent again", ql,
                n(q.retransmitted_packets));
      b.counter("pollux_rnic_qp_ack_timeouts_total", "The QP's local ACK timeouts", ql,
                n(q.timeouts));
      b.counter("pollux_rnic_qp_rnr_naks_total", "RNR NAKs the QP sent and received", ql,
                n(q.rnr_naks_sent + q.rnr_naks_received));
      b.counter("pollux_rnic_qp_seq_naks_sent_total", "PSN sequence NAKs the QP sent", ql,
                n(q.seq_naks_sent));
      b.counter("pollux_rnic_qp_error_completions_total",
                "Work completions in error (flushes included)", ql, n(q.error_completions));
      b.counter("pollux_rnic_qp_errors_total", "Times the QP entered the Error state", ql,
                n(q.errors));
      b.counter("pollux_rnic_qp_messages_total", "Send work requests completed successfully", ql,
                n(q.messages));
      b.counter("pollux_rnic_qp_message_latency_seconds_total",
                "Sum of send work requests' time from fetch to completion (over messages: the "
                "mean)",
                ql, static_cast<double>(q.latency_ns_sum) * 1e-9);
      b.gauge("pollux_rnic_qp_message_latency_max_seconds",
              "Longest send work request from fetch to completion", ql,
              static_cast<double>(q.latency_ns_max) * 1e-9);
    });
    static const char* kStates[] = {"reset", "init", "rtr", "rts", "sqd", "sqe", "error"};
    for (std::size_t k = 0; k < by_state.size(); ++k) {
      metrics::Labels sl = l;
      sl.emplace_back("state", kStates[k]);
      b.gauge("pollux_rnic_qps", "QPs on the NIC by state", sl, n(by_state[k]));
    }
  }
  const emu::rnic::WireStats& w = cluster_.wire().stats();
  b.counter("pollux_rnic_wire_packets_total", "Packets put on the wire", {}, n(w.sent));
  b.counter("pollux_rnic_wire_dropped_packets_total",
            "Packets the wire lost (loss, a link down, no such port)", {}, n(w.dropped));
  b.counter("pollux_rnic_wire_corrupted_packets_total",
            "Packets the wire corrupted (the receiver's ICRC drops them)", {}, n(w.corrupted));
  b.counter("pollux_rnic_link_flaps_total", "Links taken down by a fault", {}, n(link_flaps_));
}

}  // namespace pollux::sim
