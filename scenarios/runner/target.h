// Where a scenario's devices are. The engine (runner.cc) builds the same host stack on every
// target and runs the same workloads, fault timeline, final sweep and expectations:
// - the emulated target: Pollux's timed SSD emulator in this process, in virtual time (or
//   paced to the wall clock), every fault family (emulated_target.cc);
// - the qemu target: NVMe functions bound to vfio-pci, QEMU's controller in the HIL guest, in
//   real time; hot-plug goes through QEMU's monitor, the other faults are the host's
//   (pcie_target.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/memory_registry.h"
#include "driver/env/result.h"
#include "driver/event/framework.h"
#include "driver/metrics/exporter.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {

// What a device-side fault did.
struct InjectResult {
  std::string error;         // the device refused it: the run fails, naming the fault
  std::string detail;        // for the report
  bool power_lost = false;   // the oracle and the workloads must hear of it
  bool open_window = false;  // errors may follow for the rest of the run (bad blocks)
};

class Target {
 public:
  virtual ~Target() = default;

  virtual event::Framework& framework() = 0;
  virtual event::Thread& thread() = 0;  // the host's one thread
  virtual env::MemoryRegistry& registry() = 0;
  virtual const env::Clock& clock() = 0;  // 1 tick = 1 ns
  virtual uint32_t devices() const = 0;

  // A new driver controller for device d (the engine's tuning applied), owned by the caller.
  virtual Result<std::unique_ptr<nvme::Controller>> connect(uint32_t d) = 0;
  virtual bool present(uint32_t d) = 0;
  // Acknowledged writes survive a power loss (no volatile cache, or protected).
  virtual bool power_loss_protected(uint32_t d) const = 0;
  // Blocks read as zeroes until written (a fresh emulated drive); otherwise the engine zeroes
  // the workloads' span before the run.
  virtual bool starts_zeroed() const { return true; }
  // Every queue pair the host stack creates (true) and destroys (false).
  virtual void watch(nvme::Qpair* qp, bool created) = 0;

  // One turn of the host (and, emulated, of the devices' time).
  virtual void step() = 0;
  // Realtime or virtual from now on; "" or why this target cannot.
  virtual std::string set_realtime(bool on) = 0;
  // Called after every advance of time, also inside the driver's set-up waits. It must not
  // step the host.
  virtual void set_after_advance(std::function<void()> fn) = 0;
  // How long the end of a run waits for devices coming back (ns of the target's time).
  virtual uint64_t settle_ns() const = 0;

  // Hot-plug: "" or why it could not be asked for.
  virtual std::string hot_remove(uint32_t d) = 0;
  virtual std::string hot_insert(uint32_t d) = 0;
  // An insertion was asked for and the device is not there yet.
  virtual bool coming_back(uint32_t /*d*/) const { return false; }
  // Device-side faults (fatal, disable, power loss, ready delay, command rules, bad blocks,
  // clear). range_blocks: the workloads' span on the device; seed: this fault's draws.
  virtual InjectResult inject(uint32_t d, const FaultSpec& s, uint64_t range_blocks,
                              uint64_t seed) = 0;
  // State triggers: calls entered(device, state) when a device enters "controller_init" or
  // (if gc) "gc". Targets without states never call it.
  virtual void poll_states(bool gc, const std::function<void(uint32_t, const char*)>& entered) = 0;

  // Reporting: the device's state in a hang message, its counters in the outcome, its
  // metrics, and the run's trace (0 where there is none).
  virtual std::string describe(uint32_t d) = 0;
  virtual void outcome(uint32_t d, DeviceOutcome* out) = 0;
  virtual void collect_metrics(metrics::Builder& b, uint64_t now_ns) const = 0;
  virtual uint64_t trace_hash() const { return 0; }
  // A fabric's transport counters, in words (RDMA: the NICs' retransmissions, timeouts,
  // NAKs, errors; TCP: segments lost and sent again...), and of them the packets or segments
  // sent again (expect.min_retransmissions).
  virtual std::vector<std::pair<std::string, uint64_t>> fabric_counters() const { return {}; }
  virtual uint64_t retransmissions() const { return 0; }
  // A fabric target's core, in virtual time: its modelled busy time and the I/O commands it
  // completed so far (both 0 where none is modelled).
  virtual uint64_t target_busy_ns() const { return 0; }
  // Realtime, emulated devices: the most their model lagged behind the wall clock (0: none).
  virtual uint64_t realtime_max_lag_ns() const { return 0; }
  virtual uint64_t target_commands() const { return 0; }
  virtual uint32_t target_cores() const { return 0; }  // its reactors (busy: their sum)
  virtual std::vector<uint64_t> target_core_busy_ns() const { return {}; }  // each core's
  virtual uint64_t trace_records() const { return 0; }
  virtual uint64_t steps() const = 0;
  // What the run's set-up went through, for the report ("fabric: ..."), in words.
  virtual std::vector<std::string> notes() const { return {}; }
  // Problems found while running (a monitor that refused a request...), in words.
  virtual std::vector<std::string> errors() const { return {}; }
};

// Controller options the scenario's host section sets, applied by every target.
using TuneController = std::function<void(nvme::ControllerOptions&)>;

// The emulated target (every device of type "emulated"), or nullptr and *error.
std::unique_ptr<Target> make_emulated_target(const Scenario& sc, uint64_t seed,
                                             TuneController tune, std::string* error);
// The fabric target (a topology with fabric: the emulated devices behind an in-process NVMe-oF
// target, the host over a simulated network or the kernel's TCP on loopback), or nullptr and
// *error.
std::unique_ptr<Target> make_fabric_target(const Scenario& sc, uint64_t seed, TuneController tune,
                                           std::string* error);
// That target's Keep Alive granularity (Identify KAS, 100 ms units — the finest there is) and
// Command Quiesce Time, covering what it may still hold of a dead association: its keep-alive
// check's slack (1 ms at these KATOs) and a drive command a fault holds, which its driver times
// out, aborts, then resets the drive for (an I/O timeout each), plus the reset.
inline constexpr uint16_t kFabricTargetKas = 1;
uint16_t fabric_target_cqt_ms(const HostSpec& host);
// The longest its host holds a lost association's writes (nvme::Controller::
// write_fence_until(): KATO rounded up to KAS, plus CQT).
uint64_t fabric_write_fence_ns(const FabricSpec& f, const HostSpec& host);
// The qemu target (every device of type "qemu"), or nullptr and *error.
std::unique_ptr<Target> make_pcie_target(const Scenario& sc, TuneController tune,
                                         std::string* error);

}  // namespace pollux::scenarios
