// An NVMe controller over a Transport (transport.h; PCIe today: pcie.h over a vfio-user or
// vfio-pci PciDevice): the initialisation state machine, the admin queue, namespaces, I/O
// queue pairs, AERs, Abort, timeouts and the reset state machine — transport-neutral.
//
// Threading: I/O queue pairs have one owner each and take no lock. The admin queue is
// shared (allocating queues, aborts from timeout handlers on any thread), so admin
// submission and completion take the controller's admin mutex: they are off the hot path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/memory_registry.h"
#include "driver/env/mpmc_queue.h"
#include "driver/env/pci_device.h"
#include "driver/env/result.h"
#include "driver/nvme/dhchap_host.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/transport.h"
#include "spec/nvme.h"
#include "spec/nvme_fabrics.h"

namespace pollux::nvme {

// What the controller does when an I/O command of one of its queue pairs times out (the
// queue pair's timeout_us; the owner's timeout_cb is called first in every case).
// Escalation (SPDK's bdev_nvme does the same for a failed abort): with kAbort, an Abort that
// fails (an error status, or no room to queue it) requests a controller reset; one the device
// answers "not aborted" (CDW0 bit 0: it no longer holds the command, or will not stop it)
// leaves the command one more timeout to complete. With kAbort and kReset, a command still
// outstanding one timeout after its timeout (overdue: the Abort or the reset did not end it)
// requests a reset — so every command ends, whatever the device does with it.
enum class TimeoutAction {
  kNone,   // report only
  kAbort,  // report and send an Abort for the command (queued; sent by the admin poll)
  kReset,  // report and request a controller reset (one per stall; see poll_recovery())
};
const char* to_string(TimeoutAction a);

struct ControllerOptions {
  uint32_t admin_queue_size = 32;
  uint32_t io_queues_requested = 16;  // Set Features Number of Queues asks for this many
  uint32_t async_events = 4;          // AERs kept outstanding (capped by AERL+1)
  uint64_t admin_timeout_us = 5'000'000;
  // While a synchronous admin command waits, CSTS is read this often: a controller that
  // stopped (RDY dropped, fatal status, removed) fails the command at once.
  uint64_t admin_health_check_us = 1'000;
  env::MemoryRegistry* registry = nullptr;  // default: env::MemoryRegistry::global()
  const env::Clock* clock = nullptr;        // default: env::system_clock()
  // Called on every turn of a set-up path's wait for the device (CSTS changes, admin_sync,
  // shutdown); default: sched_yield(). A simulator that runs the device in this same thread
  // (lockstep virtual time) advances the device here.
  std::function<void()> wait_hook;
  uint32_t max_reset_failures = 3;  // consecutive failed resets before the controller is failed
  TimeoutAction timeout_action = TimeoutAction::kAbort;
  // TimeoutAction::kReset: the I/O thread never resets inline; it only records the request.
  // The admin poll (process_admin_completions() or poll_recovery()) acts on it: without this
  // hook it calls reset() right there, which is only correct when the thread polling the
  // admin queue also owns every I/O queue pair of the controller (single-threaded set-ups,
  // the virtual-time rig). With it, the admin poll calls it instead (once per request, admin
  // lock not held), and the owner quiesces the I/O queue pairs' threads (e.g. with
  // for_each_channel) and then calls reset() itself.
  std::function<void()> on_reset_request;
  // NVMe over Fabrics. The host NQN in every Connect ("": nqn.2014-08.org.nvmexpress:uuid:
  // followed by this process's host identifier, a random UUID) and the keep-alive timeout
  // asked for in the admin Connect (KATO, ms; a Keep Alive goes every half of it; 0: none).
  std::string hostnqn;
  uint32_t keep_alive_timeout_ms = 10'000;
  // NVMe in-band authentication (DH-HMAC-CHAP, fabrics only; dhchap.h): this host's secret
  // and, to make the controller prove itself too (bidirectional), the controller's, both as
  // "DHHC-1:hh:<base64>:" (nvme gen-dhchap-key's form; SPDK's dhchap_key / dhchap_ctrlr_key).
  // Every queue authenticates right after its Connect when the controller asks (Connect's
  // AUTHREQ) or a controller key is given; a failure fails the attach, or the reset, with the
  // reason. The hash functions and DH groups offered (spec::nvme_auth ids), in order of
  // preference; empty: all of them.
  std::string dhchap_key;
  std::string dhchap_ctrlr_key;
  std::vector<uint8_t> dhchap_digests;
  std::vector<uint8_t> dhchap_dhgroups;
};

struct ControllerStats {
  std::atomic<uint64_t> async_events{0};
  std::atomic<uint64_t> aborts_sent{0};
  std::atomic<uint64_t> aborts_failed{0};       // error status: escalated to a reset
  std::atomic<uint64_t> aborts_not_aborted{0};  // CDW0 bit 0 set: the command goes on
  std::atomic<uint64_t> io_timeouts{0};  // reported by I/O threads
  std::atomic<uint64_t> io_overdue{0};   // still outstanding a timeout after timing out
  std::atomic<uint64_t> resets{0};       // controller resets attempted
  std::atomic<uint64_t> reset_failures{0};
  std::atomic<uint64_t> reset_aborted_ios{0};  // I/Os the device held, ended retriable by resets
  std::atomic<uint64_t> reset_requests{0};     // resets requested by timeouts (kReset), one per stall
  std::atomic<uint64_t> admin_failed_on_removal{0};
  std::atomic<uint64_t> keep_alive_expired{0};  // fabrics: a Keep Alive unanswered for KATO
  std::atomic<uint64_t> authentications{0};      // fabrics: queues authenticated (DH-HMAC-CHAP)
  std::atomic<uint64_t> authentication_failures{0};
};

class Controller {
 public:
  enum class InitState {
    kConnect, kReadCap, kDisable, kWaitNotReady, kEnable, kWaitReady, kIdentify, kSetQueues,
    kIdentifyNamespaces, kArmAer, kReady, kFailed
  };
  static const char* to_string(InitState s);

  // Runs the initialisation state machine to the end. The transport is owned from here on.
  static Result<std::unique_ptr<Controller>> attach(std::unique_ptr<Transport> transport,
                                                    ControllerOptions options = {});
  // The PCIe transport over `device` (its DMA memory from options.registry).
  static Result<std::unique_ptr<Controller>> attach(std::unique_ptr<env::PciDevice> device,
                                                    ControllerOptions options = {});
  ~Controller();  // normal shutdown (CC.SHN), then disable; I/O queue pairs must be freed first
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  Transport& transport() { return *transport_; }
  // Multipath failover (Transport::add_path): another address of this subsystem. "" or why not.
  std::string add_path(const TransportId& trid) { return transport_->add_path(trid); }
  Transport::PathInfo paths() const { return transport_->paths(); }
  uint64_t cap() const { return cap_; }
  uint32_t version() const { return version_; }
  const sn::IdentifyController& identify() const { return cdata_; }
  const std::vector<uint32_t>& namespace_ids() const { return nsids_; }
  const Namespace* ns(uint32_t nsid) const;
  // After a Namespace Attribute Changed notice (set-up path, the admin thread): reads the
  // Changed Namespace List log (which re-arms the notice) and the active namespace list, and
  // identifies what is new or changed. A namespace that went (or changed) leaves
  // namespace_ids(), but a pointer ns() gave out stays valid for the controller's life (its
  // bdev may still be draining). Returns the active namespace ids, or the error.
  Result<std::vector<uint32_t>> refresh_namespaces();
  uint32_t io_queues_granted() const { return io_queues_granted_; }
  uint32_t max_transfer_bytes() const { return qctx_.max_transfer; }
  uint32_t max_queue_entries() const { return static_cast<uint32_t>(sn::cap::mqes(cap_)) + 1; }
  const ControllerStats& stats() const { return stats_; }

  // Creates the CQ then the SQ with admin commands (synchronous; any thread).
  Result<std::unique_ptr<Qpair>> alloc_io_qpair(const QpairOptions& options = {});
  // Fabrics: the queue pair at once, its connection and Connect command under way (SPDK's
  // asynchronous qpair connect); the owner advances them with poll_io_qpair_connect() from its
  // poller. Submissions wait in it until it is connected. Other transports: alloc_io_qpair(). Allowed during an asynchronous
  // reset (the reset connects it with the others, or its owner does once it resumes).
  Result<std::unique_ptr<Qpair>> alloc_io_qpair_async(const QpairOptions& options = {});
  // The owner thread: -EAGAIN while the connection is being made, 0 once connected (or when
  // nothing is under way: a reset took the queue over), else a negative errno — the queue
  // stays unconnected (connections_ok() false: the health check resets the controller) and
  // its path is left for the next attempt (multipath).
  int poll_io_qpair_connect(Qpair& qp);
  // Deletes the SQ then the CQ. Outstanding I/O is aborted by the device (SQ deletion).
  int free_io_qpair(std::unique_ptr<Qpair> qpair);

  // Admin commands, asynchronous. Any thread.
  int admin_submit(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                   void* ctx);
  // The admin poll: acts on a pending reset request first (poll_recovery()), sends queued
  // Aborts, reaps admin completions. On surprise removal every admin request (AERs
  // included) ends once with kRemovedStatus (DNR) and the call returns -ENODEV.
  int process_admin_completions();
  // Synchronous helper for set-up paths: submits and polls until done or admin_timeout_us.
  // The data buffer, if any, is bounced through the controller's DMA scratch area.
  Result<sn::CompletionEntry> admin_sync(const sn::SubmissionEntry& cmd, void* data = nullptr,
                                         uint32_t len = 0);
  // Controller reset, the recovery path (set-up path; returns when done): disable the
  // controller, end what it held with a retriable status (Aborted due to SQ deletion, DNR
  // clear: the device may or may not have executed it), enable it again with the same admin queue,
  // restore Number of Queues and the AERs, and recreate every I/O queue pair with its id and
  // memory; requests that had not reached the device are submitted afterwards. The owners of
  // the I/O queue pairs must not use them during the call (run it on their thread, or pause
  // them). 0, or a negative errno; after `max_reset_failures` failures in a row the
  // controller is failed (every queue pair's requests end with DNR set).
  int reset();
  // The same reset without blocking, for a fabrics transport (NVMe/TCP, NVMe/RDMA: queues
  // connect in steps, QueueTransport::start_connect/poll_connect), as SPDK's bdev_nvme resets
  // (disconnect, then spdk_nvme_ctrlr_reconnect_poll_async): reset_start() begins,
  // reset_poll() advances it — each property access, connection and Connect command a step —
  // and returns -EAGAIN while it is under way, then what reset() returns. A thread that runs
  // other controllers' I/O keeps running it meanwhile. The owners of the I/O queue pairs keep
  // them paused until it ends, as for reset() — which, on these transports, is reset_start()
  // and reset_poll() until done. Other transports (PCIe): reset_start() runs the reset whole.
  int reset_start();
  int reset_poll();
  bool reset_in_progress() const { return reset_active_.load(std::memory_order_acquire); }
  // Fabrics: until this tick of clock(), a write of an association a reset left behind may
  // still take effect at the target — its connection may be cut off (a partition) with the
  // command on its way, or the target may still hold it — so sending it again before then
  // could let the old copy land over a newer write. From the reset's start: the keep-alive
  // timeout the target applies (KATO rounded up to its KAS), after which it ends the
  // association, plus its Command Quiesce Time (Identify CQT, NVMe 2.1). 0 until a fabrics
  // reset; any thread.
  uint64_t write_fence_until() const { return write_fence_until_.load(std::memory_order_acquire); }
  const env::Clock& clock() const { return clock_; }
  // Acts on a reset requested by a timeout (TimeoutAction::kReset): calls on_reset_request,
  // or reset() when there is no such hook (see ControllerOptions::on_reset_request for the
  // threading contract). 0 when nothing was pending or a reset succeeded (or was handed to
  // the hook), else reset()'s negative errno. Cheap when nothing is pending (one atomic load).
  int poll_recovery();
  // A timeout asked for a reset that has not run yet.
  bool reset_pending() const { return recovery_.load(std::memory_order_acquire) != kRecoveryIdle; }
  TimeoutAction timeout_action() const { return timeout_action_.load(std::memory_order_relaxed); }
  // Changes the policy after attach (any thread; timeouts detected afterwards follow it).
  void set_timeout_action(TimeoutAction a) { timeout_action_.store(a, std::memory_order_relaxed); }
  // Replaces ControllerOptions::on_reset_request after attach (set-up path: before any I/O
  // queue pair can time out). A layer that owns the queue pairs' threads (bdev_nvme) installs
  // its own quiesce-then-reset here.
  void set_reset_request_hook(std::function<void()> fn) { options_.on_reset_request = std::move(fn); }
  // Reads CSTS (an MMIO read: not for the hot path): false when the controller reports fatal
  // status, is no longer ready, reads all ones (removed), or its admin queue stopped (a timed
  // out admin command) — reasons to reset it.
  bool healthy();
  bool failed() const { return state_ == InitState::kFailed; }
  // Replaces ControllerOptions::max_reset_failures (set-up path): a layer that decides itself
  // when to give the controller up (bdev_nvme's ctrlr_loss_timeout) lifts the limit.
  void set_max_reset_failures(uint32_t n) { options_.max_reset_failures = n; }

  // Asks the device to abort command `cid` of queue `sqid` (asynchronous, best effort).
  int abort(uint16_t sqid, uint16_t cid);
  // From an I/O thread (a timeout): never waits for the admin lock; the Abort is queued and
  // sent by the next process_admin_completions().
  void request_abort(uint16_t sqid, uint16_t cid);

  // Called from process_admin_completions() with the admin lock held: it must not call
  // admin functions of this controller itself (defer them, e.g. with a message).
  using AsyncEventFn = void (*)(void* ctx, const sn::CompletionEntry& cpl);
  void set_async_event_callback(AsyncEventFn fn, void* ctx);

 private:
  struct TimeoutHook {
    Controller* ctrl;
    TimeoutFn user_cb;
    void* user_ctx;
  };
  // One queue's connection and Connect command, step by step (controller_connect.cc).
  struct QueueConnect {
    enum class Stage : uint8_t { kTransport, kCommand, kDone, kFailed };
    Qpair* qp = nullptr;
    Stage stage = Stage::kTransport;
    bool answered = false;
    sn::CompletionEntry cpl{};
    uint64_t deadline = 0;
    spec::nvmf::ConnectData data{};
    std::string error;
  };
  // The asynchronous reset's state (controller_connect.cc).
  struct ResetRun;
  Controller(std::unique_ptr<Transport> transport, ControllerOptions options);
  // One step of initialisation; returns false when it must be called again.
  bool process_init();
  bool wait_csts(uint32_t mask, uint32_t value);
  std::string csts_problem();
  static std::string csts_problem_of(uint32_t csts);
  // Registers: the transport's (PCIe MMIO) or, on fabrics, properties through the admin queue.
  // A controller that cannot be reached reads all ones.
  uint32_t reg32(uint32_t offset);
  uint64_t reg64(uint32_t offset);
  void set_reg32(uint32_t offset, uint32_t value);
  void set_reg64(uint32_t offset, uint64_t value);
  Result<uint64_t> property_get(uint32_t offset, uint8_t attrib);
  Result<sn::CompletionEntry> property_set(uint32_t offset, uint8_t attrib, uint64_t value);
  // Fabrics: the Connect command on `qp` (qid 0: the admin queue, which learns the CNTLID),
  // then in-band authentication when the controller asks for it or a controller key is given.
  std::string connect_queue(Qpair& qp);
  // One step of c (-EAGAIN: call again; 0: connected; else a negative errno, c.error why).
  int step_connect(QueueConnect& c);
  int send_connect(QueueConnect& c);
  std::string finish_connect(QueueConnect& c);
  // The asynchronous reset: one step under the admin lock; -EAGAIN, 0, or the errno to fail
  // with (init_error_ says why).
  int reset_step(ResetRun& r);
  int reset_command(ResetRun& r, const sn::SubmissionEntry& cmd);
  int finish_reset_run(int rc);
  void drop_from_reset(const Qpair* qp);  // admin lock held
  int reset_blocking();  // reset() for a transport without asynchronous connects
  // One DH-HMAC-CHAP transaction on `qp` (auth_mu_ taken here). "" or what failed.
  std::string authenticate_queue(Qpair& qp);
  // One command on `qp`, ahead of anything waiting there (Qpair::submit_first), polled to its
  // end (set-up paths; `qp` must not be polled elsewhere).
  Result<sn::CompletionEntry> run_on(Qpair& qp, const sn::SubmissionEntry& cmd, void* data,
                                     uint32_t len);
  void keep_alive();  // admin lock held
  bool connections_ok();
  void quiesce_for_removal();  // the admin poller, when the device is wanted back
  void wait_turn();
  void enable_controller();  // the admin queue's registers, then CC.EN = 1
  void disable_after_failed_init();
  void stop_if_enabled();  // CC.EN = 0, then wait (CAP.TO) for CSTS.RDY = 0
  void arm_cap_timeout();  // deadline_ = now + CAP.TO (and half a second of slack)
  std::string start_io_queue(Qpair& qp);
  Result<std::unique_ptr<Qpair>> make_queue(uint16_t qid, const QpairOptions& options,
                                            bool connect = true);
  Result<std::unique_ptr<Qpair>> new_io_qpair(const QpairOptions& options, bool connect);
  Result<sn::CompletionEntry> set_number_of_queues(uint32_t pairs);
  std::string enable_async_events();
  int recreate_io_queues();
  int fail_reset(int rc);
  void fence_writes();  // see write_fence_until()
  bool identify_namespaces();
  // Identify Namespace of nsid into *ns (block size etc. filled); false: not usable.
  Result<bool> identify_namespace(uint32_t nsid, Namespace* ns);
  void arm_async_event();
  static void on_async_event(void* ctx, const sn::CompletionEntry& cpl);
  static void on_io_timeout(void* ctx, Qpair& qp, uint16_t cid);
  static void on_io_overdue(void* ctx, Qpair& qp, uint16_t cid);
  static void on_abort_done(void* ctx, const sn::CompletionEntry& cpl);
  void send_aborts();  // admin lock held
  void shutdown();
  void request_reset();  // any thread (an I/O thread's timeout); lock-free

  // Recovery request state: a timeout moves idle → requested (only the first one of a stall
  // succeeds); the admin poll moves requested → notified (hook) or runs reset(); reset()
  // returns it to idle when it starts.
  static constexpr uint8_t kRecoveryIdle = 0, kRecoveryRequested = 1, kRecoveryNotified = 2;

  std::unique_ptr<Transport> transport_;
  ControllerOptions options_;
  env::MemoryRegistry& registry_;
  const env::Clock& clock_;
  QpairContext qctx_;
  bool sgl_supported_ = false;  // Identify SGLS
  InitState state_ = InitState::kConnect;
  InitState failed_at_ = InitState::kReadCap;  // the step initialisation failed in
  bool init_enabled_ = false;  // initialisation (not a reset) set CC.EN
  std::string init_error_;
  uint64_t deadline_ = 0;
  uint64_t cap_ = 0;
  uint16_t cntlid_ = 0xffff;        // fabrics: what the admin Connect returned
  uint64_t next_keep_alive_ = 0;    // fabrics: clock tick of the next Keep Alive
  std::atomic<uint64_t> write_fence_until_{0};
  bool keep_alive_pending_ = false;  // one is out, sent at keep_alive_sent_
  uint64_t keep_alive_sent_ = 0;
  std::string hostnqn_;
  uint32_t version_ = 0;
  // In-band authentication: the parsed keys (none: not configured), the message buffer (DMA
  // memory: an RDMA queue sends from registered memory) and the next transaction id; queues
  // of other threads connect concurrently, so one transaction at a time.
  std::optional<dhchap::HostCredentials> auth_;
  std::mutex auth_mu_;
  std::unique_ptr<env::DmaRegion> auth_buf_;
  uint16_t auth_tid_ = 0;

  std::mutex admin_mu_;
  std::unique_ptr<Qpair> admin_;
  std::unique_ptr<env::DmaRegion> scratch_;  // bounce area for admin data (identify, logs)

  sn::IdentifyController cdata_{};
  std::vector<uint32_t> nsids_;
  std::map<uint32_t, std::unique_ptr<Namespace>> namespaces_;  // active, usable
  std::vector<std::unique_ptr<Namespace>> retired_;  // went or changed: ns() pointers stay valid
  uint32_t io_queues_granted_ = 0;
  std::vector<bool> qid_used_;
  std::vector<Qpair*> io_qpairs_;  // allocated I/O queue pairs (recreated by reset())
  uint32_t reset_failures_in_a_row_ = 0;
  // An admin command timed out or the controller stopped under one: admin use is refused
  // and healthy() is false until a reset has disabled the controller.
  std::atomic<bool> admin_stuck_{false};
  std::map<uint16_t, std::unique_ptr<TimeoutHook>> timeout_hooks_;
  env::MpmcQueue<uint32_t> abort_requests_{1024};  // (sqid << 16) | cid
  // Aborts in flight, at most Identify ACL + 1 (the controller's limit); under admin_mu_. A
  // completion from before the last reset (its epoch) is the reset ending it: ignored.
  struct AbortSlot {
    Controller* ctrl = nullptr;
    uint32_t request = 0;
    uint64_t epoch = 0;
    bool busy = false;
  };
  std::vector<AbortSlot> abort_slots_;
  uint64_t abort_epoch_ = 0;
  AsyncEventFn aer_fn_ = nullptr;
  void* aer_ctx_ = nullptr;
  std::atomic<uint8_t> recovery_{kRecoveryIdle};
  // The asynchronous reset under way (under admin_mu_), and I/O queue pairs whose owners
  // connect them (alloc_io_qpair_async; under admin_mu_, stepped by the owner).
  std::unique_ptr<ResetRun> reset_run_;
  std::atomic<bool> reset_active_{false};
  int reset_result_ = 0;  // reset_start() of a transport without asynchronous connects
  std::set<const Qpair*> io_connects_;
  // Each queue's connect state, for the queue's life: an outstanding Connect's callback writes
  // into it, so it outlives every attempt — freed only after the queue pair has ended what
  // it held (free_io_qpair), the admin queue's with the controller. Under admin_mu_.
  std::map<const Qpair*, std::unique_ptr<QueueConnect>> connect_states_;
  QueueConnect admin_connect_;
  QueueConnect& connect_state(Qpair* qp);  // admin lock held; created on first use
  std::atomic<TimeoutAction> timeout_action_;
  bool admin_removal_handled_ = false;  // under admin_mu_
  ControllerStats stats_;
};

}  // namespace pollux::nvme
