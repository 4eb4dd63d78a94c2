#include "driver/bdev/modules/nvme.h"

#include "driver/nvme/keyring.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_pci.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/emulator_status.h"
#include "driver/nvme/status.h"

namespace pollux::bdev {
namespace {

namespace sn = spec::nvme;

// What outstanding I/O is failed with when the device is gone: Host Pathing Error, DNR.
constexpr uint16_t kRemovedStatus = sn::status::make(sn::sct::kPath, 0x70, /*dnr=*/true);
constexpr uint32_t kMaxWriteZeroesBlocks = 65536;
constexpr uint64_t kMaxDsmBlocks = 0xffffffffull;

class NvmeCtrlr;
class NvmeBackend;
struct NvmeChannel;

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
std::mutex g_mu;
std::vector<NvmeCtrlr*> g_ctrlrs;
std::map<const Manager*, NvmeBdevOptions> g_defaults;  // nvme_set_default_options

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
  void finish_reset();

  Manager& mgr_;
  event::Framework& fw_;
  std::unique_ptr<nvme::Controller> ctrlr_;
  NvmeBdevOptions opts_;
  event::Thread* admin_thread_ = nullptr;
  event::Poller* admin_poller_ = nullptr;
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
  // nvme::Controller::reset() (admin thread), which walks every allocated queue pair.
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
    if (static_cast<NvmeChannel*>(chctx)->take_waiting(c)) finish(c, IoStatus::kAborted);
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

void NvmeBackend::finish(IoCtx* c, IoStatus s, uint16_t nvme_status) {
  if (c->dsm_slot >= 0) {
    c->ch->dsm_free.push_back(static_cast<uint32_t>(c->dsm_slot));
    c->dsm_slot = -1;
  }
  if (s == IoStatus::kRemoved) c->be->ctrlr()->count_removed();
  if (s == IoStatus::kNvmeError) {
    c->io->complete_nvme(nvme_status);
  } else {
    c->io->complete(s);
  }
}

int NvmeBackend::issue(IoCtx* c) {
  BdevIo& io = *c->io;
  nvme::Qpair& qp = *c->ch->qp;
  const nvme::Namespace& ns = *ns_;
  switch (io.type()) {
    case IoType::kRead:
      return qp.readv(ns, io.iovs(), io.iovcnt(), io.offset_blocks(),
                      static_cast<uint32_t>(io.num_blocks()), on_done, c);
    case IoType::kWrite:
      return qp.writev(ns, io.iovs(), io.iovcnt(), io.offset_blocks(),
                       static_cast<uint32_t>(io.num_blocks()), on_done, c);
    case IoType::kFlush: return qp.flush(ns, on_done, c);
    case IoType::kWriteZeroes:
      return qp.write_zeroes(ns, c->lba,
                             static_cast<uint32_t>(std::min<uint64_t>(c->left, kMaxWriteZeroesBlocks)),
                             on_done, c);
    case IoType::kUnmap: {
      if (c->dsm_slot < 0) {
        if (c->ch->dsm_free.empty()) return -ENOMEM;
        c->dsm_slot = static_cast<int>(c->ch->dsm_free.back());
        c->ch->dsm_free.pop_back();
      }
      sn::nvm::DsmRange* r = c->ch->range(c->dsm_slot);
      std::memset(r, 0, sizeof *r);
      r->length = static_cast<uint32_t>(std::min<uint64_t>(c->left, kMaxDsmBlocks));
      r->slba = c->lba;
      return qp.deallocate(ns, r, 1, on_done, c);
    }
    case IoType::kCompare: {
      // One buffer (Manager::compare); issued in pieces of at most MDTS, one after another.
      if (io.iovcnt() != 1) return -EINVAL;
      const uint64_t max = ns.max_io_blocks ? ns.max_io_blocks : 65536;
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>({c->left, max, 65536}));
      return qp.compare(ns, static_cast<uint8_t*>(io.iovs()[0].iov_base) + c->done_bytes, c->lba,
                        n, on_done, c);
    }
    case IoType::kNvmePassthru: {
      sn::SubmissionEntry cmd;
      std::memcpy(&cmd, io.nvme_cmd(), sizeof cmd);
      cmd.nsid = ns.id;
      void* buf = io.iovcnt() > 0 ? io.iovs()[0].iov_base : nullptr;
      const uint32_t len = io.iovcnt() > 0 ? static_cast<uint32_t>(io.iovs()[0].iov_len) : 0;
      if (io.iovcnt() > 1) return -EINVAL;
      return qp.submit_raw(cmd, buf, len, on_done, c);
    }
    default: return -EINVAL;
  }
}

void NvmeBackend::submit(BdevIo& io, void* chctx) {
  auto* ch = static_cast<NvmeChannel*>(chctx);
  if (io.type() == IoType::kReset) {
    // The bdev layer has quiesced this bdev's channels; reset the controller under all of its
    // bdevs' channels.
    c_->reset_controller(
        [](void* arg, int rc) {
          auto* r = static_cast<BdevIo*>(arg);
          auto& be = static_cast<NvmeBackend&>(r->bdev().backend());
          r->complete(rc == 0 ? IoStatus::kSuccess
                      : be.ctrlr()->gone() ? IoStatus::kRemoved : IoStatus::kFailed);
        },
        &io);
    return;
  }
  auto* c = new (io.module_ctx()) IoCtx{&io, this, ch, 0, io.offset_blocks(), io.num_blocks(),
                                        0, -1, nullptr, 0};
  if (c_->gone()) {
    finish(c, IoStatus::kRemoved);
    return;
  }
  if (c_->failed()) {
    finish(c, IoStatus::kFailed);
    return;
  }
  if (c_->fast_failing()) [[unlikely]] {
    c_->count_fast_failed();
    finish(c, IoStatus::kFailed);
    return;
  }
  if (ch->paused) {  // a controller reset is under way: issued when the channel resumes
    c->next = ch->parked;
    ch->parked = c;
    return;
  }
  const int rc = issue(c);
  if (rc == 0) return;
  if (c->dsm_slot >= 0) {
    ch->dsm_free.push_back(static_cast<uint32_t>(c->dsm_slot));
    c->dsm_slot = -1;
  }
  finish(c, rc == -ENOMEM ? IoStatus::kNoMemory
                          : rc == -ENODEV ? IoStatus::kRemoved : IoStatus::kFailed);
}

void NvmeBackend::on_done(void* arg, const sn::CompletionEntry& cpl) {
  auto* c = static_cast<IoCtx*>(arg);
  const uint16_t status = static_cast<uint16_t>(cpl.status & 0xfffe);
  if (c->ch->paused) {
    // Delivered by a controller reset on the admin thread: the channel's own thread acts on
    // it when it resumes (the bdev I/O must complete on its thread).
    c->deferred_status = status;
    c->next = c->ch->deferred;
    c->ch->deferred = c;
    return;
  }
  handle(c, status);
}

void NvmeBackend::handle(IoCtx* c, uint16_t status) {
  NvmeChannel* ch = c->ch;
  if (status != 0) {
    const nvme::Status st = nvme::Status::from_cqe(status);
    if (ch->ctrlr->gone()) return finish(c, IoStatus::kRemoved);
    if (ch->destroying) return finish(c, IoStatus::kAborted);
    if (ch->ctrlr->fast_failing()) {
      ch->ctrlr->count_fast_failed();
      return finish(c, IoStatus::kFailed);
    }
    if (st.sct == sn::sct::kMediaError && st.sc == sn::sc_media::kCompareFailure)
      return finish(c, IoStatus::kMiscompare);
    // Its submitter gave it up: issuing it again could land after newer writes (a fabric
    // target whose host connection went, and whose host has re-sent the command elsewhere).
    if (c->io->abort_requested()) return finish(c, IoStatus::kAborted);
    if (nvme_should_retry(status, c->attempts, ch->ctrlr->opts().retry_count)) {
      ++c->attempts;
      ch->ctrlr->count_retry();
      ch->push_retry(c);  // resubmitted by the channel's poller
      return;
    }
    return finish(c, IoStatus::kNvmeError, status);
  }
  // Success of one command: multi-command types move on to their next piece.
  BdevIo& io = *c->io;
  uint64_t did = 0;
  switch (io.type()) {
    case IoType::kWriteZeroes: did = std::min<uint64_t>(c->left, kMaxWriteZeroesBlocks); break;
    case IoType::kUnmap: did = std::min<uint64_t>(c->left, kMaxDsmBlocks); break;
    case IoType::kCompare: {
      const nvme::Namespace& ns = c->be->ns();
      const uint64_t max = ns.max_io_blocks ? ns.max_io_blocks : 65536;
      did = std::min<uint64_t>({c->left, max, 65536});
      c->done_bytes += did * ns.block_size;
      break;
    }
    default: return finish(c, IoStatus::kSuccess);
  }
  c->lba += did;
  c->left -= did;
  if (c->left == 0) return finish(c, IoStatus::kSuccess);
  if (io.abort_requested()) return finish(c, IoStatus::kAborted);
  c->attempts = 0;
  const int rc = c->be->issue(c);
  if (rc == -ENOMEM) {
    ch->push_retry(c);
  } else if (rc != 0) {
    finish(c, rc == -ENODEV ? IoStatus::kRemoved : IoStatus::kFailed);
  }
}

}  // namespace

// ------------------------------------------------------------------- retry policy ----

bool nvme_should_retry(uint16_t status, uint32_t attempts, uint32_t retry_count) {
  const nvme::Status st = nvme::Status::from_cqe(status);
  if (!st.retriable() || attempts >= retry_count) return false;
  // A miscompare is an answer, not a failure.
  return !(st.sct == sn::sct::kMediaError && st.sc == sn::sc_media::kCompareFailure);
}

namespace {

// ------------------------------------------------------------------------- reset ----

void NvmeCtrlr::reset_controller(ResetDoneFn done, void* ctx) {
  event::Thread* me = event::Thread::current();
  {
    std::lock_guard lock(mu_);
    if (tearing_down_ || removed_.load(std::memory_order_acquire)) {
      if (done) done(ctx, -ENODEV);
      return;
    }
    reset_waiters_.push_back({me, done, ctx, 0});
    if (resetting_) return;  // joins the one under way
    resetting_ = true;
    pausing_ = true;
    ++holds_;  // not freed while the reset's messages are in flight
  }
  fw_.for_each_channel(this, pause_step, this, [](void* arg, int) {
    auto* self = static_cast<NvmeCtrlr*>(arg);
    auto run = [](void* a) { static_cast<NvmeCtrlr*>(a)->run_reset(); };
    if (self->admin_thread_ == event::Thread::current() ||
        self->admin_thread_->send_msg(run, self) != 0) {
      run(self);
    }
  });
}

void NvmeCtrlr::pause_step(event::ChannelIter& it) {
  static_cast<NvmeChannel*>(it.channel()->ctx())->paused = true;
  it.next(0);
}

void NvmeCtrlr::run_reset() {
  int rc;
  {
    std::lock_guard reset_lock(reset_mu_);
    rc = ctrlr_->transport().gone() ? -ENODEV : ctrlr_->reset();
    std::lock_guard lock(mu_);
    pausing_ = false;
  }
  reset_rc_ = rc;
  (rc == 0 ? resets_ : reset_failures_).fetch_add(1, std::memory_order_relaxed);
  if (ctrlr_->failed()) failed_.store(true, std::memory_order_release);
  reset_again_.store(rc != 0 && !ctrlr_->failed() && rc != -ENODEV, std::memory_order_release);
  if (rc == 0) {  // recovered: I/O waits again rather than failing
    lost_since_.store(0, std::memory_order_relaxed);
    fast_fail_.store(false, std::memory_order_release);
  }
  fw_.for_each_channel(this, resume_step, this,
                       [](void* arg, int) { static_cast<NvmeCtrlr*>(arg)->finish_reset(); });
}

void NvmeCtrlr::resume_step(event::ChannelIter& it) {
  auto* ch = static_cast<NvmeChannel*>(it.channel()->ctx());
  ch->paused = false;
  // Oldest first (the lists were built by pushing at the head).
  auto reverse = [](IoCtx* l) {
    IoCtx* r = nullptr;
    while (l) {
      IoCtx* n = l->next;
      l->next = r;
      r = l;
      l = n;
    }
    return r;
  };
  IoCtx* deferred = reverse(ch->deferred);
  IoCtx* parked = reverse(ch->parked);
  ch->deferred = ch->parked = nullptr;
  while (IoCtx* c = deferred) {
    deferred = c->next;
    NvmeBackend::handle(c, c->deferred_status);
  }
  while (IoCtx* c = parked) {
    parked = c->next;
    if (ch->ctrlr->gone()) {
      NvmeBackend::finish(c, IoStatus::kRemoved);
    } else if (ch->ctrlr->failed() || ch->ctrlr->fast_failing()) {
      NvmeBackend::finish(c, IoStatus::kFailed);
    } else if (const int rc = c->be->issue(c); rc == -ENOMEM) {
      ch->push_retry(c);
    } else if (rc != 0) {
      NvmeBackend::finish(c, rc == -ENODEV ? IoStatus::kRemoved : IoStatus::kFailed);
    }
  }
  it.next(0);
}

void NvmeCtrlr::finish_reset() {
  std::vector<ResetWaiter> waiters;
  {
    std::lock_guard lock(mu_);
    waiters.swap(reset_waiters_);
    resetting_ = false;
  }
  for (ResetWaiter& w : waiters) {
    if (w.fn == nullptr) continue;
    w.rc = reset_rc_;
    if (w.t == nullptr || w.t == event::Thread::current()) {
      w.fn(w.ctx, w.rc);
      continue;
    }
    auto* m = new ResetWaiter(w);
    if (w.t->send_msg([](void* a) {
          std::unique_ptr<ResetWaiter> x(static_cast<ResetWaiter*>(a));
          x->fn(x->ctx, x->rc);
        }, m) != 0) {
      m->fn(m->ctx, m->rc);
      delete m;
    }
  }
  release();
}

// The controller is unhealthy (admin thread): reset it now or after reconnect_delay_us; once
// lost for fast_io_fail_timeout_us, I/O fails at once; after ctrlr_loss_timeout_us it is
// given up — deleted with its bdevs, as SPDK does — unless it came back meanwhile.
void NvmeCtrlr::recover(uint64_t now) {
  const env::Clock& clock = fw_.clock();
  uint64_t since = lost_since_.load(std::memory_order_relaxed);
  if (since == 0) {
    since = now;
    lost_since_.store(now, std::memory_order_relaxed);
    next_attempt_ = now;
  }
  const uint64_t lost_for = now - since;
  if (opts_.ctrlr_loss_timeout_us != 0 && opts_.ctrlr_loss_timeout_us != NvmeBdevOptions::kRetryForever &&
      lost_for >= clock.us_to_ticks(opts_.ctrlr_loss_timeout_us)) {
    failed_.store(true, std::memory_order_release);  // what is parked or retried fails
    // What the lost connections hold would wait forever (no reset will end it now): fail it
    // on each channel's thread, as fast-fail does.
    if (!fast_failing()) start_fast_fail();
    teardown(/*removed=*/false);
    return;
  }
  if (opts_.fast_io_fail_timeout_us != 0 && !fast_failing() &&
      lost_for >= clock.us_to_ticks(opts_.fast_io_fail_timeout_us)) {
    start_fast_fail();
  }
  if (now < next_attempt_) return;
  next_attempt_ = now + clock.us_to_ticks(opts_.reconnect_delay_us);
  reset_controller(nullptr, nullptr);
}

// What waits on the channels (in the queue pairs of a lost controller, in the retry lists)
// fails now, each on its channel's thread; new I/O fails in submit() from here on.
void NvmeCtrlr::start_fast_fail() {
  fast_fail_.store(true, std::memory_order_release);
  hold();
  fw_.for_each_channel(this, fast_fail_step, this,
                       [](void* arg, int) { static_cast<NvmeCtrlr*>(arg)->release(); });
}

void NvmeCtrlr::fast_fail_step(event::ChannelIter& it) {
  auto* ch = static_cast<NvmeChannel*>(it.channel()->ctx());
  if (!ch->paused && ch->qp != nullptr) {
    // A lost connection holds these forever: the reset that reconnects ends them anyway.
    ch->qp->fail_all(sn::status::make(sn::sct::kPath, 0x71 /* controller pathing error */, true));
  }
  while (IoCtx* c = ch->pop_retry()) {
    ch->ctrlr->count_fast_failed();
    NvmeBackend::finish(c, IoStatus::kFailed);
  }
  it.next(0);
}

// ----------------------------------------------------------------------- channels ----

int NvmeCtrlr::channel_create(void* io_device, void* ctx) {
  auto* self = static_cast<NvmeCtrlr*>(io_device);
  if (self->gone()) return -ENODEV;
  const std::size_t dsm_bytes =
      std::max<std::size_t>(4096, std::size_t{self->opts_.dsm_slots} * sizeof(sn::nvm::DsmRange));
  auto dsm = env::DmaRegion::create(*self->opts_.registry, dsm_bytes);
  if (!dsm) return dsm.error().code;
  bool paused;
  Result<std::unique_ptr<nvme::Qpair>> qp = make_error(ENODEV, "");
  {
    // Not while nvme::Controller::reset() runs; during the reset's pause phase the new
    // channel starts paused (the resume walk will find it: it runs after this).
    std::lock_guard reset_lock(self->reset_mu_);
    {
      std::lock_guard lock(self->mu_);
      paused = self->pausing_;
    }
    // A fabrics controller whose association is lost (or that is being recovered) cannot
    // connect a queue now: connecting would only block this thread (a refused connect, or
    // the whole connect timeout) and fail. As SPDK's bdev_nvme does, the channel is created
    // anyway with its queue pair unconnected: I/O waits in it, and the reset that recovers the
    // controller connects it with the others (or fails what it holds, as for any queue pair).
    nvme::Controller& c = *self->ctrlr_;
    const bool fabrics = c.transport().fabrics();
    const bool lost = fabrics && (self->lost_since_.load(std::memory_order_relaxed) != 0 ||
                                  self->reset_again_.load(std::memory_order_acquire) ||
                                  !c.healthy());
    if (!lost) qp = c.alloc_io_qpair(self->opts_.qpair);
    if (fabrics && !self->failed() && !c.failed() &&
        (lost || (!qp && (qp.error().code == EIO || qp.error().code == ECONNREFUSED)))) {
      qp = c.alloc_disconnected_io_qpair(self->opts_.qpair);
    }
  }
  if (!qp) return qp.error().code;
  auto* ch = new (ctx) NvmeChannel;
  ch->ctrlr = self;
  ch->paused = paused;
  ch->qp = std::move(qp).value();
  ch->dsm = std::move(dsm).value();
  ch->dsm_free.reserve(self->opts_.dsm_slots);
  for (uint32_t i = self->opts_.dsm_slots; i-- > 0;) ch->dsm_free.push_back(i);
  ch->poller = event::Thread::current()->register_poller(channel_poll, ch, 0,
                                                         "bdev_nvme_" + self->name());
  if (self->opts_.qpair_observer) self->opts_.qpair_observer(ch->qp.get(), true, self->name());
  self->channels_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

void NvmeCtrlr::channel_destroy(void* io_device, void* ctx) {
  auto* self = static_cast<NvmeCtrlr*>(io_device);
  auto* ch = static_cast<NvmeChannel*>(ctx);
  ch->destroying = true;
  event::Thread::current()->unregister_poller(ch->poller);
  // Nothing should be left (the bdev channel above is gone); be safe if something is.
  while (IoCtx* c = ch->pop_retry()) NvmeBackend::finish(c, IoStatus::kAborted);
  while (IoCtx* c = ch->parked) {
    ch->parked = c->next;
    NvmeBackend::finish(c, IoStatus::kAborted);
  }
  if (self->opts_.qpair_observer) self->opts_.qpair_observer(ch->qp.get(), false, self->name());
  {
    std::lock_guard reset_lock(self->reset_mu_);  // not while a reset walks the queue pairs
    self->ctrlr_->free_io_qpair(std::move(ch->qp));
  }
  // Completions deferred while paused, and any the queue deletion ended (nothing, normally).
  while (IoCtx* c = ch->deferred) {
    ch->deferred = c->next;
    NvmeBackend::finish(c, IoStatus::kAborted);
  }
  ch->~NvmeChannel();
  self->channels_.fetch_sub(1, std::memory_order_relaxed);
}

event::PollStatus NvmeCtrlr::channel_poll(void* arg) {
  auto* ch = static_cast<NvmeChannel*>(arg);
  if (ch->paused) return event::PollStatus::kIdle;  // a controller reset owns the queue pair
  int n = ch->qp->process_completions();
  if (n < 0) {  // the device is gone: fail what it held, and what waits to be retried
    n = static_cast<int>(ch->qp->fail_all(kRemovedStatus));
    while (IoCtx* c = ch->pop_retry()) {
      NvmeBackend::finish(c, IoStatus::kRemoved);
      ++n;
    }
  } else if (ch->retry_head != nullptr) {
    // Resubmit what completed with a retriable status (or found the queue pair full).
    uint32_t count = ch->retry_count;
    while (count-- > 0) {
      IoCtx* c = ch->pop_retry();
      if (c == nullptr) break;
      if (c->io->abort_requested()) {
        NvmeBackend::finish(c, IoStatus::kAborted);
        ++n;
        continue;
      }
      const int rc = c->be->issue(c);
      if (rc == -ENOMEM) {
        ch->push_retry_front(c);
        break;
      }
      if (rc != 0) NvmeBackend::finish(c, rc == -ENODEV ? IoStatus::kRemoved : IoStatus::kFailed);
      ++n;
    }
  }
  return n > 0 ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

// -------------------------------------------------------------- admin and teardown ----

event::PollStatus NvmeCtrlr::admin_poll(void* arg) {
  auto* self = static_cast<NvmeCtrlr*>(arg);
  const int rc = self->ctrlr_->process_admin_completions();
  if (rc < 0) {
    self->teardown(/*removed=*/true);
    return event::PollStatus::kBusy;
  }
  // Health check (PCIe: one MMIO read of CSTS; fabrics: the connections): fatal status, RDY
  // dropped while enabled, a connection lost -> reset. A reset that failed without failing
  // the controller is tried again, as the recovery options say.
  if (!self->failed() && !self->resetting() &&
      (self->reset_again_.load(std::memory_order_acquire) || !self->ctrlr_->healthy())) {
    if (self->ctrlr_->transport().gone()) {
      self->teardown(/*removed=*/true);
    } else {
      self->recover(self->fw_.clock().now());
    }
    return event::PollStatus::kBusy;
  }
  if (!self->resetting() && self->lost_since_.load(std::memory_order_relaxed) != 0) {
    self->lost_since_.store(0, std::memory_order_relaxed);  // sound again without a reset
    self->fast_fail_.store(false, std::memory_order_release);
  }
  if (!self->resetting() && self->ns_changed_.exchange(false, std::memory_order_acq_rel)) {
    self->rescan_namespaces();
    return event::PollStatus::kBusy;
  }
  return rc > 0 ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

Result<std::vector<std::string>> NvmeCtrlr::start(event::Thread* thread) {
  admin_thread_ = thread;
  fw_.register_io_device(this, channel_create, channel_destroy, sizeof(NvmeChannel),
                         "bdev_nvme_" + name());
  std::vector<std::string> names;
  for (uint32_t nsid : ctrlr_->namespace_ids()) {
    auto b = register_namespace(nsid);
    if (!b) {
      admin_poller_ = nullptr;
      teardown(false);  // frees this once the bdevs registered so far are gone
      return b.error();
    }
    if (!b->empty()) names.push_back(*b);
  }
  ctrlr_->set_async_event_callback(on_async_event, this);
  admin_poller_ = thread->register_poller(admin_poll, this, opts_.admin_poll_period_us,
                                          "bdev_nvme_admin_" + name());
  // Timeouts with action kReset: quiesce the channels, then reset — never inline from the
  // thread that polled the admin queue (the driver calls the hook from its admin poll): the
  // reset starts from a message to the admin thread.
  ctrlr_->set_reset_request_hook([this] {
    hold();  // alive until the message has run
    auto run = [](void* a) {
      auto* self = static_cast<NvmeCtrlr*>(a);
      self->reset_controller(nullptr, nullptr);
      self->release();
    };
    if (admin_thread_->send_msg(run, this) != 0) run(this);
  });
  return names;
}

Result<std::string> NvmeCtrlr::register_namespace(uint32_t nsid) {
  const nvme::Namespace* ns = ctrlr_->ns(nsid);
  if (ns == nullptr || ns->num_blocks == 0 || ns->block_size == 0) return std::string();
  BdevProperties p;
  p.name = name() + "n" + std::to_string(nsid);
  p.product = "NVMe disk";
  p.block_size = ns->block_size;
  p.num_blocks = ns->num_blocks;
  p.max_transfer_blocks = ns->max_io_blocks;
  p.required_alignment = 2;  // dword-aligned data pointers
  p.write_cache = ctrlr_->identify().vwc & 1;
  {
    std::lock_guard lock(mu_);
    ++bdevs_alive_;
  }
  auto b = mgr_.register_bdev(std::move(p), std::make_unique<NvmeBackend>(this, ns), "nvme");
  if (!b) {
    std::lock_guard lock(mu_);
    --bdevs_alive_;
    return b.error();
  }
  std::lock_guard lock(mu_);
  bdev_names_.push_back((*b)->name());
  return (*b)->name();
}

void NvmeCtrlr::on_async_event(void* ctx, const sn::CompletionEntry& cpl) {
  const uint8_t type = cpl.dw0 & 7, info = (cpl.dw0 >> 8) & 0xff;
  if (type == sn::aer::kTypeNotice && info == sn::aer::kInfoNoticeNamespaceChanged)
    static_cast<NvmeCtrlr*>(ctx)->ns_changed_.store(true, std::memory_order_release);
}

void NvmeCtrlr::rescan_namespaces() {
  auto active = ctrlr_->refresh_namespaces();
  if (!active) {  // the admin queue broke meanwhile: the recovery's reset comes first
    ns_changed_.store(true, std::memory_order_release);
    std::fprintf(stderr, "bdev_nvme %s: namespace rescan: %s\n", name().c_str(),
                 active.error().message.c_str());
    return;
  }
  std::vector<std::string> gone;
  std::vector<uint32_t> missing;
  {
    std::lock_guard lock(mu_);
    if (tearing_down_) return;
    const std::string prefix = name() + "n";
    for (const std::string& n : bdev_names_) {
      const uint32_t nsid = static_cast<uint32_t>(std::stoul(n.substr(prefix.size())));
      const nvme::Namespace* ns = ctrlr_->ns(nsid);
      // Gone, or changed (another object: the bdev's backend holds the old one).
      bool kept = false;
      for (uint32_t a : *active) kept |= a == nsid;
      if (!kept || ns == nullptr) gone.push_back(n);
    }
    for (uint32_t nsid : *active) {
      const std::string n = prefix + std::to_string(nsid);
      if (std::find(bdev_names_.begin(), bdev_names_.end(), n) == bdev_names_.end())
        missing.push_back(nsid);
    }
    for (const std::string& n : gone) std::erase(bdev_names_, n);
  }
  for (const std::string& n : gone) {
    std::fprintf(stderr, "bdev_nvme %s: namespace gone: %s removed\n", name().c_str(), n.c_str());
    (void)mgr_.unregister_bdev(n);
  }
  for (uint32_t nsid : missing) {
    auto b = register_namespace(nsid);
    if (!b) {
      std::fprintf(stderr, "bdev_nvme %s: namespace %u: %s\n", name().c_str(), nsid,
                   b.error().message.c_str());
    } else if (!b->empty()) {
      std::fprintf(stderr, "bdev_nvme %s: namespace %u: bdev %s\n", name().c_str(), nsid,
                   b->c_str());
    }
  }
}

void NvmeCtrlr::teardown(bool removed) {
  std::vector<std::string> names;
  {
    std::lock_guard lock(mu_);
    if (removed) removed_.store(true, std::memory_order_release);
    if (tearing_down_) return;
    tearing_down_ = true;
    names = bdev_names_;
  }
  if (admin_poller_ != nullptr) {
    admin_thread_->unregister_poller(admin_poller_);
    admin_poller_ = nullptr;
  }
  for (const std::string& n : names) (void)mgr_.unregister_bdev(n);
  maybe_free();
}

void NvmeCtrlr::bdev_destructed() {
  {
    std::lock_guard lock(mu_);
    --bdevs_alive_;
  }
  maybe_free();
}

void NvmeCtrlr::maybe_free() {
  {
    std::lock_guard lock(mu_);
    if (!tearing_down_ || bdevs_alive_ != 0 || holds_ != 0 || freeing_) return;
    freeing_ = true;
  }
  // Every bdev is gone; wait for the last module channel (queue pair), then free.
  fw_.unregister_io_device(
      this,
      [](void* arg) {
        auto* self = static_cast<NvmeCtrlr*>(arg);
        {
          std::lock_guard lock(g_mu);
          g_ctrlrs.erase(std::remove(g_ctrlrs.begin(), g_ctrlrs.end(), self), g_ctrlrs.end());
        }
        std::vector<Waiter> waiters;
        {
          std::lock_guard lock(self->mu_);
          waiters.swap(self->waiters_);
        }
        delete self;  // shuts the controller down (skipped if it is gone)
        for (const Waiter& w : waiters) {
          if (w.fn == nullptr) continue;
          if (w.t == nullptr || w.t->send_msg(w.fn, w.ctx) != 0) w.fn(w.ctx);
        }
      },
      this);
}

NvmeCtrlr* find_ctrlr(Manager& mgr, const std::string& name) {
  for (NvmeCtrlr* c : g_ctrlrs)
    if (&c->mgr() == &mgr && c->name() == name) return c;
  return nullptr;
}

}  // namespace

// ------------------------------------------------------------------------ public API ----

Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr,
                                                        std::unique_ptr<nvme::Controller> ctrlr,
                                                        const NvmeBdevOptions& options) {
  if (ctrlr == nullptr) return make_error(EINVAL, "bdev_nvme: no controller");
  if (options.name.empty()) return make_error(EINVAL, "bdev_nvme: controller name is empty");
  event::Thread* thread = event::Thread::current();
  if (thread == nullptr)
    return make_error(EINVAL, "bdev_nvme: attach must run on a framework thread");
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    if (find_ctrlr(mgr, options.name) != nullptr)
      return make_error(EEXIST, "bdev_nvme: controller '" + options.name + "' already exists");
    c = new NvmeCtrlr(mgr, std::move(ctrlr), options);
    g_ctrlrs.push_back(c);
  }
  return c->start(thread);  // on failure c frees itself once its bdevs are gone
}

Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr,
                                                        const nvme::TransportId& trid,
                                                        const NvmeBdevOptions& options,
                                                        nvme::ControllerOptions ctrlr_options) {
  if (ctrlr_options.registry == nullptr) ctrlr_options.registry = options.registry;
  {
    std::lock_guard lock(g_mu);
    if (find_ctrlr(mgr, options.name) != nullptr)
      return make_error(EEXIST, "bdev_nvme: controller '" + options.name + "' already exists");
  }
  auto c = nvme::connect(trid, ctrlr_options);
  if (!c) return make_error(c.error().code, "bdev_nvme: " + trid.to_string() + ": " + c.error().message);
  NvmeBdevOptions o = options;
  if (o.registry == nullptr) o.registry = ctrlr_options.registry;
  return nvme_attach_controller(mgr, std::move(c).value(), o);
}

void nvme_set_default_options(Manager& mgr, const NvmeBdevOptions& options) {
  std::lock_guard lock(g_mu);
  g_defaults[&mgr] = options;
}

NvmeBdevOptions nvme_default_options(Manager& mgr) {
  std::lock_guard lock(g_mu);
  auto d = g_defaults.find(&mgr);
  return d != g_defaults.end() ? d->second : NvmeBdevOptions{};
}

Result<std::vector<std::string>> nvme_attach_controller_by_address(
    Manager& mgr, const std::string& name, const NvmeAddress& a,
    const std::function<void(NvmeBdevOptions&)>& tune) {
  std::string text = "trtype:" + a.trtype + " traddr:" + a.traddr;
  if (!a.trsvcid.empty()) text += " trsvcid:" + a.trsvcid;
  if (!a.subnqn.empty()) text += " subnqn:" + a.subnqn;
  if (a.hdgst) text += " hdgst:1";
  if (a.ddgst) text += " ddgst:1";
  auto trid = nvme::parse_transport_id(text);
  if (!trid) return make_error(trid.error().code, "bdev_nvme_attach_controller: " + trid.error().message);
  if (a.multipath == "failover") {
    bool attached;
    {
      std::lock_guard lock(g_mu);
      attached = find_ctrlr(mgr, name) != nullptr;
    }
    if (attached) return nvme_add_path(mgr, name, *trid);
  } else if (a.multipath == "multipath") {
    return make_error(ENOTSUP,
                      "multipath 'multipath' (active-active) is not supported; 'failover' is");
  } else if (!a.multipath.empty() && a.multipath != "disable") {
    return make_error(EINVAL, "multipath '" + a.multipath + "': expected disable or failover");
  }
  NvmeBdevOptions o = nvme_default_options(mgr);
  o.name = name;
  if (tune) tune(o);
  nvme::ControllerOptions co;
  co.hostnqn = a.hostnqn;
  for (auto [value, out] : {std::pair{&a.dhchap_key, &co.dhchap_key},
                            std::pair{&a.dhchap_ctrlr_key, &co.dhchap_ctrlr_key}}) {
    if (value->empty()) continue;
    auto text = nvme::keyring::resolve(*value);
    if (!text) return make_error(text.error().code, "bdev_nvme_attach_controller: " + text.error().message);
    *out = std::move(text).value();
  }
  return nvme_attach_controller(mgr, *trid, o, std::move(co));
}

int nvme_detach_controller(Manager& mgr, const std::string& name, event::MsgFn done, void* ctx) {
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
    if (c == nullptr) return -ENODEV;
    c->add_detach_waiter(event::Thread::current(), done, ctx);
    if (c->detaching()) return 0;  // already going (hot-remove): done() runs when freed
    c->hold();
  }
  // The admin poller belongs to the attaching thread: tear down there.
  auto run = [](void* arg) {
    auto* self = static_cast<NvmeCtrlr*>(arg);
    self->teardown(false);
    self->release();
  };
  if (c->admin_thread() == event::Thread::current() || c->admin_thread()->send_msg(run, c) != 0)
    run(c);
  return 0;
}

int nvme_reset_controller(Manager& mgr, const std::string& name, ResetDoneFn done, void* ctx) {
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
    if (c == nullptr || c->detaching()) return -ENODEV;
    c->hold();  // alive until reset_controller has taken its own hold
  }
  c->reset_controller(done, ctx);
  c->release();
  return 0;
}

// ------------------------------------------------------------------------- hot-plug ----

namespace {

struct Hotplug {
  Manager* mgr;
  event::Thread* thread;
  event::Poller* poller;
  std::vector<NvmeHotplugSlot> slots;
  NvmeBdevOptions base;
  NvmeHotplugStats stats;
};
std::vector<std::unique_ptr<Hotplug>> g_hotplugs;  // under g_mu

event::PollStatus hotplug_poll(void* arg) {
  auto* h = static_cast<Hotplug*>(arg);
  // The stats are read from any thread under g_mu; the rest of h is this thread's.
  auto count = [](uint64_t& field) {
    std::lock_guard lock(g_mu);
    ++field;
  };
  count(h->stats.polls);
  const std::vector<std::string> attached = nvme_controller_names(*h->mgr);
  int n = 0;
  for (const NvmeHotplugSlot& slot : h->slots) {
    if (std::find(attached.begin(), attached.end(), slot.name) != attached.end()) continue;
    if (slot.present && !slot.present()) continue;
    auto c = slot.connect();
    if (!c) {
      count(h->stats.connect_failures);  // tried again at the next period
      continue;
    }
    NvmeBdevOptions o = h->base;
    o.name = slot.name;
    if (nvme_attach_controller(*h->mgr, std::move(c).value(), o)) {
      count(h->stats.attaches);
      ++n;
    } else {
      count(h->stats.connect_failures);
    }
  }
  return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

}  // namespace

int nvme_hotplug_start(Manager& mgr, std::vector<NvmeHotplugSlot> slots, uint64_t period_us,
                       const NvmeBdevOptions& base) {
  event::Thread* t = event::Thread::current();
  if (t == nullptr) return -EINVAL;
  for (const NvmeHotplugSlot& s : slots)
    if (s.name.empty() || !s.connect) return -EINVAL;
  std::lock_guard lock(g_mu);
  for (const auto& h : g_hotplugs)
    if (h->mgr == &mgr) return -EEXIST;
  auto h = std::make_unique<Hotplug>(Hotplug{&mgr, t, nullptr, std::move(slots), base, {}});
  h->poller = t->register_poller(hotplug_poll, h.get(), period_us, "bdev_nvme_hotplug");
  g_hotplugs.push_back(std::move(h));
  return 0;
}

Result<NvmeHotplugSlot> nvme_hotplug_slot(const std::string& name, const std::string& trtype,
                                          const std::string& traddr) {
  auto trid = nvme::parse_transport_id("trtype:" + trtype + " traddr:" + traddr);
  if (!trid) return trid.error();
  NvmeHotplugSlot slot;
  slot.name = name;
  if (trid->trtype == nvme::TransportType::kPcie) {
    auto bdf = env::normalise_bdf(traddr);
    if (!bdf) return bdf.error();
    slot.present = [bdf = *bdf] { return env::vfio_pci_bound(bdf); };
  } else if (trid->trtype == nvme::TransportType::kVfioUser) {
    slot.present = [path = traddr] { return access(path.c_str(), F_OK) == 0; };
  } else {
    return make_error(ENOTSUP, "hot-plug slots are pcie or vfio-user addresses");
  }
  slot.connect = [t = *trid]() { return nvme::connect(t); };
  return slot;
}

void nvme_hotplug_stop(Manager& mgr) {
  std::unique_ptr<Hotplug> h;
  {
    std::lock_guard lock(g_mu);
    for (auto it = g_hotplugs.begin(); it != g_hotplugs.end(); ++it) {
      if ((*it)->mgr == &mgr) {
        h = std::move(*it);
        g_hotplugs.erase(it);
        break;
      }
    }
  }
  if (h) h->thread->unregister_poller(h->poller);
}

NvmeHotplugStats nvme_hotplug_stats(Manager& mgr) {
  std::lock_guard lock(g_mu);
  for (const auto& h : g_hotplugs)
    if (h->mgr == &mgr) return h->stats;
  return {};
}

Result<std::vector<std::string>> nvme_add_path(Manager& mgr, const std::string& name,
                                               const nvme::TransportId& trid) {
  std::lock_guard lock(g_mu);  // the controller stays while its path is added
  NvmeCtrlr* c = find_ctrlr(mgr, name);
  if (c == nullptr || c->detaching())
    return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  if (std::string e = c->ctrlr().add_path(trid); !e.empty())
    return make_error(EINVAL, "bdev_nvme: " + name + ": " + trid.to_string() + ": " + e);
  return c->bdev_names();
}

std::vector<std::string> nvme_controller_names(Manager& mgr) {
  std::lock_guard lock(g_mu);
  std::vector<std::string> names;
  for (NvmeCtrlr* c : g_ctrlrs)
    if (&c->mgr() == &mgr) names.push_back(c->name());
  return names;
}

Result<NvmeControllerStats> nvme_controller_stats(Manager& mgr, const std::string& name) {
  std::lock_guard lock(g_mu);
  NvmeCtrlr* c = find_ctrlr(mgr, name);
  if (c == nullptr) return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  NvmeControllerStats st = c->stats();
  const nvme::Transport::PathInfo p = c->ctrlr().paths();
  st.paths = static_cast<uint32_t>(p.addresses.size());
  st.active_path = static_cast<uint32_t>(p.active);
  st.failovers = p.failovers;
  return st;
}

Result<std::optional<NvmeEmulatorStatus>> nvme_emulator_status(Manager& mgr,
                                                               const std::string& name) {
  NvmeCtrlr* c = nullptr;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
  }
  if (c == nullptr) return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  // Its admin poller runs on this thread too: the command cannot race it.
  if (c->admin_thread() != event::Thread::current())
    return make_error(EINVAL, "bdev_nvme: ask '" + name + "' on its admin thread");
  auto st = nvme::emulator_status(c->ctrlr());
  if (!st) return std::optional<NvmeEmulatorStatus>();
  return std::optional<NvmeEmulatorStatus>(NvmeEmulatorStatus{c->ctrlr().transport().address(), *st});
}

}  // namespace pollux::bdev
