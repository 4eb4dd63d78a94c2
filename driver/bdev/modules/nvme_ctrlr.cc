// bdev_nvme: controller reset and recovery, the admin poller, namespaces and teardown.
#include "driver/bdev/modules/nvme_internal.h"

namespace pollux::bdev::nvme_module {

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
  if (ctrlr_->transport().fabrics() && !ctrlr_->transport().gone()) {
    // Step by step: the admin thread (and the I/O of every other controller it serves) runs
    // on meanwhile.
    const int rc = ctrlr_->reset_start();
    if (rc != -EAGAIN) return reset_done(rc);
    reset_poller_ = event::Thread::current()->register_poller(reset_poll, this, 0,
                                                              "bdev_nvme_reset_" + name());
    return;
  }
  int rc;
  {
    std::lock_guard reset_lock(reset_mu_);
    rc = ctrlr_->transport().gone() ? -ENODEV : ctrlr_->reset();
  }
  reset_done(rc);
}

event::PollStatus NvmeCtrlr::reset_poll(void* arg) {
  auto* self = static_cast<NvmeCtrlr*>(arg);
  const int rc = self->ctrlr_->reset_poll();
  if (rc == -EAGAIN) return event::PollStatus::kIdle;
  event::Thread::current()->unregister_poller(self->reset_poller_);
  self->reset_poller_ = nullptr;
  self->reset_done(rc);
  return event::PollStatus::kBusy;
}

void NvmeCtrlr::reset_done(int rc) {
  {
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
  NvmeBackend::cancel_aborted(*ch);  // given up during the reset: never sent now
  while (IoCtx* c = parked) {
    parked = c->next;
    if (c->io->abort_requested()) {
      NvmeBackend::finish(c, IoStatus::kAborted);
    } else if (ch->ctrlr->gone()) {
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

}  // namespace pollux::bdev::nvme_module
