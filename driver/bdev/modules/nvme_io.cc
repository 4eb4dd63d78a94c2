// bdev_nvme: the backend (submission, completion, retries, aborts) and the per-thread channels.
#include "driver/bdev/modules/nvme_internal.h"

namespace pollux::bdev::nvme_module {

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
                                        0, -1, nullptr, 0, 0};
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
      c->not_before = changes_data(c->io->type()) ? ch->ctrlr->write_fence() : 0;
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

// ----------------------------------------------------------------------- channels ----

int NvmeCtrlr::channel_create(void* io_device, void* ctx) {
  auto* self = static_cast<NvmeCtrlr*>(io_device);
  if (self->gone()) return -ENODEV;
  const std::size_t dsm_bytes =
      std::max<std::size_t>(4096, std::size_t{self->opts_.dsm_slots} * sizeof(sn::nvm::DsmRange));
  auto dsm = env::DmaRegion::create(*self->opts_.registry, dsm_bytes);
  if (!dsm) return dsm.error().code;
  bool paused;
  bool connecting = false;
  Result<std::unique_ptr<nvme::Qpair>> qp = make_error(ENODEV, "");
  {
    // Not while a one-call nvme::Controller::reset() runs (a reset in steps keeps its list of
    // queue pairs under the controller's admin lock); during a reset's pause phase the new
    // channel starts paused (the resume walk will find it: it runs after this).
    std::lock_guard reset_lock(self->reset_mu_);
    {
      std::lock_guard lock(self->mu_);
      paused = self->pausing_;
    }
    nvme::Controller& c = *self->ctrlr_;
    if (c.transport().fabrics()) {
      // NVMe/TCP and NVMe/RDMA connect without blocking (as SPDK's bdev_nvme): the queue pair
      // now, its connection from the channel's poller (or from the reset under way, which
      // takes it over). I/O waits in it; one whose connect fails is connected by the reset
      // the health check then starts, or fails with the controller.
      if (!self->failed() && !c.failed()) {
        qp = c.alloc_io_qpair_async(self->opts_.qpair);
        connecting = static_cast<bool>(qp);
      }
    } else {
      qp = c.alloc_io_qpair(self->opts_.qpair);
    }
  }
  if (!qp) return qp.error().code;
  auto* ch = new (ctx) NvmeChannel;
  ch->ctrlr = self;
  ch->paused = paused;
  ch->connecting = connecting;
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
  if (ch->connecting) [[unlikely]] {
    // A failure leaves the queue pair unconnected: the admin poller's health check resets the
    // controller, which connects it.
    if (ch->ctrlr->ctrlr_->poll_io_qpair_connect(*ch->qp) == -EAGAIN)
      return event::PollStatus::kIdle;
    ch->connecting = false;
  }
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
    const uint64_t now = ch->ctrlr->ctrlr().clock().now();
    while (count-- > 0) {
      IoCtx* c = ch->pop_retry();
      if (c == nullptr) break;
      if (c->io->abort_requested()) {
        NvmeBackend::finish(c, IoStatus::kAborted);
        ++n;
        continue;
      }
      if (now < c->not_before) {  // its old copy may still land: later (the list's end)
        ch->push_retry(c);
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

}  // namespace pollux::bdev::nvme_module

namespace pollux::bdev {

// ------------------------------------------------------------------- retry policy ----

namespace sn = spec::nvme;

bool nvme_should_retry(uint16_t status, uint32_t attempts, uint32_t retry_count) {
  const nvme::Status st = nvme::Status::from_cqe(status);
  if (!st.retriable() || attempts >= retry_count) return false;
  // A miscompare is an answer, not a failure.
  return !(st.sct == sn::sct::kMediaError && st.sc == sn::sc_media::kCompareFailure);
}

}  // namespace pollux::bdev
