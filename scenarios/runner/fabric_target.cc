// The fabric target: the scenario's emulated drives behind an in-process Pollux NVMe-oF
// target (scenarios/sim's FabricTarget, on a step-mode framework of its own: another machine
// in the lockstep world), and the host's driver connected to it over a SimNetwork (NVMe/TCP)
// or over two emulated RoCEv2 NICs on a wire (NVMe/RDMA: scenarios/sim's RdmaFabric, the CM's
// exchange on the SimNetwork) — so a fabric fault replays from its seed like a device fault —
// or (NVMe/TCP, network: kernel, realtime only) over the kernel's TCP on 127.0.0.x behind a
// FaultNetwork, the same faults on real sockets on the wall clock. One subsystem per drive
// (nqn.2026-11.io.pollux:<name>, namespace 1 = the drive's namespace 1 through the target's
// bdev_nvme); the host's controller for the drive has the drive's name, so its bdev is
// <name>n1 as on the emulated target.
#include "scenarios/sim/fabric_target.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "driver/bdev/modules/nvme.h"
#include "driver/nvme/transport_id.h"
#include "fabric/net/fault_network.h"
#include "fabric/net/posix.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/host.h"
#include "fabric/tcp/host.h"
#include "scenarios/runner/emulated_target.h"
#include "scenarios/sim/rdma_fabric.h"

namespace pollux::scenarios {
namespace {

// Path p of the fabric is the target's address 10.0.0.<p + 1> (simulated) or 127.0.0.<p + 1>
// (kernel: all of 127/8 is loopback), a link of its own.
std::string address_of(const FabricSpec& f, uint32_t path) {
  return (f.network == "kernel" ? "127.0.0." : "10.0.0.") + std::to_string(path + 1);
}
constexpr char kSimPort[] = "4420";

// A port free on every path's address now (the kernel picks it for the first; a restarted
// target listens there again: SO_REUSEADDR). "" and *error if none.
std::string free_port(const FabricSpec& f, std::string* error) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto first = fabric::net::posix_network().listen("ipv4", address_of(f, 0), "0");
    if (!first) {
      *error = "listen on " + address_of(f, 0) + ": " + first.error().message;
      return "";
    }
    const std::string port = std::to_string(first.value()->port());
    bool all = true;
    std::vector<std::unique_ptr<fabric::net::Listener>> others;
    for (uint32_t p = 1; p < f.paths && all; ++p) {
      auto l = fabric::net::posix_network().listen("ipv4", address_of(f, p), port);
      if (l) others.push_back(std::move(l).value());
      all = l.ok();
    }
    if (all) return port;
  }
  *error = "no port free on every path's address";
  return "";
}
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
        seed_(seed) {
    if (spec_.network == "kernel") {
      fabric::net::FaultConfig fc;
      fc.user_timeout_ns = spec_.link.user_timeout_ns;
      // Fault time is the run's clock: paced to the wall clock once the workloads start. The
      // set-up before (drives, target, the host's first connects) runs in virtual time, as
      // for the simulated network: a turn advances it less than the real time it takes, so no
      // deadline there expires before the kernel's loopback answers, and wall time spent
      // outside the lockstep does not land as one jump inside a connect.
      kernel_ = std::make_unique<fabric::net::FaultNetwork>(fabric::net::posix_network(),
                                                            seed ^ 0xfab41c5eedull, &rig_->clock(),
                                                            fc);
      net_ = kernel_.get();
      faults_ = kernel_.get();
    } else {
      sim_ = std::make_unique<fabric::net::SimNetwork>(rig_->clock(), seed ^ 0xfab41c5eedull);
      sim_->set_default_link(rdma() ? cm_link_of(spec_.link) : link_of(spec_.link));
      net_ = sim_.get();
      faults_ = sim_.get();
    }
    for (const DeviceSpec& d : sc.devices) {
      subsystems_.push_back({nqn_of(d.name), {d.name + "n1"}});
      host_faults_.push_back(std::make_shared<fabric::rdma::RdmaHostFaults>());
    }
    for (const FaultSpec& f : sc.faults)
      hotplug_ |= f.kind == FaultKind::kHotRemove || f.kind == FaultKind::kHotInsert;
    readd_.assign(sc.devices.size(), false);
  }
  ~FabricScenarioTarget() override {
    if (target_ && hotplug_) {  // nothing re-attaches a drive while the target lets go of them
      event::CurrentThreadScope scope(&target_->thread());
      bdev::nvme_hotplug_stop(target_->bdevs());
    }
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
    for (uint32_t p = 0; p < spec_.paths; ++p) fo.addresses.push_back(address_of(spec_, p));
    port_ = kSimPort;
    if (kernel_) {
      port_ = free_port(spec_, &err);
      if (port_.empty()) return err;
    }
    fo.port = port_;
    fo.kas = kFabricTargetKas;
    fo.cqt_ms = fabric_target_cqt_ms(host_);
    fo.cores = spec_.target_cores;
    if (spec_.target_command_ns != 0 && !kernel_) {
      fo.costs = sim::TargetCostModel{};
      fo.costs->command_ns = spec_.target_command_ns;
    }
    // On the wall clock a target restart costs what its transport's set-up costs: 128 shared
    // buffers of 128 KiB (16 MiB of DMA memory allocated and registered) took 30-36 ms here,
    // 32 take 3-16 ms — and 32 cover the scenarios' queue depths.
    if (kernel_) fo.tcp.num_shared_buffers = 32;
    if (rdma()) {
      sim::RdmaFabricOptions ro;
      ro.seed = seed_;
      ro.latency_ns = spec_.link.latency_ns;
      ro.loss = spec_.link.loss;
      ro.push_wqes = spec_.nic.push;
      if (!spec_.nic.profile.empty()) {  // validated when the file was read
        auto p = emu::rnic::load_nic_profile(spec_.nic.profile);
        if (!p) return "topology.fabric.nic.profile: " + p.error();
        nic_profile_ = std::move(p).value();
        ro.nic_profile = &*nic_profile_;
      }
      rdma_ = sim::RdmaFabric::create(rig_->clock(), rig_->registry(), ro, &err);
      if (!rdma_) return err;
      fo.trtype = "RDMA";
      fo.rdma_context = &rdma_->context(sim::RdmaSide::kTarget);
      fo.rdma.qp = qp_timing_of(spec_);
    }
    target_ = sim::FabricTarget::create(rig_->clock(), *net_, fo, &err);
    if (!target_) return err;
    sim::Lockstep& ls = rig_->lockstep();
    ls.add_world([this] { return world_step(); });
    if (rdma_) {  // each side's NIC sees its doorbells when that side's software has run
      rdma_->set_cpu_clock(sim::RdmaSide::kHost, [&ls] { return ls.cpu_now_ns(); });
      rdma_->set_cpu_clock(sim::RdmaSide::kTarget,
                           [this] { return target_ ? target_->stores_at_ns() : 0; });
    }
    ls.add_event_source([this] { return next_event_ns(); });
    // A set-up path's wait steps the world (the target must answer the connect) instead of
    // blocking.
    if (sim_) sim_->set_wait_hook([&ls] { ls.wait_turn(); });
    if (kernel_) kernel_->set_wait_hook([&ls] { ls.wait_turn(); });
    bdev::NvmeBdevOptions base;
    for (uint32_t d = 0; d < rig_->devices(); ++d) {
      auto ctrl = rig_->connect(d, &err);
      if (!ctrl) return "target: drive " + specs_[d].name + ": " + err;
      event::CurrentThreadScope scope(&target_->thread());
      bdev::NvmeBdevOptions o;
      o.name = specs_[d].name;
      o.registry = &rig_->registry();
      o.qpair_observer = target_->qpair_observer();  // the target core's CPU time
      // The target's NVMe driver is the drives' host: the scenario's host section applies.
      o.admin_poll_period_us = host_.admin_poll_us;
      o.retry_count = host_.retry_count;
      o.qpair.timeout_us = host_.io_timeout_us;
      auto names = bdev::nvme_attach_controller(target_->bdevs(), std::move(ctrl), o);
      if (!names) return "target: attach " + o.name + ": " + names.error().message;
      base = o;
    }
    if (hotplug_) {
      // A pulled drive comes back through the target's bdev_nvme hot-plug poller (SPDK's): it
      // attaches the drive again once its removed controller is freed.
      std::vector<bdev::NvmeHotplugSlot> slots;
      for (uint32_t d = 0; d < rig_->devices(); ++d) {
        slots.push_back(bdev::NvmeHotplugSlot{
            specs_[d].name, [this, d] { return rig_->device(d).present(); },
            [this, d]() -> Result<std::unique_ptr<nvme::Controller>> {
              std::string e;
              auto c = rig_->connect(d, &e);
              if (!c) return make_error(ENODEV, e);
              return c;
            }});
      }
      event::CurrentThreadScope scope(&target_->thread());
      base.name.clear();
      const uint64_t period = host_.hotplug_poll_us ? host_.hotplug_poll_us : 500;
      if (int rc = bdev::nvme_hotplug_start(target_->bdevs(), std::move(slots), period, base);
          rc != 0)
        return "target: hot-plug poller: error " + std::to_string(rc);
    }
    return target_->start(subsystems_, [&ls] { ls.wait_turn(); });
  }

  Result<std::unique_ptr<nvme::Controller>> connect(uint32_t d) override {
    auto trid_of = [&](uint32_t path) {
      return nvme::parse_transport_id(std::string("trtype:") + (rdma() ? "rdma" : "tcp") +
                                      " adrfam:ipv4 traddr:" + address_of(spec_, path) +
                                      " trsvcid:" + port_ + " subnqn:" + nqn_of(specs_[d].name));
    };
    auto trid = trid_of(0);
    if (!trid) return trid.error();
    if (rdma()) {
      fabric::rdma::RdmaHostOptions ho;
      ho.context = &rdma_->context(sim::RdmaSide::kHost);
      ho.cm_network = sim_.get();
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
    to.network = net_;
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
  // clock) with it — the same faults, paced. Kernel sockets: realtime only.
  std::string set_realtime(bool on) override {
    if (kernel_ && !on) return "topology.fabric.network: kernel sockets cannot run in virtual time";
    if (target_) target_->set_realtime(on);
    return EmulatedTarget::set_realtime(on);
  }
  // Hot-plug of a drive behind the target: the target's bdev_nvme sees it go (its bdev goes,
  // the subsystem's namespace with it: a changed-namespace notice to the hosts, whose
  // bdev_nvme drops the namespace's bdev), re-attaches it when it is back (the hot-plug
  // poller), and the namespace is added again as an operator's nvmf_subsystem_add_ns would
  // (SPDK does not re-add one by itself either): another notice, and the host's bdev returns.
  std::string hot_remove(uint32_t d) override {
    rig_->hot_remove(d);
    readd_[d] = true;
    return "";
  }
  std::string hot_insert(uint32_t d) override {
    rig_->hot_insert(d);
    return "";
  }
  bool coming_back(uint32_t d) const override { return readd_[d] && rig_->device(d).present(); }

  InjectResult inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                      uint64_t seed) override {
    if (!is_fabric_fault(s.kind)) return EmulatedTarget::inject(d, s, range_blocks, seed);
    if (rdma()) return inject_rdma(d, s, seed);
    InjectResult r;
    const uint64_t now = rig_->clock().now();
    const std::string link =
        s.path < 0 ? "" : address_of(spec_, static_cast<uint32_t>(s.path));
    const std::string on = s.path < 0 ? "" : " on path " + std::to_string(s.path);
    switch (s.kind) {
      case FaultKind::kConnectionDrop:
        r.detail = std::to_string(faults_->drop(link)) +
                   (kernel_ ? " connection ends reset" : " connections reset") + on;
        break;
      case FaultKind::kPartition:
        faults_->partition(link, s.duration_ns);
        r.detail = "no traffic" + on + " for " + format_ns(s.duration_ns) +
                   (s.duration_ns >= spec_.link.user_timeout_ns ? " (connections time out)" : "");
        break;
      case FaultKind::kLatency:
        faults_->add_latency(link, s.delay_ns, s.duration_ns);
        r.detail = "+" + format_ns(s.delay_ns) + " one way for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kCorruption:
        faults_->corrupt(link, s.rate, s.duration_ns);
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
        sim_->partition("", s.duration_ns);  // the CM's exchange too
        r.detail = "both links down for " + format_ns(s.duration_ns);
        break;
      case FaultKind::kLinkFlap:
        // One link each side: either one down cuts host and target apart, the CM with them.
        rdma_->link_down(side, s.duration_ns);
        sim_->partition("", s.duration_ns);
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
    if (kernel_) {
      const fabric::net::FaultNetworkStats& st = kernel_->stats();
      b.counter("pollux_faultnet_connections_total", "Sockets made through the fault layer", {},
                static_cast<double>(st.connections.load()));
      b.counter("pollux_faultnet_connection_resets_total",
                "Connection ends reset (drops, user timeouts)", {},
                static_cast<double>(st.resets.load() + st.timeouts.load()));
      b.counter("pollux_faultnet_held_bytes_total", "Bytes a fault held back (partition, latency)",
                {}, static_cast<double>(st.held_bytes.load()));
      b.counter("pollux_faultnet_corrupted_bytes_total", "Bytes flipped past TCP's checksum", {},
                static_cast<double>(st.corrupted.load()));
      return;
    }
    const fabric::net::SimNetworkStats& st = sim_->stats();
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
  // The drives' trace and the network's delivery trace together (kernel sockets: the fault
  // schedule and its draws; their timing is the wall clock's), and the RDMA wire's packet
  // decisions.
  uint64_t trace_hash() const override {
    const uint64_t net = kernel_ ? kernel_->fault_hash() : sim_->trace_hash();
    const uint64_t h = EmulatedTarget::trace_hash() ^ (net * 0x9e3779b97f4a7c15ull);
    return rdma_ ? h ^ (rdma_->trace_hash() * 0xc2b2ae3d27d4eb4full) : h;
  }
  // Kernel sockets: none (the notes say what the fault layer did; the kernel's TCP keeps its
  // retransmissions to itself).
  // Summed over target restarts (a restarted target counts its commands from zero).
  uint64_t target_busy_ns() const override { return target_ ? target_->busy_ns() : 0; }
  uint32_t target_cores() const override { return target_ ? target_->cores() : 0; }
  std::vector<uint64_t> target_core_busy_ns() const override {
    std::vector<uint64_t> v;
    for (uint32_t i = 0; target_ && i < target_->cores(); ++i) v.push_back(target_->busy_ns(i));
    return v;
  }
  uint64_t target_commands() const override {
    return commands_before_restarts_ + (target_ ? target_->commands_completed() : 0);
  }
  std::vector<std::pair<std::string, uint64_t>> fabric_counters() const override {
    if (kernel_) return {};
    const fabric::net::SimNetworkStats& st = sim_->stats();
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
      out.emplace_back(who + " WQEs pushed", c.pushed_wqes);
    }
    out.emplace_back("wire drops", rdma_->cluster().wire().stats().dropped);
    out.emplace_back("bad rkeys sent", bad_rkeys);
    return out;
  }
  uint64_t retransmissions() const override {
    if (kernel_) return 0;  // not seen (validate refuses expect.min_retransmissions there)
    if (!rdma_) return sim_->stats().lost;
    return rdma_->nic(sim::RdmaSide::kHost).counters().retransmitted_packets +
           rdma_->nic(sim::RdmaSide::kTarget).counters().retransmitted_packets;
  }
  uint64_t trace_records() const override {
    return EmulatedTarget::trace_records() + (sim_ ? sim_->trace_records() : 0) +
           (rdma_ ? rdma_->trace_records() : 0);
  }
  std::vector<std::string> notes() const override {
    if (!kernel_) return {};
    const fabric::net::FaultNetworkStats& st = kernel_->stats();
    const std::string where =
        spec_.paths == 1 ? "127.0.0.1" : "127.0.0.1-" + std::to_string(spec_.paths);
    return {"fabric: kernel TCP on " + where + " port " + port_ +
            " behind the fault layer: " + std::to_string(st.connections.load()) +
            " sockets, " + std::to_string(st.resets.load()) + " ends reset by drops, " +
            std::to_string(st.timeouts.load()) + " by user timeouts, " +
            std::to_string(st.deferred_connects.load()) + " connects deferred, " +
            std::to_string(st.held_bytes.load()) + " bytes held, " +
            std::to_string(st.corrupted.load()) + " bytes corrupted"};
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
    const bool frozen = now < frozen_until_;
    const uint64_t commands = target_->commands_completed();
    const bool work = !frozen && target_->step();
    if (target_->commands_completed() < commands) commands_before_restarts_ += commands;
    if (!frozen && std::find(readd_.begin(), readd_.end(), true) != readd_.end())
      readd_namespaces();
    return (rdma_ && rdma_->step()) || work;
  }
  // A re-inserted drive's bdev is back on the target: its namespace 1 is added again (an
  // old one still draining, or the old bdev still going: the next step tries again).
  void readd_namespaces() {
    if (!target_->running() || target_->stopping()) return;
    for (uint32_t d = 0; d < readd_.size(); ++d) {
      if (!readd_[d] || !rig_->device(d).present()) continue;
      const std::string bdev = specs_[d].name + "n1";
      if (target_->bdevs().find(bdev) == nullptr) continue;
      event::CurrentThreadScope scope(&target_->thread());
      fabric::target::NamespaceOptions no;
      no.bdev_name = bdev;
      no.nsid = 1;
      if (target_->target().add_namespace(nqn_of(specs_[d].name), no)) readd_[d] = false;
    }
  }
  uint64_t next_event_ns() {
    uint64_t next = sim_ ? sim_->next_event_ns() : UINT64_MAX;
    if (rdma_) next = std::min(next, rdma_->next_event_ns());
    const uint64_t now = rig_->clock().now();
    for (uint64_t t : {frozen_until_, back_at_})
      if (t > now) next = std::min(next, t);
    if (target_) next = std::min(next, target_->next_event_ns());
    return next;
  }
  std::vector<std::string> errors() const override { return errors_; }

  FabricSpec spec_;
  HostSpec host_;
  uint64_t commands_before_restarts_ = 0;
  std::optional<emu::rnic::NicProfile> nic_profile_;  // timed NICs (nic.profile)
  TuneController tune_;
  std::unique_ptr<fabric::net::SimNetwork> sim_;      // network: simulated
  std::unique_ptr<fabric::net::FaultNetwork> kernel_;  // network: kernel
  fabric::net::Network* net_ = nullptr;
  fabric::net::NetworkFaults* faults_ = nullptr;
  std::string port_;
  uint64_t seed_;
  std::unique_ptr<sim::RdmaFabric> rdma_;                                   // transport: rdma
  std::vector<std::shared_ptr<fabric::rdma::RdmaHostFaults>> host_faults_;  // per device
  std::unique_ptr<sim::FabricTarget> target_;
  std::vector<sim::FabricSubsystem> subsystems_;
  uint64_t frozen_until_ = 0;
  bool restart_requested_ = false;
  uint64_t back_at_ = 0;  // a restarted target is back then (0: no restart pending)
  bool hotplug_ = false;     // the timeline pulls drives: the target re-attaches them
  std::vector<bool> readd_;  // per drive: pulled, its namespace to be added again
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

uint16_t fabric_target_cqt_ms(const HostSpec& host) {
  return static_cast<uint16_t>(
      std::min<uint64_t>(0xffff, 1 + (4 * host.io_timeout_us + 10'000 + 999) / 1000));
}

uint64_t fabric_write_fence_ns(const FabricSpec& f, const HostSpec& host) {
  const uint64_t unit_ms = kFabricTargetKas * 100;
  const uint64_t kato_ms = (f.keep_alive_timeout_ms + unit_ms - 1) / unit_ms * unit_ms;
  return (kato_ms + fabric_target_cqt_ms(host)) * 1'000'000;
}

}  // namespace pollux::scenarios
