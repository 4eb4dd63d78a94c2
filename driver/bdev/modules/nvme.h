// bdev_nvme: an NVMe controller attached through the Pollux driver, one bdev per active
// namespace ("<name>n<nsid>", as SPDK names them).
//
// The controller wrapper is the io_device: each thread that uses one of its bdevs gets a
// channel holding its own I/O queue pair and an active poller reaping its completions
// (created with the channel on that thread, unregistered and the queue pair freed when the
// channel goes). A timed admin poller on the thread that attached the controller reaps admin
// completions and probes for removal; when the device is gone, every channel fails what it
// has outstanding with kRemoved and the bdevs are unregistered (descriptors get kRemove).
//
// I/O mapping: read/write → Read/Write (vectored, split by the bdev layer at MDTS), write
// zeroes → Write Zeroes (≤ 65536 blocks per command, issued one after another), unmap →
// Dataset Management/deallocate (ranges in a per-channel DMA area), flush → Flush, compare →
// Compare (a miscompare completes kMiscompare), NVMe passthru → the caller's command with the
// bdev's NSID, reset → a controller reset (below). Compare-and-write is not offered (see
// supports()).
//
// Errors: an NVMe status without DNR is retried up to retry_count times; DNR never is. A
// queue pair out of requests completes kNoMemory (the bdev layer retries).
//
// Recovery: a controller reset pauses every channel on its own thread (new I/O is parked,
// the queue pair is not touched), runs nvme::Controller::reset() on the admin thread (what
// the device held ends with a retriable status: those completions are deferred, not run on
// the foreign thread), then resumes every channel on its thread: deferred completions go
// through the retry policy, parked I/O is issued. Nothing queued during a reset is lost.
// Resets come from a bdev reset, from nvme_reset_controller(), from an I/O timeout
// (timeout action kReset: the driver's reset request hook), and from the admin poller's
// health check (CSTS.CFS, or RDY dropped while enabled); a reset that failed is tried again
// by the admin poller. One runs at a time (later requests join it). Queue pairs are not
// created or freed while nvme::Controller::reset() walks them (a channel created during a
// reset starts paused). After max_reset_failures failed resets the controller is failed:
// what it held ends with the driver's DNR status, new I/O fails at once with kFailed.
// Fabrics: a channel created while its controller's association is lost (or whose I/O
// queue cannot connect) is created anyway, as SPDK's bdev_nvme does, with its queue pair
// unconnected: I/O waits in it and the reset that recovers the controller connects it (a
// failed controller fails what it holds). Nothing blocks the thread on a connect that cannot
// succeed, and a bdev stays open through the loss.
//
// Hot-plug: nvme_hotplug_start() runs SPDK's hot-plug poller: it attaches devices that
// appear in the given slots (e.g. a re-inserted drive once its removed controller is freed).
//
// Data buffers must be DMA memory visible to the controller (driver/env DmaRegion/pools of
// the registry the controller's device follows); the bdev layer bounces only misaligned ones.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/env/memory_registry.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/transport_id.h"

namespace pollux::bdev {

struct NvmeBdevOptions {
  std::string name;                              // controller name; bdevs are "<name>n<nsid>"
  uint32_t retry_count = 3;                      // retries of a retriable (non-DNR) NVMe status
  uint64_t admin_poll_period_us = 10'000;        // admin completions + removal probe
  nvme::QpairOptions qpair{.prefer_sgl = true};  // each channel's queue pair
  uint32_t dsm_slots = 256;                      // per channel: unmaps in flight at once
  // Where per-channel DMA memory (DSM ranges) comes from: the registry the controller's
  // device follows. nullptr: env::MemoryRegistry::global().
  env::MemoryRegistry* registry = nullptr;
  // Told when a channel creates (true) or frees (false) its queue pair — e.g. a virtual-time
  // simulator that charges host cost per queue pair (and has it count its work into a group:
  // Qpair::count_work_into). Called on the channel's thread.
  std::function<void(nvme::Qpair*, bool created, const std::string& controller)>
      qpair_observer;
  // Recovery of a lost controller (SPDK's bdev_nvme knobs; made for fabrics, where a lost
  // connection may come back). From the moment it is lost (its health check fails, a reset
  // fails): a reset (reconnect) is tried every reconnect_delay_us (0: at every admin poll);
  // after fast_io_fail_timeout_us (0: never) I/O fails at once instead of waiting for it; after
  // ctrlr_loss_timeout_us the controller is given up and deleted, its bdevs with it
  // (kRetryForever: never). ctrlr_loss_timeout_us 0 keeps the driver's rule: the controller
  // fails after max_reset_failures resets in a row, and stays.
  static constexpr uint64_t kRetryForever = ~0ull;
  uint64_t reconnect_delay_us = 0;
  uint64_t ctrlr_loss_timeout_us = 0;
  uint64_t fast_io_fail_timeout_us = 0;
};

// Counters of one controller (any thread may read them).
struct NvmeControllerStats {
  uint64_t retries = 0;           // NVMe commands resubmitted after a retriable status
  uint64_t removed_failures = 0;  // I/O failed with kRemoved
  uint64_t channels = 0;          // live channels (= I/O queue pairs)
  uint64_t resets = 0;            // controller resets completed by the module
  uint64_t reset_failures = 0;    // controller resets that failed
  // From the driver's controller (nvme::ControllerStats):
  uint64_t io_timeouts = 0;        // I/O commands that outlived their queue pair's timeout
  uint64_t aborts_sent = 0;        // Abort commands sent for timed-out commands
  uint64_t reset_aborted_ios = 0;  // I/Os the device held, ended retriable by resets
  uint64_t async_events = 0;       // Asynchronous Event Request completions
  uint64_t fast_failed = 0;        // I/O failed at once while the controller was lost
  bool lost = false;               // unhealthy now, recovery under way
  // Multipath, failover (nvme_add_path):
  uint32_t paths = 1;        // addresses of the subsystem this controller may use
  uint32_t active_path = 0;  // the one its queues use, in the order added
  uint64_t failovers = 0;    // times the active path changed
};

// Attaches an already initialised controller. Must run on a framework thread: the admin
// poller runs there. Returns the names of the bdevs created (one per active namespace).
// Errors: empty or duplicate controller name, a bdev name already taken, no thread.
Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr,
                                                        std::unique_ptr<nvme::Controller> ctrlr,
                                                        const NvmeBdevOptions& options);
// Connects by transport ID (nvme::connect), then attaches as above.
Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr, const nvme::TransportId& trid,
                                                        const NvmeBdevOptions& options,
                                                        nvme::ControllerOptions ctrlr_options = {});

// Multipath, failover (SPDK: bdev_nvme_attach_controller with the name of an attached
// controller and multipath "failover"): `trid` becomes another path to the same subsystem.
// The controller keeps using its active path; when a reset (reconnect) fails there, the next
// path is taken for the next attempt — with the recovery knobs above, I/O waits through the
// failover instead of failing. A fabrics transport only; same subnqn. Any thread. Returns the
// controller's bdev names. Errors: unknown controller, a transport without paths, another
// subsystem, a path already there.
Result<std::vector<std::string>> nvme_add_path(Manager& mgr, const std::string& name,
                                               const nvme::TransportId& trid);

// The options controllers attached by address (below) start from, per manager (like SPDK's
// bdev_nvme_set_options): e.g. a program with metrics on sets a qpair_observer and
// qpair.track_latency here before applying a JSON configuration. The name is ignored; the
// setting lasts until set again (a new manager at the same address would inherit it).
void nvme_set_default_options(Manager& mgr, const NvmeBdevOptions& options);
NvmeBdevOptions nvme_default_options(Manager& mgr);

// The body of the JSON-RPC/config method "bdev_nvme_attach_controller" {name, trtype,
// traddr, trsvcid, subnqn, hdgst, ddgst}: builds the transport ID ("trtype:<trtype>
// traddr:<traddr> ...", empty fields left out) and attaches with the manager's default
// options.
struct NvmeAddress {
  std::string trtype, traddr, trsvcid, subnqn;
  bool hdgst = false, ddgst = false;
  // SPDK's "multipath": "" or "disable" (a second controller of this name is an error),
  // "failover" (it becomes another path: nvme_add_path); "multipath" (active-active) is not
  // offered.
  std::string multipath;
  // NVMe in-band authentication (SPDK's names): the host NQN the controller knows the keys by,
  // and the keys — a keyring key's name, or the secret itself ("DHHC-1:...").
  std::string hostnqn, dhchap_key, dhchap_ctrlr_key;
};
// `tune` adjusts the options after the defaults (e.g. the recovery knobs of the method).
Result<std::vector<std::string>> nvme_attach_controller_by_address(
    Manager& mgr, const std::string& name, const NvmeAddress& address,
    const std::function<void(NvmeBdevOptions&)>& tune = nullptr);

// Unregisters the controller's bdevs (descriptors get kRemove); once every descriptor has
// closed and every channel is gone the controller is shut down and freed, and done(ctx) runs
// on the calling thread. Any framework thread. -ENODEV if unknown (or already detaching).
int nvme_detach_controller(Manager& mgr, const std::string& name, event::MsgFn done = nullptr,
                           void* ctx = nullptr);

// Names of the attached controllers (those not yet freed) of this manager.
std::vector<std::string> nvme_controller_names(Manager& mgr);
// -ENODEV if unknown.
Result<NvmeControllerStats> nvme_controller_stats(Manager& mgr, const std::string& name);

// A Pollux emulator behind controller `name`: its realtime status (log page C0h,
// nvme::emulator_status), asked synchronously on the controller's admin thread (the one that
// attached it; an end-of-run path) with the controller's address; nullopt when it is no
// emulator. Errors: unknown controller (-ENODEV), another thread (-EINVAL).
struct NvmeEmulatorStatus {
  std::string address;
  spec::nvme::PolluxEmulatorStatus status;
};
Result<std::optional<NvmeEmulatorStatus>> nvme_emulator_status(Manager& mgr,
                                                               const std::string& name);

// Resets the controller (see "Recovery" above). Any framework thread; done(ctx, rc) runs on
// the calling thread when the reset has finished (rc 0, or the driver's negative errno; a
// reset requested while one runs joins it). -ENODEV if unknown or being detached.
using ResetDoneFn = void (*)(void* ctx, int rc);
int nvme_reset_controller(Manager& mgr, const std::string& name, ResetDoneFn done = nullptr,
                          void* ctx = nullptr);

// The hot-plug poller: a slot is a place a device may appear (a PCI address, a vfio-user
// socket, an emulated device). Every period_us, each slot whose controller is not attached
// (never was, or its removed controller has been freed) and whose device is present() is
// connect()ed and attached with `base` options named slot.name. A failed connect is retried
// at the next period. Runs on the calling framework thread; one per manager.
struct NvmeHotplugSlot {
  std::string name;
  std::function<bool()> present;
  std::function<Result<std::unique_ptr<nvme::Controller>>()> connect;
};
struct NvmeHotplugStats {
  uint64_t attaches = 0, connect_failures = 0, polls = 0;
};
int nvme_hotplug_start(Manager& mgr, std::vector<NvmeHotplugSlot> slots, uint64_t period_us,
                       const NvmeBdevOptions& base);
// A slot for a transport address: pcie (present while the PCI function is bound to vfio-pci)
// or vfio-user (present while the socket exists); connect() is nvme::connect.
Result<NvmeHotplugSlot> nvme_hotplug_slot(const std::string& name, const std::string& trtype,
                                          const std::string& traddr);
void nvme_hotplug_stop(Manager& mgr);  // the thread that started it; idempotent
// Counters of the running hot-plug poller (zeros once stopped). Any thread.
NvmeHotplugStats nvme_hotplug_stats(Manager& mgr);

// The retry policy, exposed for tests: true if a completion status (CQE DW3[31:16]) should
// be resubmitted after `attempts` retries so far.
bool nvme_should_retry(uint16_t status, uint32_t attempts, uint32_t retry_count);

}  // namespace pollux::bdev
