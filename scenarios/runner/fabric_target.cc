// The fabric target: the scenario's emulated drives behind an in-process Pollux NVMe-oF
// target (scenarios/sim's FabricTarget, on a step-mode framework of its own: another machine
// in the lockstep world), and the host's driver connected to it over a SimNetwork (NVMe/TCP)
// or over two emulated RoCEv2 NICs on a wire (NVMe/RDMA: scenarios/sim's RdmaFabric, the CM's
// exchange on the SimNetwork) — so a fabric fault replays from its seed like a device fault.
// One subsystem per drive (nqn.2026-11.io.pollux:<name>, namespace 1 = the drive's namespace 1
// through the target's bdev_nvme); the host's controller for the drive has the drive's name,
// so its bdev is <name>n1 as on the emulated target.
#include "scenarios/sim/fabric_target.h"

#include <algorithm>
#include <cstdio>

#include "driver/bdev/modules/nvme.h"
#include "driver/nvme/transport_id.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/host.h"
#include "fabric/tcp/host.h"
#include "scenarios/runner/emulated_target.h"
#include "scenarios/sim/rdma_fabric.h"

namespace pollux::scenarios {
namespace {

// Path p of the fabric is the target's address 10.0.0.<p + 1>, a link of its own.
std::string address_of(uint32_t path) {
  return "10.0.0." + std::to_string(path + 1);
}
constexpr char kPort[] = "4420";
constexpr char kHostNqn[] = "nqn.2026-11.io.pollux:scenario-host";

std::string nqn_of(const std::string& device) {
  return "nqn.2026-11.io.pollux:" + device;
}

// RDMA: the CM's out-of-band exchange rides a simulated network as fast as the wire. A real
// CM connection has no stream to time out: its user timeout is past any scenario.
fabric::net::LinkConfig cm_link_of(const FabricLinkSpec& l) {
  fabric::net::LinkConfig c;
  c.latency_ns = l.latency_ns;
  c.bandwidth_bps = 100'000'000'000;
  c.rto_ns = 200'000;
  c.user_timeout_ns = 3'600'000'000'000ull;
  return c;
}

fabric::rdma::QpTiming qp_timing_of(const FabricSpec& f) {
  fabric::rdma::QpTiming t;
  uint8_t mtu = 1;  // IBA's encoding: 256 << (code - 1) bytes
  while (mtu < 5 && spec::roce::mtu_bytes(static_cast<spec::roce::Mtu>(mtu)) < f.link.mtu) ++mtu;
  t.mtu = static_cast<spec::roce::Mtu>(mtu);
  t.timeout = f.nic.ack_timeout;
  t.retry_cnt = f.nic.retry_count;
  t.rnr_retry = f.nic.rnr_retry;
  return t;
}

fabric::net::LinkConfig link_of(const FabricLinkSpec& l) {
  fabric::net::LinkConfig c;
  c.latency_ns = l.latency_ns;
  c.bandwidth_bps = l.bandwidth_bps;
  c.mtu = l.mtu;
  c.loss = l.loss;
  c.rto_ns = l.rto_ns;
  c.jitter_ns = l.jitter_ns;
  c.user_timeout_ns = l.user_timeout_ns;
  return c;
}

class FabricScenarioTarget final : public EmulatedTarget {
 public:
  FabricScenarioTarget(const Scenario& sc, std::vector<emu::timing::Profile> profiles,
                       std::unique_ptr<sim::Rig> rig, uint64_t seed, TuneController tune)
      : EmulatedTarget(sc, std::move(profiles), std::move(rig)),
        spec_(*sc.fabric),
        host_(sc.host),
        tune_(std::move(tune)),
        net_(rig_->clock(), seed ^ 0xfab41c5eedull),
        seed_(seed) {
    net_.set_default_link(rdma() ? cm_link_of(spec_.link) : link_of(spec_.link));
    for (const DeviceSpec& d : sc.devices) {
      subsystems_.push_back({nqn_of(d.name), {d.name + "n1"}});
      host_faults_.push_back(std::make_shared<fabric::rdma::RdmaHostFaults>());
    }
  }
  ~FabricScenarioTarget() override {
    // The host's controllers are gone (the engine detached them); the target, then its drives.
    if (target_ && !target_->shutdown([this] { rig_->lockstep().wait_turn(); })) {
      std::fprintf(stderr, "fabric target: could not stop (I/O held by a drive); left in memory\n");
    }
    target_.reset();
    rdma_.reset();  // the NICs after every verbs object on them
  }

  bool rdma() const { return spec_.transport == "rdma"; }

  // The target's side: its framework, the drives attached to its bdev_nvme, the listener.
  std::string start() {
    std::string err;
    sim::FabricTargetOptions fo;
    fo.registry = &rig_->registry();  // the drives reach only the rig's memory
    fo.addresses.clear();
    for (uint32_t p = 0; p < spec_.paths; ++p) fo.addresses.push_back(address_of(p));
    if (rdma()) {
      sim::RdmaFabricOptions ro;
      ro.seed = seed_;
      ro.latency_ns = spec_.link.latency_ns;
      ro.loss = spec_.link.loss;
      rdma_ = sim::RdmaFabric::create(rig_->clock(), rig_->registry(), ro, &err);
      if (!rdma_) return err;
      fo.trtype = "RDMA";
      fo.rdma_context = &rdma_->context(sim::RdmaSide::kTarget);
      fo.rdma.qp = qp_timing_of(spec_);
    }
    target_ = sim::FabricTarget::create(rig_->clock(), net_, fo, &err);
    if (!target_) return err;
    sim::Lockstep& ls = rig_->lockstep();
    ls.add_world([this] { return world_step(); });
    ls.add_event_source([this] { return next_event_ns(); });
    net_.set_wait_hook([&ls] { ls.wait_turn(); });
    for (uint32_t d = 0; d < rig_->devices(); ++d) {
      auto ctrl = rig_->connect(d, &err);
      if (!ctrl) return "target: drive " + specs_[d].name + ": " + err;
      event::CurrentThreadScope scope(&target_->thread());
      bdev::NvmeBdevOptions o;
      o.name = specs_[d].name;
      o.registry = &rig_->registry();
      // The target's NVMe driver is the drives' host: the scenario's host section applies.
      o.admin_poll_period_us = host_.admin_poll_us;
      o.retry_count = host_.retry_count;
      o.qpair.timeout_us = host_.io_timeout_us;
      auto names = bdev::nvme_attach_controller(target_->bdevs(), std::move(ctrl), o);
      if (!names) return "target: attach " + o.name + ": " + names.error().message;
    }
    return target_->start(subsystems_, [&ls] { ls.wait_turn(); });
  }

  Result<std::unique_ptr<nvme::Controller>> connect(uint32_t d) override {
    auto trid_of = [&](uint32_t path) {
      return nvme::parse_transport_id(std::string("trtype:") + (rdma() ? "rdma" : "tcp") +
                                      " adrfam:ipv4 traddr:" + address_of(path) +
                                      " trsvcid:" + kPort + " subnqn:" + nqn_of(specs_[d].name));
    };
    auto trid = trid_of(0);
    if (!trid) return trid.error();
    if (rdma()) {
      fabric::rdma::RdmaHostOptions ho;
      ho.context = &rdma_->context(sim::RdmaSide::kHost);
      ho.cm_network = &net_;
      ho.registry = &rig_->registry();
      ho.connect_timeout_ms =
          static_cast<uint32_t>(std::max<uint64_t>(1, spec_.connect_timeout_ns / 1'000'000));
      ho.qp = qp_timing_of(spec_);
      ho.faults = host_faults_[d];
      auto transport = fabric::rdma::RdmaTransport::create(trid.value(), ho);
      if (!transport) return transport.error();
      return attach(std::move(transport).value());
    }
    fabric::tcp::TcpOptions to;
    to.network = &net_;
    to.header_digest = to.data_digest = spec_.digests;
    to.connect_timeout_ms =
        static_cast<uint32_t>(std::max<uint64_t>(1, spec_.connect_timeout_ns / 1'000'000));
    auto transport = fabric::tcp::TcpTransport::create(trid.value(), to);
    if (!transport) return transport.error();
    for (uint32_t p = 1; p < spec_.paths; ++p) {  // multipath, failover
      auto other = trid_of(p);
      if (!other) return other.error();
      if (std::string e = transport.value()->add_path(other.value()); !e.empty())
        return make_error(EINVAL, "path " + std::to_string(p) + ": " + e);
    }
    return attach(std::move(transport).value());
  }

  // The host's controller over either transport, tuned as the scenario says.
  Result<std::unique_ptr<nvme::Controller>> attach(std::unique_ptr<nvme::Transport> transport) {
    nvme::ControllerOptions co;
    co.registry = &rig_->registry();
    co.clock = &rig_->clock();
    co.io_queues_requested = spec_.io_queues;
    sim::Lockstep* ls = &rig_->lockstep();
    co.wait_hook = [ls] { ls->wait_turn(); };
    co.hostnqn = kHostNqn;
    co.keep_alive_timeout_ms = spec_.keep_alive_timeout_ms;
    co.admin_timeout_us = std::max<uint64_t>(spec_.connect_timeout_ns / 1000, 1000);
    // RDMA: one lost packet costs an ACK timeout before the NIC sends it again; an admin
    // command is not given up before two of them.
    if (rdma()) {
      const uint64_t ack_us = spec::roce::local_ack_timeout_ns(spec_.nic.ack_timeout) / 1000;
      co.admin_timeout_us = std::max<uint64_t>(co.admin_timeout_us, 2 * ack_us);
    }
    if (tune_) tune_(co);
    auto c = nvme::Controller::attach(std::move(transport), co);
    if (!c) return make_error(ENODEV, c.error().message);
    return c;
  }
  // The remote controller is there whenever the target is (the hot-plug poller attaches it
  // again after a controller loss; a refused connect just fails that attempt).
  bool present(uint32_t) override { return true; }
  // Realtime: the lockstep's clock follows the wall clock, and the simulated network (on that
  // clock) with it — the same faults, paced; not real sockets.
  std::string set_realtime(bool on) override { return EmulatedTarget::set_realtime(on); }
  std::string hot_remove(uint32_t) override {
    return "hot_remove behind a fabric target: not supported";
  }
  std::string hot_insert(uint32_t) override {
    return "hot_insert behind a fabric target: not supported";
  }

  InjectResult inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                      uint64_t seed) override {
    if (!is_fabric_fault(s.kind)) return EmulatedTarget::inject(d, s, range_blocks, seed);
    if (rdma()) return inject_rdma(d, s, seed);
    InjectResult r;
    const uint64_t now = rig_->clock().now();
    const std::string link = s.path < 0 ? "" : address_of(static_cast<uint32_t>(s.path));
    const std::string on = s.path < 0 ? "" : " on path " + std::to_string(s.path);
    switch (s.kind) {
      case FaultKind::kConnectionDrop:
        r.detail = std::to_string(net_.drop(link)) + " connections reset" + on;
        break;
      case FaultKind::kPartition:
        net_.partition(link, s.duration_ns);
        r.detail = "no traffic" + on + " for " + format_ns(s.duration_ns) +
                   (s.duration_ns >= spec_.link.user_timeout_ns ? " (connections time out)" : "");
        break;
      case FaultKind::kLatency:
        net_.add_latency(link, s.delay_ns, s.duration_ns);
        r.detail = "+" + format_ns(s.delay_ns) + " one way for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kCorruption:
        net_.corrupt(link, s.rate, s.duration_ns);
        r.detail = "segments corrupted with probability " + std::to_string(s.rate) + " for " +
                   format_ns(s.duration_ns) + (spec_.digests ? " (digests on)" : " (no digests)");
        break;
      case FaultKind::kKeepaliveExpiry:
        frozen_until_ = std::max(frozen_until_, now + s.duration_ns);
        r.detail = "the target answers nothing for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kTargetRestart:
        // Acted on at the next world step: never from inside the target's own step.
        restart_requested_ = true;
        back_at_ = now + s.duration_ns;
        r.detail = "target down for " + format_ns(s.duration_ns);
        break;
      default:
        break;
    }
    return r;
  }

  // Faults on the RDMA fabric: its wire and NICs, the host's error injection, the target.
  InjectResult inject_rdma(uint32_t d, const FaultSpec& s, uint64_t seed) {
    InjectResult r;
    const auto side = s.side == "target" ? sim::RdmaSide::kTarget : sim::RdmaSide::kHost;
    const std::string whose = std::string("the ") + sim::to_string(side) + "'s";
    switch (s.kind) {
      case FaultKind::kPartition:
        rdma_->partition(s.duration_ns);
        net_.partition("", s.duration_ns);  // the CM's exchange too
        r.detail = "both links down for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kLinkFlap:
        // One link each side: either one down cuts host and target apart, the CM with them.
        rdma_->link_down(side, s.duration_ns);
        net_.partition("", s.duration_ns);
        r.detail = whose + " link down for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kLoss:
        rdma_->loss(s.rate, s.duration_ns);
        r.detail = "packets lost with probability " + std::to_string(s.rate) + " for " +
                   format_ns(s.duration_ns);
        break;
      case FaultKind::kCorruption:
        rdma_->corrupt(s.rate, s.duration_ns);
        r.detail = "packets corrupted (dropped by the ICRC check) with probability " +
                   std::to_string(s.rate) + " for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kQpError: {
        const uint64_t n = s.qp >= 0 ? static_cast<uint64_t>(s.qp) : seed % 256;
        const uint32_t qpn = rdma_->fail_qp(side, n);
        r.detail = qpn != 0 ? whose + " QP " + std::to_string(qpn) + " to Error"
                            : "no QP of " + whose + " NIC was connected: nothing failed";
        break;
      }
      case FaultKind::kNicReset:
        rdma_->reset_nic(side);
        r.detail = whose + " NIC reset: every QP, CQ and MR on it gone";
        break;
      case FaultKind::kBadRkey:
        host_faults_[d]->bad_rkeys.fetch_add(s.count);
        r.detail = "the next " + std::to_string(s.count) + " keyed command" +
                   (s.count == 1 ? "" : "s") + " of " + specs_[d].name + " name a wrong rkey";
        break;
      case FaultKind::kKeepaliveExpiry:
      case FaultKind::kTargetRestart: {
        const bool restart = s.kind == FaultKind::kTargetRestart;
        if (restart) {
          restart_requested_ = true;
          back_at_ = rig_->clock().now() + s.duration_ns;
        } else {
          frozen_until_ = std::max(frozen_until_, rig_->clock().now() + s.duration_ns);
        }
        r.detail = restart ? "target down for " + format_ns(s.duration_ns)
                           : "the target answers nothing for " + format_ns(s.duration_ns) +
                                 " (its NIC still acknowledges packets)";
        break;
      }
      default:
        r.error = std::string("'") + to_string(s.kind) + "' does not apply to an RDMA fabric";
        break;
    }
    return r;
  }

  std::string describe(uint32_t d) override {
    std::string s = EmulatedTarget::describe(d);
    s += target_ && target_->running() ? " target:up" : " target:down";
    if (rig_->clock().now() < frozen_until_) s += "(frozen)";
    return s;
  }
  void outcome(uint32_t d, DeviceOutcome* out) override { EmulatedTarget::outcome(d, out); }
  void collect_metrics(metrics::Builder& b, uint64_t now_ns) const override {
    EmulatedTarget::collect_metrics(b, now_ns);
    const fabric::net::SimNetworkStats& st = net_.stats();
    b.counter("pollux_simnet_segments_total", "Segments the simulated network carried", {},
              static_cast<double>(st.segments));
    b.counter("pollux_simnet_corrupted_segments_total", "Segments delivered corrupted", {},
              static_cast<double>(st.corrupted));
    b.counter("pollux_simnet_connection_resets_total", "Connections reset (drops, timeouts)", {},
              static_cast<double>(st.resets));
    if (!rdma_) return;
    rdma_->collect_metrics(b);
    for (uint32_t d = 0; d < host_faults_.size(); ++d) {
      b.counter("pollux_rdma_host_bad_rkeys_sent_total",
                "Keyed commands sent with a wrong rkey (error injection)",
                {{"controller", specs_[d].name}},
                static_cast<double>(host_faults_[d]->bad_rkeys_sent.load()));
    }
  }
  // The drives' trace and the network's delivery trace together (and the RDMA wire's
  // packet decisions).
  uint64_t trace_hash() const override {
    const uint64_t h = EmulatedTarget::trace_hash() ^ (net_.trace_hash() * 0x9e3779b97f4a7c15ull);
    return rdma_ ? h ^ (rdma_->trace_hash() * 0xc2b2ae3d27d4eb4full) : h;
  }
  std::vector<std::pair<std::string, uint64_t>> fabric_counters() const override {
    const fabric::net::SimNetworkStats& st = net_.stats();
    if (!rdma_) {
      return {{"segments", st.segments},
              {"segments lost and sent again", st.lost},
              {"segments corrupted", st.corrupted},
              {"connection resets", st.resets}};
    }
    uint64_t bad_rkeys = 0;
    for (const auto& f : host_faults_) bad_rkeys += f->bad_rkeys_sent.load();
    std::vector<std::pair<std::string, uint64_t>> out;
    for (sim::RdmaSide side : {sim::RdmaSide::kHost, sim::RdmaSide::kTarget}) {
      const emu::rnic::RnicCounters& c = rdma_->nic(side).counters();
      const std::string who = sim::to_string(side);
      out.emplace_back(who + " packets sent", c.tx_packets);
      out.emplace_back(who + " retransmitted", c.retransmitted_packets);
      out.emplace_back(who + " ACK timeouts", c.timeouts);
      out.emplace_back(who + " RNR NAKs", c.rnr_naks_received);
      out.emplace_back(who + " ICRC errors", c.icrc_errors);
    }
    out.emplace_back("wire drops", rdma_->cluster().wire().stats().dropped);
    out.emplace_back("bad rkeys sent", bad_rkeys);
    return out;
  }
  uint64_t retransmissions() const override {
    if (!rdma_) return net_.stats().lost;
    return rdma_->nic(sim::RdmaSide::kHost).counters().retransmitted_packets +
           rdma_->nic(sim::RdmaSide::kTarget).counters().retransmitted_packets;
  }
  uint64_t trace_records() const override {
    return EmulatedTarget::trace_records() + net_.trace_records() +
           (rdma_ ? rdma_->trace_records() : 0);
  }

 private:
  // The target machine's turn: restarts and freezes are decided here, outside its reactor.
  bool world_step() {
    const uint64_t now = rig_->clock().now();
    if (restart_requested_) {
      restart_requested_ = false;
      target_->begin_stop();
    }
    if (back_at_ != 0 && now >= back_at_ && !target_->running()) {
      back_at_ = 0;
      if (std::string e = target_->start_async(subsystems_); !e.empty()) {
        errors_.push_back("target restart: " + e);
      }
    }
    // A hung target's NIC still works (it acknowledges packets, as hardware does).
    const bool work = now >= frozen_until_ && target_->step();
    return (rdma_ && rdma_->step()) || work;
  }
  uint64_t next_event_ns() {
    uint64_t next = net_.next_event_ns();
    if (rdma_) next = std::min(next, rdma_->next_event_ns());
    const uint64_t now = rig_->clock().now();
    for (uint64_t t : {frozen_until_, back_at_})
      if (t > now) next = std::min(next, t);
    return next;
  }
  std::vector<std::string> errors() const override { return errors_; }

  FabricSpec spec_;
  HostSpec host_;
  TuneController tune_;
  fabric::net::SimNetwork net_;
  uint64_t seed_;
  std::unique_ptr<sim::RdmaFabric> rdma_;                                   // transport: rdma
  std::vector<std::shared_ptr<fabric::rdma::RdmaHostFaults>> host_faults_;  // per device
  std::unique_ptr<sim::FabricTarget> target_;
  std::vector<sim::FabricSubsystem> subsystems_;
  uint64_t frozen_until_ = 0;
  bool restart_requested_ = false;
  uint64_t back_at_ = 0;  // a restarted target is back then (0: no restart pending)
  std::vector<std::string> errors_;
};

}  // namespace

std::unique_ptr<Target> make_fabric_target(const Scenario& sc, uint64_t seed, TuneController tune,
                                           std::string* error) {
  std::vector<emu::timing::Profile> profiles;
  // The drives' controllers belong to the target's NVMe driver, tuned as the host's (timeout
  // action, reset failures): it is the drives' host.
  auto rig = make_rig(sc, seed, tune, &profiles, error);
  if (!rig) return nullptr;
  auto t = std::make_unique<FabricScenarioTarget>(sc, std::move(profiles), std::move(rig), seed,
                                                  std::move(tune));
  if (std::string e = t->start(); !e.empty()) {
    *error = "fabric target: " + e;
    return nullptr;
  }
  return t;
}

}  // namespace pollux::scenarios
