// Pollux's NVMe/RDMA host and target in one process, in virtual time: two emulated RNICs on one
// Cluster (wire + clock), the CM exchange over a SimNetwork on the same clock, the target's
// core and RDMA transport on a step-mode framework, and the host's controller, all driven from
// the test's thread by pump(): the target's reactor, the NICs, and a jump to the next event
// when nothing happened. Same seed, same run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/event/framework.h"
#include "driver/nvme/controller.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/cluster.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/host.h"
#include "fabric/rdma/target_transport.h"
#include "fabric/target/target.h"

namespace pollux::fabric::rdma::testing {

inline constexpr char kNqn[] = "nqn.2026-11.io.pollux:rdma";
inline constexpr char kTargetAddress[] = "10.0.0.1";

struct WorldOptions {
  uint64_t seed = 1;
  emu::rnic::WireFaults faults;
  RdmaTargetOptions target = [] {
    RdmaTargetOptions o;
    o.num_shared_buffers = 64;
    o.num_cqe = 8192;
    return o;
  }();
  uint64_t blocks = 16384;  // 8 MiB of 512-byte blocks
  QpTiming host_qp;
  // Timed NICs and network (emulator/rnic/nic_profile.h); none: functional NICs.
  std::optional<emu::rnic::NicProfile> nic_profile;
  // Virtual time a turn of pump() costs when the target or a NIC did something (a crude
  // stand-in for software time: the lockstep engine's HostCostModel is the real one).
  uint64_t work_step_ns = 100;
  std::shared_ptr<RdmaHostFaults> host_faults;  // error injection on the host's side
};

// One machine's side of the wire: its memory, its NIC, and verbs over it.
struct Machine {
  env::MemoryRegistry registry;
  emu::rnic::RnicDevice* device = nullptr;
  std::unique_ptr<verbs::Context> ctx;
  std::string open(emu::rnic::Cluster& cluster) {
    device = cluster.add_nic();
    if (device == nullptr) return "no NIC";
    auto pci = env::VfioUserDevice::attach(device->connect(), registry);
    if (!pci) return pci.error().message;
    auto c = verbs::open_rnic(std::move(pci).value(), registry);
    if (!c) return c.error().message;
    ctx = std::move(c).value();
    return "";
  }
};

class World {
 public:
  explicit World(WorldOptions o = {})
      : o_(std::move(o)), cluster_(make_cluster(o_)), net_(clock_, o_.seed) {
    net_.set_wait_hook([this] { pump(); });
    build();
  }

  ~World() {
    ctrl_.reset();  // the host's queues disconnect
    if (!fw_) return;
    if (tgt_) {
      bool stopped = false;
      {
        event::CurrentThreadScope scope(thread_);
        tgt_->stop([&] { stopped = true; });
      }
      for (int i = 0; i < 1'000'000 && !stopped; ++i) pump();
      event::CurrentThreadScope scope(thread_);
      tgt_.reset();
    }
    fw_->stop(0);
    for (int i = 0; i < 1'000'000 && !fw_->finished(); ++i) fw_->step();
    mgr_.reset();
  }

  bool ready() const { return ready_; }

 private:
  static emu::rnic::Cluster make_cluster(const WorldOptions& o) {
    return o.nic_profile ? emu::rnic::Cluster(o.seed, *o.nic_profile, o.faults)
                         : emu::rnic::Cluster(o.seed, o.faults);
  }

 public:

 private:
  // The NICs, the target with one subsystem (Malloc0 as namespace 1) listening on RDMA.
  void build() {
    ASSERT_EQ(target_machine_.open(cluster_), "");
    ASSERT_EQ(host_machine_.open(cluster_), "");
    event::FrameworkOptions fo;
    fo.core_mask = "0x1";
    fo.step_mode = true;
    fo.pin_reactors = false;
    fo.clock = &clock_;
    auto fw = event::Framework::create(fo);
    ASSERT_TRUE(fw.ok());
    fw_ = std::move(fw).value();
    thread_ = fw_->create_thread("rdma-target", 0);
    auto mgr = bdev::Manager::create(*fw_);
    ASSERT_TRUE(mgr.ok());
    mgr_ = std::move(mgr).value();
    event::CurrentThreadScope scope(thread_);
    ASSERT_TRUE(
        bdev::create_malloc_bdev(*mgr_, {"Malloc0", o_.blocks, 512, nullptr, nullptr}).ok());
    auto tg = target::Target::create(*fw_, *mgr_);
    ASSERT_TRUE(tg.ok());
    tgt_ = std::move(tg).value();
    auto tr = RdmaTargetTransport::create(*tgt_, o_.target, *target_machine_.ctx, &net_,
                                          &target_machine_.registry);
    ASSERT_TRUE(tr.ok()) << tr.error().message;
    transport_ = tr.value().get();
    ASSERT_TRUE(tgt_->add_transport(std::move(tr).value()).ok());
    target::SubsystemOptions so;
    so.nqn = kNqn;
    so.allow_any_host = true;
    ASSERT_TRUE(tgt_->create_subsystem(so).ok());
    target::NamespaceOptions no;
    no.bdev_name = "Malloc0";
    ASSERT_TRUE(tgt_->add_namespace(kNqn, no).ok());
    ASSERT_TRUE(
        tgt_->add_listener(kNqn, target::ListenAddress{"RDMA", "IPv4", kTargetAddress, "4420"})
            .ok());
    bool settled = false;
    tgt_->when_settled([&] { settled = true; });
    for (int i = 0; i < 100000 && !settled; ++i) pump();
    ASSERT_TRUE(settled);
    ready_ = true;
  }

 public:
  // One turn of the world: the target's reactor, the NICs, then time moves on — by a little
  // when something happened, else to the next event (at most 10 us: timers fire on time).
  // Timed NICs are never made late: their next event bounds the step either way.
  void pump() {
    if (!fw_) return;
    bool work = fw_->step();
    work = cluster_.step_at(clock_.now()) || work;
    const uint64_t now = clock_.now();
    uint64_t next = now + (work ? o_.work_step_ns : 10'000);
    if (!work || o_.nic_profile) {
      next = std::min({next, cluster_.next_event_ns(), net_.next_event_ns()});
      next = std::max(next, now + 1);
    }
    clock_.set(next);
  }

  // Attaches the host's controller (trtype:rdma over this world).
  std::string attach(uint32_t admin_queue_size = 32, uint32_t io_queues = 4) {
    if (!ready_) return "the world was not built";
    auto trid = nvme::parse_transport_id(std::string("trtype:rdma adrfam:ipv4 traddr:") +
                                         kTargetAddress + " trsvcid:4420 subnqn:" + kNqn);
    if (!trid) return trid.error().message;
    RdmaHostOptions ho;
    ho.context = host_machine_.ctx.get();
    ho.cm_network = &net_;
    ho.registry = &host_machine_.registry;
    ho.qp = o_.host_qp;
    ho.faults = o_.host_faults;
    auto t = RdmaTransport::create(trid.value(), ho);
    if (!t) return t.error().message;
    nvme::ControllerOptions co;
    co.clock = &clock_;
    co.registry = &host_machine_.registry;
    co.wait_hook = [this] { pump(); };
    co.hostnqn = "nqn.2026-11.io.pollux:host";
    co.admin_queue_size = admin_queue_size;
    co.io_queues_requested = io_queues;
    auto c = nvme::Controller::attach(std::move(t).value(), co);
    if (!c) return c.error().message;
    ctrl_ = std::move(c).value();
    return "";
  }

  // Host DMA memory (the host NIC reaches it; the transport registers it as an MR).
  std::unique_ptr<env::DmaRegion> host_memory(std::size_t bytes) {
    auto m = env::DmaRegion::create(host_machine_.registry, bytes, env::DmaOptions{false});
    EXPECT_TRUE(m.ok());
    return m.ok() ? std::move(m).value() : nullptr;
  }

  // The sum of the target's poll groups' counters (one group here).
  RdmaTargetGroup& group() { return *transport_->group_of(*tgt_->groups().at(0)); }

  env::VirtualClock& clock() { return clock_; }
  emu::rnic::Cluster& cluster() { return cluster_; }
  net::SimNetwork& network() { return net_; }
  nvme::Controller& ctrl() { return *ctrl_; }
  std::unique_ptr<nvme::Controller>& ctrl_ptr() { return ctrl_; }
  RdmaTargetTransport& transport() { return *transport_; }
  target::Target& target() { return *tgt_; }
  event::Thread* target_thread() { return thread_; }
  Machine& host_machine() { return host_machine_; }
  Machine& target_machine() { return target_machine_; }

 private:
  WorldOptions o_;
  env::VirtualClock clock_{1'000'000'000};
  emu::rnic::Cluster cluster_;
  net::SimNetwork net_;
  Machine target_machine_, host_machine_;
  std::unique_ptr<event::Framework> fw_;
  event::Thread* thread_ = nullptr;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<target::Target> tgt_;
  RdmaTargetTransport* transport_ = nullptr;
  std::unique_ptr<nvme::Controller> ctrl_;
  bool ready_ = false;
};

}  // namespace pollux::fabric::rdma::testing
