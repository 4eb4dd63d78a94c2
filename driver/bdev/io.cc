// The I/O path: channels, bdev_io caches, submission, splitting, bounce buffers, retries of
// ENOMEM, reset quiescing, QoS admission (the buckets' refill: qos.cc) and statistics.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "driver/bdev/bounce.h"
#include "driver/bdev/channel.h"

namespace pollux::bdev {

namespace {

uint64_t iov_bytes(const iovec* iov, int n) {
  uint64_t b = 0;
  for (int i = 0; i < n; ++i) b += iov[i].iov_len;
  return b;
}

// Copies into dst the iovec pieces covering [skip, skip+len) of src. -1 if more than max.
int slice_iovs(const iovec* src, int srccnt, uint64_t skip, uint64_t len, iovec* dst, int max) {
  int n = 0;
  for (int i = 0; i < srccnt && len > 0; ++i) {
    if (skip >= src[i].iov_len) {
      skip -= src[i].iov_len;
      continue;
    }
    if (n == max) return -1;
    const uint64_t take = std::min<uint64_t>(src[i].iov_len - skip, len);
    dst[n++] = {static_cast<uint8_t*>(src[i].iov_base) + skip, take};
    len -= take;
    skip = 0;
  }
  return len == 0 ? n : -1;
}

}  // namespace

void BdevIo::complete(IoStatus status) {
  status_ = status;
  bdev_->mgr_->io_done(*this);
}

void BdevIo::complete_nvme(uint16_t status_field, uint32_t cdw0) {
  nvme_status_ = static_cast<uint16_t>(status_field & 0xfffe);
  nvme_cdw0_ = cdw0;
  // SCT 2 (media and data integrity) / SC 85h: Compare Failure.
  const bool miscompare = ((nvme_status_ >> 9) & 7) == 2 && ((nvme_status_ >> 1) & 0xff) == 0x85;
  complete(nvme_status_ == 0 ? IoStatus::kSuccess
                             : miscompare ? IoStatus::kMiscompare : IoStatus::kNvmeError);
}

// ------------------------------------------------------------------------- channels ----

int Manager::channel_create(void* io_device, void* ctx) {
  auto* bdev = static_cast<Bdev*>(io_device);
  auto* ch = new (ctx) Channel;
  ch->mgr = bdev->mgr_;
  ch->bdev = bdev;
  ch->thread = event::Thread::current();
  event::Framework& fw = bdev->mgr_->fw_;
  ch->module_ch = fw.get_io_channel(bdev->backend_->io_device());
  if (ch->module_ch == nullptr) {
    ch->~Channel();
    return -ENOMEM;
  }
  ch->module_ctx = ch->module_ch->ctx();
  ch->poller = event::Thread::current()->register_poller(channel_poll, ch, 0, "bdev_retry");
  return 0;
}

void Manager::channel_destroy(void* io_device, void* ctx) {
  auto* bdev = static_cast<Bdev*>(io_device);
  auto* ch = static_cast<Channel*>(ctx);
  Manager* mgr = bdev->mgr_;
  if (ch->outstanding != 0) {
    // A caller bug (as SPDK asserts): the completions of these I/Os will land in freed memory.
    std::fprintf(stderr, "bdev %s: I/O channel released with %lu I/Os outstanding\n",
                 bdev->name().c_str(), static_cast<unsigned long>(ch->outstanding));
  }
  {
    std::lock_guard lock(mgr->mu_);
    bdev->retired_.merge(ch->stats);
  }
  while (ch->free != nullptr) {
    BdevIo* io = ch->free;
    ch->free = io->next_;
    mgr->io_pool_.push_returned(io);  // the pool holds every BdevIo
  }
  event::Thread::current()->unregister_poller(ch->poller);
  mgr->fw_.put_io_channel(ch->module_ch);
  ch->~Channel();
}

event::IoChannel* Manager::get_io_channel(Desc* d) { return fw_.get_io_channel(d->bdev_); }
void Manager::put_io_channel(event::IoChannel* ch) { fw_.put_io_channel(ch); }

BdevIo* Manager::get_io(Channel& ch) {
  if (ch.free == nullptr) {  // refill half a cache from the shared pool
    for (std::size_t i = 0; i < opts_.io_cache_size / 2; ++i) {
      BdevIo* io;
      if (!io_pool_.try_pop(io)) break;
      io->next_ = ch.free;
      ch.free = io;
      ++ch.free_count;
    }
    if (ch.free == nullptr) return nullptr;
  }
  BdevIo* io = ch.free;
  ch.free = io->next_;
  --ch.free_count;
  return io;
}

void Manager::put_io(Channel& ch, BdevIo* io) {
  ch.unlink(io);
  if (ch.free_count >= opts_.io_cache_size) {
    io_pool_.push_returned(io);
    return;
  }
  io->next_ = ch.free;
  ch.free = io;
  ++ch.free_count;
}

// ----------------------------------------------------------------------- submission ----

BdevIo* Manager::prepare(Desc* d, event::IoChannel* ich, IoType type, uint64_t offset,
                         uint64_t num, IoCompletionFn cb, void* arg, int* rc) {
  Bdev& b = *d->bdev_;
  if (ich == nullptr || cb == nullptr) {
    *rc = -EINVAL;
    return nullptr;
  }
  const bool writes = type == IoType::kWrite || type == IoType::kWriteZeroes ||
                      type == IoType::kUnmap || type == IoType::kCompareAndWrite ||
                      type == IoType::kNvmePassthru;
  if (writes && !d->write_) {
    *rc = -EBADF;
    return nullptr;
  }
  if (!b.backend_->supports(type)) {
    *rc = -ENOTSUP;
    return nullptr;
  }
  if (type != IoType::kReset && type != IoType::kNvmePassthru &&
      (offset > b.props_.num_blocks || num > b.props_.num_blocks - offset)) {
    *rc = -EINVAL;
    return nullptr;
  }
  auto& ch = *static_cast<Channel*>(ich->ctx());
  BdevIo* io = get_io(ch);
  if (io == nullptr) {
    *rc = -ENOMEM;
    return nullptr;
  }
  io->ch_ = &ch;
  io->bdev_ = &b;
  io->type_ = type;
  io->status_ = IoStatus::kPending;
  io->nvme_status_ = 0;
  io->nvme_cdw0_ = 0;
  io->retries_ = 0;
  io->offset_ = offset;
  io->num_ = num;
  io->iovs_ = io->iov_storage_;
  io->iovcnt_ = 0;
  io->write_iovs_ = nullptr;
  io->write_iovcnt_ = 0;
  io->cb_ = cb;
  io->cb_arg_ = arg;
  io->parent_ = nullptr;
  io->children_left_ = 0;
  io->split_next_ = 0;
  io->resplit_ = false;
  io->split_ = false;
  io->bounce_ = nullptr;
  io->nvme_cmd_ = nullptr;
  ch.link(io);
  *rc = 0;
  return io;
}

int Manager::submit_rw(Desc* d, event::IoChannel* ich, IoType type, const iovec* iov,
                       int iovcnt, uint64_t offset, uint64_t num, IoCompletionFn cb, void* arg) {
  if (iovcnt <= 0 || iovcnt > BdevIo::kMaxIovs || num == 0) return -EINVAL;
  if (iov_bytes(iov, iovcnt) < num * d->bdev_->props_.block_size) return -EINVAL;
  int rc;
  BdevIo* io = prepare(d, ich, type, offset, num, cb, arg, &rc);
  if (io == nullptr) return rc;
  std::copy(iov, iov + iovcnt, io->iov_storage_);
  io->iovcnt_ = iovcnt;
  start(io);
  return 0;
}

int Manager::read(Desc* d, event::IoChannel* ch, void* buf, uint64_t off, uint64_t num,
                  IoCompletionFn cb, void* arg) {
  const iovec v{buf, num * d->bdev_->props_.block_size};
  return submit_rw(d, ch, IoType::kRead, &v, 1, off, num, cb, arg);
}
int Manager::readv(Desc* d, event::IoChannel* ch, const iovec* iov, int n, uint64_t off,
                   uint64_t num, IoCompletionFn cb, void* arg) {
  return submit_rw(d, ch, IoType::kRead, iov, n, off, num, cb, arg);
}
int Manager::write(Desc* d, event::IoChannel* ch, const void* buf, uint64_t off, uint64_t num,
                   IoCompletionFn cb, void* arg) {
  const iovec v{const_cast<void*>(buf), num * d->bdev_->props_.block_size};
  return submit_rw(d, ch, IoType::kWrite, &v, 1, off, num, cb, arg);
}
int Manager::writev(Desc* d, event::IoChannel* ch, const iovec* iov, int n, uint64_t off,
                    uint64_t num, IoCompletionFn cb, void* arg) {
  return submit_rw(d, ch, IoType::kWrite, iov, n, off, num, cb, arg);
}
int Manager::compare(Desc* d, event::IoChannel* ch, const void* buf, uint64_t off, uint64_t num,
                     IoCompletionFn cb, void* arg) {
  const iovec v{const_cast<void*>(buf), num * d->bdev_->props_.block_size};
  return submit_rw(d, ch, IoType::kCompare, &v, 1, off, num, cb, arg);
}

int Manager::write_zeroes(Desc* d, event::IoChannel* ch, uint64_t off, uint64_t num,
                          IoCompletionFn cb, void* arg) {
  int rc;
  if (num == 0) return -EINVAL;
  BdevIo* io = prepare(d, ch, IoType::kWriteZeroes, off, num, cb, arg, &rc);
  if (io) start(io);
  return rc;
}
int Manager::unmap(Desc* d, event::IoChannel* ch, uint64_t off, uint64_t num, IoCompletionFn cb,
                   void* arg) {
  int rc;
  if (num == 0) return -EINVAL;
  BdevIo* io = prepare(d, ch, IoType::kUnmap, off, num, cb, arg, &rc);
  if (io) start(io);
  return rc;
}
int Manager::flush(Desc* d, event::IoChannel* ch, uint64_t off, uint64_t num, IoCompletionFn cb,
                   void* arg) {
  int rc;
  BdevIo* io = prepare(d, ch, IoType::kFlush, off, num, cb, arg, &rc);
  if (io) start(io);
  return rc;
}

int Manager::compare_and_write(Desc* d, event::IoChannel* ch, const void* cmp, const void* wr,
                               uint64_t off, uint64_t num, IoCompletionFn cb, void* arg) {
  if (num == 0) return -EINVAL;
  int rc;
  BdevIo* io = prepare(d, ch, IoType::kCompareAndWrite, off, num, cb, arg, &rc);
  if (!io) return rc;
  const std::size_t bytes = num * d->bdev_->props_.block_size;
  io->iov_storage_[0] = {const_cast<void*>(cmp), bytes};
  io->iov_storage_[1] = {const_cast<void*>(wr), bytes};
  io->iovcnt_ = 1;
  io->write_iovs_ = &io->iov_storage_[1];
  io->write_iovcnt_ = 1;
  start(io);
  return 0;
}

int Manager::nvme_passthru(Desc* d, event::IoChannel* ch, const void* cmd64, void* buf,
                           std::size_t len, IoCompletionFn cb, void* arg) {
  if (cmd64 == nullptr) return -EINVAL;
  int rc;
  BdevIo* io = prepare(d, ch, IoType::kNvmePassthru, 0, 0, cb, arg, &rc);
  if (!io) return rc;
  io->nvme_cmd_ = cmd64;
  if (buf != nullptr && len != 0) {
    io->iov_storage_[0] = {buf, len};
    io->iovcnt_ = 1;
  }
  start(io);
  return 0;
}

// Rate limits are checked here, once per user I/O (never for split children). Every bucket
// that applies gives its share; if one cannot, the others get theirs back.
bool Manager::qos_admit(Bdev& b, const BdevIo& io) {
  if (!b.qos_on_.load(std::memory_order_relaxed)) return true;
  const auto bytes = static_cast<int64_t>(io.num_blocks() * b.block_size());
  const int64_t want[Bdev::kQosBuckets] = {
      1, bytes, io.type() == IoType::kRead ? bytes : 0,
      io.type() == IoType::kWrite ? bytes : 0};
  bool limited[Bdev::kQosBuckets];
  for (int i = 0; i < Bdev::kQosBuckets; ++i)
    limited[i] = want[i] != 0 && b.qos_limit_[i].load(std::memory_order_relaxed) != 0;
  for (int i = 0; i < Bdev::kQosBuckets; ++i) {
    if (!limited[i]) continue;
    if (b.qos_tokens_[i].fetch_sub(want[i], std::memory_order_relaxed) <= 0) {
      for (int k = 0; k <= i; ++k)
        if (limited[k]) b.qos_tokens_[k].fetch_add(want[k], std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

void Manager::start(BdevIo* io) {
  Channel& ch = *io->ch_;
  io->submit_tick_ = fw_.clock().now();
  ++ch.outstanding;
  if (ch.frozen || ch.wait_head != nullptr) {  // keep order behind what already waits
    if (ch.frozen) ++ch.stats.reset_queued;
    ch.enqueue(io);
    return;
  }
  if (!qos_admit(*io->bdev_, *io)) {
    ++ch.stats.qos_queued;
    ch.enqueue(io);
    return;
  }
  dispatch(io);
}

bool Manager::needs_split(const BdevIo& io) const {
  if (io.type_ != IoType::kRead && io.type_ != IoType::kWrite) return false;
  const BdevProperties& p = io.bdev_->props_;
  if (p.max_transfer_blocks && io.num_ > p.max_transfer_blocks) return true;
  if (p.split_on_optimal_io_boundary && p.optimal_io_boundary) {
    const uint64_t b = p.optimal_io_boundary;
    if (io.offset_ / b != (io.offset_ + io.num_ - 1) / b) return true;
  }
  return false;
}

void Manager::dispatch(BdevIo* io) {
  if (io->parent_ == nullptr && needs_split(*io)) {
    split(io);
    return;
  }
  if (io->bdev_->props_.required_alignment && io->bounce_ == nullptr && !bounce_in(io)) return;
  Channel& ch = *io->ch_;
  ++ch.in_submit;
  io->bdev_->backend_->submit(*io, ch.module_ctx);
  --ch.in_submit;
}

// Children cover the parent's range in pieces no larger than max_transfer and not crossing
// an optimal-I/O boundary. The split is progressive: the parent keeps a cursor, makes as
// many children as bdev_ios allow, and continues as they complete, so an I/O of any size
// goes through a pool of any size and is never failed for lack of bdev_ios.
void Manager::split(BdevIo* parent) {
  ++parent->ch_->stats.splits;
  parent->split_ = true;
  parent->split_next_ = parent->offset_;
  parent->children_left_ = 0;
  parent->children_status_ = IoStatus::kSuccess;
  split_continue(parent);
}

void Manager::split_continue(BdevIo* parent) {
  Channel& ch = *parent->ch_;
  const BdevProperties& p = parent->bdev_->props_;
  const uint64_t bs = p.block_size;
  const uint64_t end = parent->offset_ + parent->num_;
  ++ch.in_submit;              // the parent may finish below: not inside the caller's submit
  ++parent->children_left_;    // guard: children completing inline can't finish the parent
  while (parent->split_next_ < end && parent->children_status_ == IoStatus::kSuccess) {
    const uint64_t off = parent->split_next_;
    uint64_t n = end - off;
    if (p.max_transfer_blocks) n = std::min<uint64_t>(n, p.max_transfer_blocks);
    if (p.split_on_optimal_io_boundary && p.optimal_io_boundary) {
      const uint64_t b = p.optimal_io_boundary;
      n = std::min(n, (off / b + 1) * b - off);
    }
    BdevIo* child = get_io(ch);
    if (child == nullptr) break;  // out of bdev_ios: continue when children give theirs back
    const int cnt = slice_iovs(parent->iovs_, parent->iovcnt_, (off - parent->offset_) * bs,
                               n * bs, child->iov_storage_, BdevIo::kMaxIovs);
    if (cnt < 0) {  // the caller's iovecs are too fragmented for one child
      put_io(ch, child);
      parent->children_status_ = IoStatus::kFailed;
      break;
    }
    child->ch_ = &ch;
    child->retries_ = 0;
    child->nvme_status_ = 0;
    child->nvme_cdw0_ = 0;
    child->bounce_ = nullptr;
    child->cb_ = nullptr;
    child->write_iovs_ = nullptr;
    child->write_iovcnt_ = 0;
    child->children_left_ = 0;
    child->resplit_ = false;
    child->split_ = false;
    child->nvme_cmd_ = nullptr;
    child->bdev_ = parent->bdev_;
    child->type_ = parent->type_;
    child->status_ = IoStatus::kPending;
    child->offset_ = off;
    child->num_ = n;
    child->iovs_ = child->iov_storage_;
    child->iovcnt_ = cnt;
    child->parent_ = parent;
    child->submit_tick_ = parent->submit_tick_;
    ch.link(child);
    ++parent->children_left_;
    parent->split_next_ = off + n;
    dispatch(child);
  }
  if (--parent->children_left_ == 0) {
    if (parent->split_next_ < end && parent->children_status_ == IoStatus::kSuccess) {
      // Nothing in flight and no bdev_io to be had: wait in the channel queue.
      parent->resplit_ = true;
      ++ch.stats.retries;
      ch.enqueue(parent);
    } else {
      parent->status_ = parent->children_status_;
      finish(parent);
    }
  }
  --ch.in_submit;
}

// Misaligned caller buffers: copy through a DMA bounce buffer aligned for the module.
bool Manager::bounce_in(BdevIo* io) {
  const uint64_t align = uint64_t{1} << io->bdev_->props_.required_alignment;
  bool aligned = true;
  for (int i = 0; i < io->iovcnt_; ++i)
    aligned &= reinterpret_cast<uintptr_t>(io->iovs_[i].iov_base) % align == 0 &&
               io->iovs_[i].iov_len % align == 0;
  if (aligned || io->iovcnt_ == 0) return true;
  // Passthru carries no block count: its length is its buffer's.
  const uint64_t bytes = io->type_ == IoType::kNvmePassthru
                             ? iov_bytes(io->iovs_, io->iovcnt_)
                             : io->num_ * io->bdev_->props_.block_size;
  if (!bounce_->pool || bytes > bounce_->pool->buffer_size()) {  // can never be bounced
    io->status_ = IoStatus::kFailed;
    io_done(*io);
    return false;
  }
  void* buf = nullptr;
  bounce_->pool->get_bulk(&buf, 1);
  if (buf == nullptr) {  // none free right now: the retry poller tries again
    io->status_ = IoStatus::kNoMemory;
    io_done(*io);
    return false;
  }
  ++io->ch_->stats.bounced;
  io->bounce_ = buf;
  io->user_iovs_ = io->iovs_;
  io->user_iovcnt_ = io->iovcnt_;
  if (io->type_ != IoType::kRead) {
    uint64_t at = 0;
    for (int i = 0; i < io->iovcnt_ && at < bytes; ++i) {
      const uint64_t n = std::min<uint64_t>(io->iovs_[i].iov_len, bytes - at);
      std::memcpy(static_cast<uint8_t*>(buf) + at, io->iovs_[i].iov_base, n);
      at += n;
    }
  }
  io->bounce_iov_ = {buf, bytes};
  io->iovs_ = &io->bounce_iov_;
  io->iovcnt_ = 1;
  return true;
}

void Manager::bounce_out(BdevIo* io) {
  const uint64_t bytes = io->bounce_iov_.iov_len;
  // Data comes back for reads and for passthru commands whose opcode moves data to the host.
  const bool to_host =
      io->type_ == IoType::kRead ||
      (io->type_ == IoType::kNvmePassthru && (static_cast<const uint8_t*>(io->nvme_cmd_)[0] & 2));
  if (to_host && io->status_ == IoStatus::kSuccess) {
    uint64_t at = 0;
    for (int i = 0; i < io->user_iovcnt_ && at < bytes; ++i) {
      const uint64_t n = std::min<uint64_t>(io->user_iovs_[i].iov_len, bytes - at);
      std::memcpy(io->user_iovs_[i].iov_base, static_cast<uint8_t*>(io->bounce_) + at, n);
      at += n;
    }
  }
  bounce_->pool->put_bulk(&io->bounce_, 1);
  io->bounce_ = nullptr;
  io->iovs_ = io->user_iovs_;
  io->iovcnt_ = io->user_iovcnt_;
}

// ----------------------------------------------------------------------- completion ----

void Manager::io_done(BdevIo& io) {
  if (io.bounce_ != nullptr) bounce_out(&io);
  Channel& ch = *io.ch_;
  // A reset is never queued: its own channel is frozen, so a queued reset would never run
  // and never thaw the bdev. A module out of resources fails it instead.
  if (io.type_ == IoType::kReset && io.status_ == IoStatus::kNoMemory) io.status_ = IoStatus::kFailed;
  if (io.status_ == IoStatus::kNoMemory) {
    ++io.retries_;  // the module (or the bounce pool) ran dry: wait and try again, forever
    ++ch.stats.retries;
    io.status_ = IoStatus::kPending;
    ch.enqueue(&io);
    return;
  }
  if (BdevIo* parent = io.parent_) {
    if (io.status_ != IoStatus::kSuccess && parent->children_status_ == IoStatus::kSuccess) {
      parent->children_status_ = io.status_;
      parent->nvme_status_ = io.nvme_status_;
    }
    put_io(ch, &io);
    --parent->children_left_;
    const uint64_t end = parent->offset_ + parent->num_;
    if (parent->split_next_ < end && parent->children_status_ == IoStatus::kSuccess &&
        !parent->resplit_) {
      split_continue(parent);  // a bdev_io came back: make more children
    } else if (parent->children_left_ == 0 && !parent->resplit_) {
      parent->status_ = parent->children_status_;
      finish(parent);
    }
    return;
  }
  if (io.type_ == IoType::kReset) {
    // Resume every channel before telling the caller: then nothing queued is left behind.
    fw_.for_each_channel(
        io.bdev_,
        [](event::ChannelIter& it) {
          auto* c = static_cast<Channel*>(it.channel()->ctx());
          c->frozen = false;
          it.next(0);
        },
        &io, [](void* arg, int) {
          auto* r = static_cast<BdevIo*>(arg);
          Bdev& b = *r->bdev_;
          std::vector<BdevIo*> waiters;
          {
            std::lock_guard lock(b.reset_mu_);
            b.resetting_ = false;
            waiters.swap(b.reset_waiters_);
          }
          b.mgr_->finish(r);
          for (BdevIo* w : waiters) {  // each completes on its own channel's thread
            w->status_ = r->status_;
            auto done = [](void* a) {
              auto* x = static_cast<BdevIo*>(a);
              x->bdev_->mgr_->finish(x);
            };
            b.mgr_->fw_.send_reliably(w->ch_->thread, done, w);
          }
        });
    return;
  }
  finish(&io);
}

void Manager::finish(BdevIo* io) {
  Channel& ch = *io->ch_;
  if (ch.in_submit != 0) {  // completed inside a submission: the poller finishes it
    io->next_ = nullptr;
    if (ch.done_tail) ch.done_tail->next_ = io; else ch.done_head = io;
    ch.done_tail = io;
    return;
  }
  complete_to_user(io);
}

void Manager::complete_to_user(BdevIo* io) {
  Channel& ch = *io->ch_;
  const uint64_t now = fw_.clock().now();
  const uint64_t lat = now - io->submit_tick_;
  IoTypeStats& s = ch.stats.by_type[static_cast<std::size_t>(io->type_)];
  const bool ok = io->status_ == IoStatus::kSuccess;
  ++s.ops;
  s.latency_ticks += lat;
  if (ok) s.bytes += io->num_ * io->bdev_->props_.block_size; else ++s.errors;
  switch (io->type_) {
    case IoType::kRead: ch.stats.read_latency.record(lat); break;
    case IoType::kWrite: ch.stats.write_latency.record(lat); break;
    default: ch.stats.other_latency.record(lat); break;
  }
  --ch.outstanding;
  const IoCompletionFn cb = io->cb_;
  void* const arg = io->cb_arg_;
  cb(*io, ok, arg);
  put_io(ch, io);
}

// Resubmits waiting I/O: after a reset thaws the channel, as QoS tokens return, or after a
// module ran out of resources.
event::PollStatus Manager::channel_poll(void* ctx) {
  auto* ch = static_cast<Channel*>(ctx);
  int n = 0;
  if (ch->done_head != nullptr) {  // deferred completions, oldest first; new ones wait a turn
    BdevIo* io = ch->done_head;
    ch->done_head = ch->done_tail = nullptr;
    while (io != nullptr) {
      BdevIo* next = io->next_;
      ch->mgr->complete_to_user(io);
      io = next;
      ++n;
    }
  }
  if (ch->wait_head == nullptr || ch->frozen) {
    return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
  }
  while (ch->wait_head != nullptr && !ch->frozen) {
    BdevIo* io = ch->wait_head;
    if (io->retries_ == 0 && io->parent_ == nullptr && !io->resplit_ &&
        !qos_admit(*io->bdev_, *io))
      break;
    ch->dequeue();
    ++n;
    if (io->resplit_) {  // a split parent that ran out of bdev_ios
      io->resplit_ = false;
      ch->mgr->split_continue(io);
      continue;
    }
    if (io->parent_ == nullptr && io->retries_ == 0) {
      ch->mgr->dispatch(io);
    } else {  // a retry: already split, but its bounce buffer (if any) was given back
      if (io->bdev_->props_.required_alignment && !ch->mgr->bounce_in(io)) {
        if (ch->wait_tail == io) break;  // no bounce buffer yet: it went back in the queue
        continue;
      }
      ++ch->in_submit;
      io->bdev_->backend_->submit(*io, ch->module_ctx);
      --ch->in_submit;
      if (ch->wait_tail == io) break;  // refused again: the module is still full, stop here
    }
  }
  return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

// ---------------------------------------------------------------------------- abort ----

int Manager::abort(Desc* d, event::IoChannel* ich, void* cb_arg) {
  if (d == nullptr || ich == nullptr) return 0;
  Channel& ch = *static_cast<Channel*>(ich->ctx());
  int found = 0;
  for (BdevIo* io = ch.submitted; io != nullptr; io = io->sub_next_) {
    if (io->parent_ != nullptr || io->cb_arg_ != cb_arg || io->type_ == IoType::kReset ||
        io->abort_requested_ || io->status_ != IoStatus::kPending)
      continue;
    io->abort_requested_ = true;
    ++found;
    // A split parent makes no more children; the ones in flight end as the module decides.
    if (io->split_ && io->split_next_ < io->offset_ + io->num_ &&
        io->children_status_ == IoStatus::kSuccess)
      io->children_status_ = IoStatus::kAborted;
  }
  if (found == 0) return 0;
  ++ch.in_submit;  // what ends here reaches its callback from the channel poller
  // Waiting in the layer: it never reached the module (or waits to be given to it again).
  for (BdevIo* io = ch.wait_head; io != nullptr;) {
    BdevIo* next = io->next_;
    if (io->abort_requested()) {
      ch.unqueue(io);
      io->resplit_ = false;
      io->status_ = IoStatus::kAborted;
      io_done(*io);
    }
    io = next;
  }
  // In the module: it must not issue them again, and ends what it holds waiting. Each I/O is
  // told once; the list is walked afresh after each call, as a call may end (and release)
  // others — a released split child may already be another thread's.
  for (;;) {
    BdevIo* next = nullptr;
    for (BdevIo* io = ch.submitted; io != nullptr && next == nullptr; io = io->sub_next_)
      if (io->abort_requested() && !io->abort_told_ && !io->split_ && io->status_ == IoStatus::kPending)
        next = io;
    if (next == nullptr) break;
    next->abort_told_ = true;
    next->bdev_->backend_->abort(*next, ch.module_ctx);
  }
  --ch.in_submit;
  return found;
}

// ---------------------------------------------------------------------------- reset ----

int Manager::reset(Desc* d, event::IoChannel* ich, IoCompletionFn cb, void* arg) {
  int rc;
  BdevIo* io = prepare(d, ich, IoType::kReset, 0, 0, cb, arg, &rc);
  if (!io) return rc;
  io->submit_tick_ = fw_.clock().now();
  ++io->ch_->outstanding;
  {
    std::lock_guard lock(io->bdev_->reset_mu_);
    if (io->bdev_->resetting_) {  // one is running: this one completes with it
      io->bdev_->reset_waiters_.push_back(io);
      return 0;
    }
    io->bdev_->resetting_ = true;
  }
  // Freeze every channel (new I/O waits), then reset through the module.
  fw_.for_each_channel(
      io->bdev_,
      [](event::ChannelIter& it) {
        static_cast<Channel*>(it.channel()->ctx())->frozen = true;
        it.next(0);
      },
      io, [](void* arg, int) {
        auto* r = static_cast<BdevIo*>(arg);
        r->bdev_->backend_->submit(*r, r->ch_->module_ctx);
      });
  return 0;
}

// ---------------------------------------------------------------------------- stats ----

const IoStats& Manager::channel_stats(event::IoChannel* ich) const {
  return static_cast<const Channel*>(ich->ctx())->stats;
}

void Manager::get_stats(Bdev& b, StatsFn done, void* ctx) {
  struct Walk {
    IoStats sum;
    StatsFn done;
    void* ctx;
    Bdev* bdev;
  };
  auto* w = new Walk{{}, done, ctx, &b};
  fw_.for_each_channel(
      &b,
      [](event::ChannelIter& it) {
        static_cast<Walk*>(it.ctx())->sum.merge(static_cast<Channel*>(it.channel()->ctx())->stats);
        it.next(0);
      },
      w, [](void* arg, int) {
        auto* walk = static_cast<Walk*>(arg);
        {
          std::lock_guard lock(walk->bdev->mgr_->mu_);
          walk->sum.merge(walk->bdev->retired_);
        }
        walk->done(walk->sum, walk->ctx);
        delete walk;
      });
}

}  // namespace pollux::bdev
