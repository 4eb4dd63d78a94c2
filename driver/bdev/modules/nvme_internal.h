// bdev_nvme's internals, shared by its files: nvme_io.cc (the bdev backend: submission,
// completion, retries, aborts; the per-thread channels), nvme_ctrlr.cc (controller reset and
// recovery, the admin poller, namespaces, teardown) and nvme.cc (the public API, hot-plug).
// Not for use outside the module.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "driver/bdev/modules/nvme.h"
#include "driver/env/dma_memory.h"
#include "driver/env/vfio_pci.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/emulator_status.h"
#include "driver/nvme/keyring.h"
#include "driver/nvme/status.h"

namespace pollux::bdev::nvme_module {

namespace sn = spec::nvme;

// What outstanding I/O is failed with when the device is gone: Host Pathing Error, DNR.
constexpr uint16_t kRemovedStatus = sn::status::make(sn::sct::kPath, 0x70, /*dnr=*/true);
constexpr uint32_t kMaxWriteZeroesBlocks = 65536;
constexpr uint64_t kMaxDsmBlocks = 0xffffffffull;

class NvmeCtrlr;
class NvmeBackend;
struct NvmeChannel;

// Commands whose late copy could overwrite newer data (a passthrough command may be one).
inline bool changes_data(IoType t) {
  return t == IoType::kWrite || t == IoType::kWriteZeroes || t == IoType::kUnmap ||
         t == IoType::kCompareAndWrite || t == IoType::kNvmePassthru;
}

// Per-I/O state, in BdevIo::module_ctx() (not DMA memory).
struct IoCtx {
  BdevIo* io;
  NvmeBackend* be;
  NvmeChannel* ch;
  uint32_t attempts;  // retries so far of the current command
  uint64_t lba;       // next command's range (multi-command types)
  uint64_t left;
  uint64_t done_bytes;  // compare: bytes of the buffer already compared
  int dsm_slot;
  IoCtx* next;
  uint16_t deferred_status;  // a completion that arrived during a controller reset
  // A write a fabrics reset ended is sent again no earlier than this tick of the controller's
  // clock (nvme::Controller::write_fence_until()); 0: at once.
  uint64_t not_before;
};
static_assert(sizeof(IoCtx) <= BdevIo::kMaxModuleCtx);

struct NvmeChannel {
  NvmeCtrlr* ctrlr = nullptr;
  std::unique_ptr<nvme::Qpair> qp;
  event::Poller* poller = nullptr;
  std::unique_ptr<env::DmaRegion> dsm;  // dsm_slots ranges, one per unmap command in flight
  std::vector<uint32_t> dsm_free;
  IoCtx* retry_head = nullptr;  // commands to resubmit from the poller
  IoCtx* retry_tail = nullptr;
  uint32_t retry_count = 0;
  bool destroying = false;
  // Controller reset: while paused the channel's thread leaves the queue pair alone; new I/O
  // is parked here, completions the reset delivers (on the admin thread) are deferred here.
  bool paused = false;
  // NVMe/TCP: the queue pair's connection is being made (alloc_io_qpair_async): the poller
  // advances it; I/O waits in the queue pair meanwhile.
  bool connecting = false;
  IoCtx* parked = nullptr;
  IoCtx* deferred = nullptr;

  sn::nvm::DsmRange* range(int slot) {
    return static_cast<sn::nvm::DsmRange*>(dsm->data()) + slot;
  }
  void push_retry(IoCtx* c) {
    c->next = nullptr;
    if (retry_tail) retry_tail->next = c; else retry_head = c;
    retry_tail = c;
    ++retry_count;
  }
  IoCtx* pop_retry() {
    IoCtx* c = retry_head;
    if (c) {
      retry_head = c->next;
      if (!retry_head) retry_tail = nullptr;
      --retry_count;
    }
    return c;
  }
  void push_retry_front(IoCtx* c) {
    c->next = retry_head;
    retry_head = c;
    if (!retry_tail) retry_tail = c;
    ++retry_count;
  }
  bool idle() const { return (qp == nullptr || qp->outstanding() == 0) && retry_head == nullptr; }
  // Takes c out of the retry list or the parked list (an abort). false: in neither.
  bool take_waiting(IoCtx* c) {
    IoCtx* prev = nullptr;
    for (IoCtx* it = retry_head; it != nullptr; prev = it, it = it->next) {
      if (it != c) continue;
      (prev ? prev->next : retry_head) = c->next;
      if (retry_tail == c) retry_tail = prev;
      --retry_count;
      return true;
    }
    for (IoCtx** at = &parked; *at != nullptr; at = &(*at)->next) {
      if (*at != c) continue;
      *at = c->next;
      return true;
    }
    return false;
  }
};

// The module's registry of controllers.
inline std::mutex g_mu;
inline std::vector<NvmeCtrlr*> g_ctrlrs;
inline std::map<const Manager*, NvmeBdevOptions> g_defaults;  // nvme_set_default_options

class NvmeCtrlr {
 public:
  NvmeCtrlr(Manager& mgr, std::unique_ptr<nvme::Controller> c, const NvmeBdevOptions& o)
      : mgr_(mgr), fw_(mgr.framework()), ctrlr_(std::move(c)), opts_(o) {
    if (opts_.registry == nullptr) opts_.registry = &env::MemoryRegistry::global();
    if (opts_.dsm_slots == 0) opts_.dsm_slots = 1;
    // With a loss timeout, this layer decides when the controller is given up.
    if (opts_.ctrlr_loss_timeout_us != 0) ctrlr_->set_max_reset_failures(UINT32_MAX);
  }

  Manager& mgr() { return mgr_; }
  const std::string& name() const { return opts_.name; }
  nvme::Controller& ctrlr() { return *ctrlr_; }
  // When a write a reset just ended may be sent again (IoCtx::not_before); 0: at once.
  uint64_t write_fence() const {
    const uint64_t f = ctrlr_->write_fence_until();
    return f > ctrlr_->clock().now() ? f : 0;
  }
  const NvmeBdevOptions& opts() const { return opts_; }
  bool gone() const {
    return removed_.load(std::memory_order_acquire) || ctrlr_->transport().gone();
  }
  void count_retry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Lost for longer than fast_io_fail_timeout_us: I/O fails at once rather than wait.
  bool fast_failing() const { return fast_fail_.load(std::memory_order_acquire); }
  void count_fast_failed() { fast_failed_.fetch_add(1, std::memory_order_relaxed); }
  // Controller reset (see nvme.h, "Recovery"); done(ctx, rc) on the calling thread.
  void reset_controller(ResetDoneFn done, void* ctx);
  bool resetting() const {
    std::lock_guard lock(mu_);
    return resetting_;
  }
  void count_removed() { removed_failures_.fetch_add(1, std::memory_order_relaxed); }
  NvmeControllerStats stats() const {
    auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
    const nvme::ControllerStats& d = ctrlr_->stats();
    return {get(retries_),         get(removed_failures_), get(channels_),
            get(resets_),          get(reset_failures_),   get(d.io_timeouts),
            get(d.aborts_sent),    get(d.reset_aborted_ios), get(d.async_events),
            get(fast_failed_),     lost_since_.load(std::memory_order_relaxed) != 0};
  }
  std::vector<std::string> bdev_names() const {
    std::lock_guard lock(mu_);
    return bdev_names_;
  }
  bool detaching() const {
    std::lock_guard lock(mu_);
    return tearing_down_;
  }

  Result<std::vector<std::string>> start(event::Thread* thread);
  void bdev_destructed();
  // On the admin thread: stop polling, unregister the bdevs, free once all are gone.
  void teardown(bool removed);
  void add_detach_waiter(event::Thread* t, event::MsgFn fn, void* ctx) {
    std::lock_guard lock(mu_);
    waiters_.push_back({t, fn, ctx});
  }
  event::Thread* admin_thread() const { return admin_thread_; }
  // Keeps this alive across a message in flight (detach's teardown request).
  void hold() {
    std::lock_guard lock(mu_);
    ++holds_;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      --holds_;
    }
    maybe_free();
  }

  static int channel_create(void* io_device, void* ctx);
  static void channel_destroy(void* io_device, void* ctx);
  static event::PollStatus channel_poll(void* arg);
  static event::PollStatus admin_poll(void* arg);

 private:
  // A Namespace Attribute Changed notice (the driver's AEN callback, admin lock held): the
  // admin poll rescans after the completions (it may not send admin commands from there).
  static void on_async_event(void* ctx, const sn::CompletionEntry& cpl);
  // On the admin thread: the namespaces the controller reports now get bdevs, those it no
  // longer reports lose theirs (a hot removal: every descriptor hears kRemove).
  void rescan_namespaces();
  Result<std::string> register_namespace(uint32_t nsid);  // "<name>n<nsid>"
  std::atomic<bool> ns_changed_{false};
  struct Waiter {
    event::Thread* t;
    event::MsgFn fn;
    void* ctx;
  };
  void maybe_free();
  struct ResetWaiter {
    event::Thread* t;
    ResetDoneFn fn;
    void* ctx;
    int rc;
  };
  static void pause_step(event::ChannelIter& it);
  static void resume_step(event::ChannelIter& it);
  void run_reset();  // on the admin thread, every channel paused
  // An asynchronous reset (NVMe/TCP) advances from this poller of the admin thread.
  static event::PollStatus reset_poll(void* arg);
  void reset_done(int rc);  // the controller's reset ended: resume the channels
  void finish_reset();

  Manager& mgr_;
  event::Framework& fw_;
  std::unique_ptr<nvme::Controller> ctrlr_;
  NvmeBdevOptions opts_;
  event::Thread* admin_thread_ = nullptr;
  event::Poller* admin_poller_ = nullptr;
  event::Poller* reset_poller_ = nullptr;  // admin thread
  std::atomic<bool> removed_{false};
  std::atomic<uint64_t> retries_{0}, removed_failures_{0}, channels_{0};
  std::atomic<uint64_t> resets_{0}, reset_failures_{0};
  std::atomic<bool> failed_{false};
  // The last reset failed without failing the controller: its queue pairs may still be down
  // (and CSTS may look healthy), so the admin poller tries again.
  std::atomic<bool> reset_again_{false};
  int reset_rc_ = 0;
  // Recovery of a lost controller (admin thread): when it was lost (clock ticks; 0: it is
  // not), when the next reset may start, and whether I/O now fails fast.
  std::atomic<uint64_t> lost_since_{0};
  uint64_t next_attempt_ = 0;
  std::atomic<bool> fast_fail_{false};
  std::atomic<uint64_t> fast_failed_{0};
  void recover(uint64_t now);   // admin thread: the controller is unhealthy
  void start_fast_fail();       // fail what waits, on every channel
  static void fast_fail_step(event::ChannelIter& it);
  std::vector<ResetWaiter> reset_waiters_;  // under mu_
  bool resetting_ = false;                  // under mu_
  // From the start of a reset until nvme::Controller::reset() has returned: a channel created
  // meanwhile starts paused (the pause walk may already have passed its thread).
  bool pausing_ = false;  // under mu_
  // Serialises queue-pair allocation and freeing (channel threads) with the synchronous
  // nvme::Controller::reset() (admin thread), which walks every allocated queue pair. The
  // asynchronous reset is not held under it: the controller's admin lock keeps its list of
  // queue pairs, and a queue pair freed meanwhile leaves it.
  std::mutex reset_mu_;

  mutable std::mutex mu_;
  std::vector<std::string> bdev_names_;
  uint32_t bdevs_alive_ = 0;
  bool tearing_down_ = false;
  bool freeing_ = false;
  uint32_t holds_ = 0;
  std::vector<Waiter> waiters_;
};

// ------------------------------------------------------------------------ backend ----

class NvmeBackend final : public Backend {
 public:
  NvmeBackend(NvmeCtrlr* c, const nvme::Namespace* ns) : c_(c), ns_(ns) {
    const uint16_t oncs = c->ctrlr().identify().oncs;
    for (IoType t : {IoType::kRead, IoType::kWrite, IoType::kFlush, IoType::kReset,
                     IoType::kNvmePassthru})
      supported_[static_cast<std::size_t>(t)] = true;
    supported_[static_cast<std::size_t>(IoType::kWriteZeroes)] = oncs & sn::oncs::kWriteZeroes;
    supported_[static_cast<std::size_t>(IoType::kUnmap)] = oncs & sn::oncs::kDatasetManagement;
    supported_[static_cast<std::size_t>(IoType::kCompare)] = oncs & sn::oncs::kCompare;
    // Compare-and-write needs a fused Compare+Write pair placed adjacently in the SQ; the
    // driver has no fused submission, and the emulator offers no fused operations (FUSES=0).
    supported_[static_cast<std::size_t>(IoType::kCompareAndWrite)] = false;
  }
  bool supports(IoType t) const override { return supported_[static_cast<std::size_t>(t)]; }
  void* io_device() override { return c_; }
  std::size_t io_ctx_size() const override { return sizeof(IoCtx); }
  void destruct() override { c_->bdev_destructed(); }
  void submit(BdevIo& io, void* chctx) override;
  // What waits to be issued (a retry, a command parked by a reset) ends now; a command the
  // device holds is not retried when it fails (handle()).
  void abort(BdevIo& io, void* chctx) override {
    auto* c = static_cast<IoCtx*>(io.module_ctx());
    auto* ch = static_cast<NvmeChannel*>(chctx);
    if (ch->take_waiting(c)) return finish(c, IoStatus::kAborted);
    // Waiting in the queue pair for an SQ slot: ended there (handle() then finishes it).
    // While a reset owns the queue pair, the resume does it (resume_step).
    if (!ch->paused) cancel_aborted(*ch);
  }
  // Ends the given-up I/O waiting in ch's queue pair for an SQ slot (never sent).
  static void cancel_aborted(NvmeChannel& ch) {
    ch.qp->cancel_waiting(
        on_done, [](void* ctx) { return static_cast<IoCtx*>(ctx)->io->abort_requested(); },
        sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
  }

  const nvme::Namespace& ns() const { return *ns_; }
  NvmeCtrlr* ctrlr() const { return c_; }

  // Issues the current command of c. 0, or the queue pair's negative errno.
  int issue(IoCtx* c);
  static void on_done(void* arg, const sn::CompletionEntry& cpl);
  // A command of c completed with `status` (phase bit clear): retry, next piece or finish.
  static void handle(IoCtx* c, uint16_t status);
  static void finish(IoCtx* c, IoStatus s, uint16_t nvme_status = 0);

 private:
  NvmeCtrlr* c_;
  const nvme::Namespace* ns_;
  bool supported_[kIoTypes] = {};
};

// The controller named `name` on mgr, or nullptr (g_mu held).
NvmeCtrlr* find_ctrlr(Manager& mgr, const std::string& name);

}  // namespace pollux::bdev::nvme_module
