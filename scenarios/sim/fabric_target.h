// A Pollux NVMe-oF target as another machine in the lockstep: the target's core
// (fabric/target) and its TCP transport (fabric/tcp) — or its RDMA transport (fabric/rdma) on
// an emulated NIC of the world (rdma_fabric.h), the connection manager's exchange on the
// SimNetwork — on a step-mode event framework of its own, serving bdevs of its own bdev
// manager (malloc, or bdev_nvme over the timed emulator's SSDs). The lockstep steps it as part of
// "the world" (Lockstep::add_world): never charged to the host, never stepped by the host.
//
// The target's core takes CPU time (FabricTargetOptions::costs, the framework's CPU clock): in
// virtual time what its iteration did costs what the model says, and the core runs its next
// iteration only once that time has passed (next_event_ns() tells the lockstep when), so one
// core carries as many commands per second as the model allows and a queue builds behind it;
// a command's own cost is not added to its latency (its response leaves in the step that
// finished it). In realtime the TSC measures the target's pollers, as the host's.
//
// Two frameworks on one OS thread: each reactor iteration sets Thread::current() for its
// thread and restores the previous one (CurrentThreadScope), so a host poller that waits in a
// set-up path (a reconnect's ICReq) may step the target and come back to its own thread.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/env/clock.h"
#include "driver/env/memory_registry.h"
#include "driver/event/framework.h"
#include "driver/rdma/verbs.h"
#include "fabric/net/socket.h"
#include "fabric/rdma/target_transport.h"
#include "fabric/target/target.h"
#include "fabric/tcp/target_transport.h"
#include "scenarios/sim/cpu_cost.h"

namespace pollux::sim {

struct FabricSubsystem {
  std::string nqn;
  std::vector<std::string> bdevs;  // namespaces 1, 2, ... in order
};

struct FabricTargetOptions {
  std::vector<std::string> addresses = {"10.0.0.1"};  // a listener on each (paths)
  std::string port = "4420";
  // Every subsystem's KAS and CQT (fabric::target::SubsystemOptions).
  uint16_t kas = 10;
  uint16_t cqt_ms = 0;
  env::MemoryRegistry* registry = nullptr;  // the transport's buffers (nullptr: the global one)
  // The target cores' CPU time in virtual time; nullopt: their work takes no time (one core
  // carries any load).
  std::optional<TargetCostModel> costs;
  // Target cores: a reactor and a poll group on each (connections spread round-robin, as
  // SPDK's target does); each core's CPU time is its own.
  uint32_t cores = 1;
  fabric::tcp::TcpTargetOptions tcp = [] {
    fabric::tcp::TcpTargetOptions o;
    o.num_shared_buffers = 128;
    return o;
  }();
  // "TCP", or "RDMA": the RDMA transport on `rdma_context` (the target machine's NIC), its CM
  // listening on the network.
  std::string trtype = "TCP";
  rdma::Context* rdma_context = nullptr;
  fabric::rdma::RdmaTargetOptions rdma = [] {
    fabric::rdma::RdmaTargetOptions o;
    o.num_shared_buffers = 128;
    // The device's largest CQ: connections a host left behind (its NIC reset, its QP failed)
    // keep their share until their CM stream says goodbye.
    o.num_cqe = 32768;
    return o;
  }();
};

class FabricTarget {
 public:
  // clock: the lockstep's VirtualClock (1 tick = 1 ns). The bdev manager exists from here on;
  // the NVMe-oF target starts with start().
  static std::unique_ptr<FabricTarget> create(const env::Clock& clock, fabric::net::Network& net,
                                              FabricTargetOptions options, std::string* error);
  ~FabricTarget();

  event::Framework& framework() { return *fw_; }
  event::Thread& thread() { return *thread_; }
  bdev::Manager& bdevs() { return *mgr_; }
  bool running() const { return tgt_ != nullptr; }
  fabric::target::Target& target() { return *tgt_; }
  const FabricTargetOptions& options() const { return o_; }

  // One iteration of the target's reactor (the lockstep's world step), unless its core is
  // still busy with the last one's work (false then); a stop that finished lets go of the
  // target's core here, outside any poller.
  bool step();
  // Until the core is free again after an iteration that did work; UINT64_MAX: not busy.
  uint64_t next_event_ns() const;
  // When the cores that ran in the last step() made their doorbell stores: the latest end of
  // their iterations (0: none ran, or realtime).
  uint64_t stores_at_ns() const { return stores_at_; }
  // Realtime: the TSC measures the target's CPU time and nothing waits for it.
  void set_realtime(bool on);
  // For the target's bdev_nvme (NvmeBdevOptions::qpair_observer): the drives' queue pairs,
  // whose work the cost model's `drive` part charges.
  std::function<void(nvme::Qpair*, bool, const std::string&)> qpair_observer();
  // The CPU clock (ns) of the core whose reactor runs now, and the cores' modelled busy time
  // so far (all of them; busy_ns(i): core i's).
  uint64_t cpu_now_ns() const;
  uint32_t cores() const { return static_cast<uint32_t>(cores_.size()); }
  uint64_t busy_ns() const;
  uint64_t busy_ns(uint32_t core) const { return cores_[core].busy_ns; }
  uint64_t commands_completed() const;  // by every poll group, since the target (re)started
  // Builds the target: transport, subsystems (any host), namespaces, the listener; the
  // changes reach the poll groups as the world steps. "" or the error.
  std::string start_async(const std::vector<FabricSubsystem>& subsystems);
  // The same, and `turn` advances the world until every poll group has the changes.
  std::string start(const std::vector<FabricSubsystem>& subsystems,
                    const std::function<void()>& turn);
  // Ends every association and the listener, as a target process that exits (its bdevs
  // stay: the drives outlive the process); done at a later step. start() again: a restart.
  void begin_stop();
  bool stopping() const { return stopping_; }
  // begin_stop() and `turn` until it is done.
  void stop(const std::function<void()>& turn);
  // Stops and lets go of the bdevs (before the devices behind them go). false: the target
  // could not stop (I/O held by a drive); it is then left in memory, not torn down.
  bool shutdown(const std::function<void()>& turn);

 private:
  FabricTarget(const env::Clock& clock, fabric::net::Network& net, FabricTargetOptions o)
      : clock_(clock), net_(net), o_(std::move(o)) {}
  uint64_t commands_of(size_t core) const;  // by that core's poll group
  uint64_t uncharged_ns(size_t core, bool* work) const;

  const env::Clock& clock_;

  fabric::net::Network& net_;
  FabricTargetOptions o_;
  std::unique_ptr<event::Framework> fw_;
  event::Thread* thread_ = nullptr;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<fabric::target::Target> tgt_;
  bool stopping_ = false, stopped_ = false, settled_ = false;
  // CPU time, per core.
  HostCostModel drive_costs_ = o_.costs ? o_.costs->drive : HostCostModel{};
  struct Core {
    explicit Core(const HostCostModel& costs) : drives(costs) {}
    QpairCharges drives;  // the drives' queue pairs its threads made
    uint64_t commands_charged = 0;
    uint64_t busy_until = 0;      // the core's CPU clock at its last iteration's end
    bool busy_with_work = false;  // that iteration did work: the lockstep stops at busy_until
    uint64_t busy_ns = 0;
  };
  std::deque<Core> cores_;  // never moved: their queue pairs count into them
  size_t current_ = 0;  // the core whose reactor runs (the framework's CPU clock is its)
  uint64_t stores_at_ = 0;
  bool realtime_ = false;
  WallNs wall_;
  struct ReadCpu {
    const FabricTarget* t;
    uint64_t operator()() const { return t->cpu_now_ns(); }
  };
  FnClock<ReadCpu> cpu_clock_{ReadCpu{this}};
};

}  // namespace pollux::sim
