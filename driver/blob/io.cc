// The blob I/O path: per-thread channels with a fixed pool of requests; a request walks its
// range cluster by cluster, maps each piece through the blob's cluster map (read lock-free)
// and submits it to the bdev. Unallocated pieces read from the nearest ancestor that has
// them, or as zeroes; a write there first gets a cluster from the metadata thread.
#include <algorithm>
#include <cstring>

#include "driver/blob/blobstore.h"

namespace pollux::blob {

enum Op : int { kRead, kWrite, kWriteZeroes, kUnmap };

struct Blobstore::Request {
  Channel* ch = nullptr;
  Blob* blob = nullptr;
  int op = kRead;
  iovec iov[bdev::BdevIo::kMaxIovs];
  int iovcnt = 0;
  uint64_t offset = 0, remaining = 0;  // io_units still to submit
  uint64_t payload_at = 0;             // bytes of the payload already given out
  int outstanding = 0;
  int status = 0;
  bool looping = false;   // inside advance(): completions must not finish the request
  bool waiting = false;   // for a cluster, or for bdev_ios
  uint64_t want_cluster = 0;
  int alloc_status = 0;
  OpDoneFn cb = nullptr;
  void* arg = nullptr;
  Request* next = nullptr;
  bool active = false;  // dispatched and not finished (what a freeze waits for)
};

struct Blobstore::Channel {
  Blobstore* bs = nullptr;
  event::IoChannel* base = nullptr;
  event::Thread* thread = nullptr;
  std::vector<Request> requests;
  Request* free = nullptr;
  Request *parked = nullptr, *parked_tail = nullptr;  // submitted to a frozen blob, in order
};

namespace {

// The iovec pieces covering [skip, skip+len) of src into dst; -1 if more than max.
int slice(const iovec* src, int n, uint64_t skip, uint64_t len, iovec* dst, int max) {
  int out = 0;
  for (int i = 0; i < n && len > 0; ++i) {
    if (skip >= src[i].iov_len) {
      skip -= src[i].iov_len;
      continue;
    }
    if (out == max) return -1;
    const uint64_t take = std::min<uint64_t>(src[i].iov_len - skip, len);
    dst[out++] = {static_cast<uint8_t*>(src[i].iov_base) + skip, take};
    len -= take;
    skip = 0;
  }
  return len == 0 ? out : -1;
}

uint64_t cluster_of(const Blob* b, uint64_t cl) { return b->device_cluster(cl); }

}  // namespace

int Blobstore::channel_create(void* io_device, void* ctx) {
  auto* bs = static_cast<Blobstore*>(io_device);
  auto* ch = new Channel;
  ch->bs = bs;
  ch->thread = event::Thread::current();
  ch->base = bs->mgr_.get_io_channel(bs->desc_);
  if (ch->base == nullptr) {
    delete ch;
    return -ENOMEM;
  }
  ch->requests.resize(bs->requests_per_channel_);
  for (Request& r : ch->requests) {
    r.ch = ch;
    r.next = ch->free;
    ch->free = &r;
  }
  *static_cast<Channel**>(ctx) = ch;
  bs->channels_.fetch_add(1);
  return 0;
}

void Blobstore::channel_destroy(void* io_device, void* ctx) {
  auto* bs = static_cast<Blobstore*>(io_device);
  Channel* ch = *static_cast<Channel**>(ctx);
  bs->mgr_.put_io_channel(ch->base);
  delete ch;
  bs->channels_.fetch_sub(1);
}

event::IoChannel* Blobstore::alloc_io_channel() { return mgr_.framework().get_io_channel(this); }
void Blobstore::free_io_channel(event::IoChannel* ch) { mgr_.framework().put_io_channel(ch); }

int Blobstore::submit(Blob* b, event::IoChannel* ich, int op, const iovec* iov, int iovcnt,
                      uint64_t offset, uint64_t len, OpDoneFn cb, void* arg) {
  if (b == nullptr || ich == nullptr || len == 0) return -EINVAL;
  const bool data = op == kRead || op == kWrite;
  if (data) {
    if (iovcnt <= 0 || iovcnt > bdev::BdevIo::kMaxIovs) return -EINVAL;
    uint64_t bytes = 0;
    for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
    if (bytes < len * sb_.io_unit_size) return -EINVAL;
  }
  const ClusterMap* m = b->map_.load(std::memory_order_acquire);
  if (m == nullptr || offset > m->count * io_units_per_cluster_ ||
      len > m->count * io_units_per_cluster_ - offset)
    return -EINVAL;
  if (op != kRead && b->io_read_only_.load(std::memory_order_acquire)) return -EPERM;
  Channel* ch = *static_cast<Channel**>(ich->ctx());
  Request* r = ch->free;
  if (r == nullptr) return -ENOMEM;
  ch->free = r->next;
  r->blob = b;
  r->op = op;
  if (data) std::copy(iov, iov + iovcnt, r->iov);
  r->iovcnt = data ? iovcnt : 0;
  r->offset = offset;
  r->remaining = len;
  r->payload_at = 0;
  r->outstanding = 0;
  r->status = 0;
  r->waiting = false;
  r->cb = cb;
  r->arg = arg;
  if (b->frozen_.load(std::memory_order_acquire) > 0) {  // waits for the thaw, in order
    r->next = nullptr;
    if (ch->parked_tail != nullptr) ch->parked_tail->next = r;
    else ch->parked = r;
    ch->parked_tail = r;
    return 0;
  }
  r->active = true;
  advance(r);
  return 0;
}

void Blobstore::advance(Request* r) {
  Blobstore* bs = r->ch->bs;
  const uint64_t upc = bs->io_units_per_cluster_;
  const uint64_t unit = bs->sb_.io_unit_size;
  r->looping = true;
  while (r->remaining > 0 && r->status == 0) {
    const uint64_t cl = r->offset / upc, within = r->offset % upc;
    const uint64_t n = std::min(r->remaining, upc - within);
    uint64_t dev = cluster_of(r->blob, cl);
    const Blob* holder = r->blob;
    if (dev == 0 && r->op != kUnmap)  // the nearest ancestor that has it
      for (const Blob* a = r->blob->parent_; a != nullptr && dev == 0; a = a->parent_)
        if ((dev = cluster_of(a, cl)) != 0) holder = a;
    if (holder != r->blob && r->op != kRead) {
      dev = 0;  // an ancestor's cluster is never written: the blob gets its own copy first
    }
    const bool own = holder == r->blob && dev != 0;
    if ((r->op == kWrite && !own) || (r->op == kWriteZeroes && !own && holder != r->blob)) {
      r->waiting = true;
      r->want_cluster = cl;
      r->looping = false;
      bs->request_cluster(r, cl);
      return;
    }
    int rc = 0;
    bool sent = false;
    bdev::Manager& mgr = bs->mgr_;
    const uint64_t lba = dev * upc + within;
    if (dev == 0) {
      // Nothing stored anywhere: reads see zeroes, zeroes and unmaps have nothing to do.
      if (r->op == kRead) {
        iovec piece[bdev::BdevIo::kMaxIovs];
        const int k = slice(r->iov, r->iovcnt, r->payload_at, n * unit, piece, bdev::BdevIo::kMaxIovs);
        for (int i = 0; i < k; ++i) std::memset(piece[i].iov_base, 0, piece[i].iov_len);
      }
    } else if (bs->halted()) {
      rc = -ENXIO;  // crashed: nothing more reaches the base
    } else if (r->op == kRead || r->op == kWrite) {
      iovec piece[bdev::BdevIo::kMaxIovs];
      const int k = slice(r->iov, r->iovcnt, r->payload_at, n * unit, piece, bdev::BdevIo::kMaxIovs);
      if (k < 0) {
        rc = -EINVAL;
      } else {
        sent = true;
        ++r->outstanding;
        rc = r->op == kRead ? mgr.readv(bs->desc_, r->ch->base, piece, k, lba, n, segment_done, r)
                            : mgr.writev(bs->desc_, r->ch->base, piece, k, lba, n, segment_done, r);
      }
    } else {
      sent = true;
      ++r->outstanding;
      rc = r->op == kWriteZeroes
               ? mgr.write_zeroes(bs->desc_, r->ch->base, lba, n, segment_done, r)
               : mgr.unmap(bs->desc_, r->ch->base, lba, n, segment_done, r);
    }
    if (rc != 0 && sent) --r->outstanding;
    if (rc == -ENOMEM) {  // out of bdev_ios: try this piece again next iteration
      r->waiting = true;
      r->looping = false;
      r->ch->thread->post_local(resume, r);
      return;
    }
    if (rc != 0) {
      r->status = rc;
      break;
    }
    r->offset += n;
    r->remaining -= n;
    r->payload_at += n * unit;
  }
  r->looping = false;
  finish_if_done(r);
}

void Blobstore::finish_if_done(Request* r) {
  if (r->looping || r->waiting || r->outstanding > 0) return;
  if (r->remaining > 0 && r->status == 0) return;
  const OpDoneFn cb = r->cb;
  void* arg = r->arg;
  const int status = r->status;
  r->active = false;
  r->next = r->ch->free;  // back in the pool before the callback, which may submit again
  r->ch->free = r;
  cb(arg, status);
}

void Blobstore::segment_done(bdev::BdevIo&, bool ok, void* arg) {
  auto* r = static_cast<Request*>(arg);
  --r->outstanding;
  if (!ok && r->status == 0) r->status = -EIO;
  finish_if_done(r);
}

// ---- first write to an unallocated cluster: the metadata thread allocates (and fills) ----

void Blobstore::request_cluster(Request* r, uint64_t) {
  mgr_.framework().send_reliably(md_thread_, allocate_on_md_thread, r);
}

void Blobstore::allocate_on_md_thread(void* arg) {
  auto* r = static_cast<Request*>(arg);
  Blobstore* bs = r->ch->bs;
  bs->enqueue([bs, r](std::function<void()> finish) {
    auto reply = [bs, r, finish](int rc) {
      r->alloc_status = rc;
      finish();
      bs->mgr_.framework().send_reliably(r->ch->thread, resume, r);
    };
    Blob* b = r->blob;
    const uint64_t cl = r->want_cluster;
    if (b->md_.clusters[cl] != 0) return reply(0);  // another writer got it first
    const uint64_t dev = bs->alloc_cluster();
    if (dev == 0) return reply(-ENOSPC);
    // The allocation is durable before the write that needed it completes (as SPDK's
    // blobstore does): an acknowledged write never depends on a later sync_md, so a crash
    // of the host, or power loss on a base without a volatile cache, keeps it.
    bs->copy_cluster(b, cl, dev, [bs, b, cl, dev, reply](int rc) {
      if (rc != 0) {
        bs->free_cluster(dev);
        return reply(rc);
      }
      bs->set_cluster(b, cl, dev);
      // On failure the map stays (the blob is dirty: a later sync persists it); the write
      // fails, so nothing acknowledged depends on it.
      bs->persist(b, reply);
    });
  });
}

void Blobstore::resume(void* arg) {
  auto* r = static_cast<Request*>(arg);
  r->waiting = false;
  if (r->alloc_status != 0 && r->status == 0) r->status = r->alloc_status;
  r->alloc_status = 0;
  advance(r);
}

// ------------------------------------------------------------------------ entry points ----

int Blobstore::read(Blob* b, event::IoChannel* ch, void* buf, uint64_t off, uint64_t len,
                    OpDoneFn cb, void* arg) {
  const iovec v{buf, len * sb_.io_unit_size};
  return submit(b, ch, kRead, &v, 1, off, len, cb, arg);
}
int Blobstore::write(Blob* b, event::IoChannel* ch, const void* buf, uint64_t off, uint64_t len,
                     OpDoneFn cb, void* arg) {
  const iovec v{const_cast<void*>(buf), len * sb_.io_unit_size};
  return submit(b, ch, kWrite, &v, 1, off, len, cb, arg);
}
int Blobstore::readv(Blob* b, event::IoChannel* ch, const iovec* iov, int n, uint64_t off,
                     uint64_t len, OpDoneFn cb, void* arg) {
  return submit(b, ch, kRead, iov, n, off, len, cb, arg);
}
int Blobstore::writev(Blob* b, event::IoChannel* ch, const iovec* iov, int n, uint64_t off,
                      uint64_t len, OpDoneFn cb, void* arg) {
  return submit(b, ch, kWrite, iov, n, off, len, cb, arg);
}
int Blobstore::write_zeroes(Blob* b, event::IoChannel* ch, uint64_t off, uint64_t len,
                            OpDoneFn cb, void* arg) {
  return submit(b, ch, kWriteZeroes, nullptr, 0, off, len, cb, arg);
}
int Blobstore::unmap(Blob* b, event::IoChannel* ch, uint64_t off, uint64_t len, OpDoneFn cb,
                     void* arg) {
  return submit(b, ch, kUnmap, nullptr, 0, off, len, cb, arg);
}

}  // namespace pollux::blob

namespace pollux::blob {

// ------------------------------------------------------------------------ freeze / thaw ----

// Per channel, on its thread: waits until no request of the blob is in flight there.
struct Blobstore::Freeze {
  Blobstore* bs;
  BlobId id;
  std::function<void()> then;
};

void Blobstore::freeze_io(BlobId id, std::function<void()> then) {
  Blob* b = find(id);
  if (b == nullptr) return then();
  b->frozen_.fetch_add(1, std::memory_order_acq_rel);
  if (channels_.load() == 0) return then();  // no channel: no I/O to wait for or to park
  auto* f = new Freeze{this, id, std::move(then)};
  mgr_.framework().for_each_channel(this, drain_channel, f, [](void* ctx, int) {
    auto* f = static_cast<Freeze*>(ctx);
    auto then = std::move(f->then);
    delete f;
    then();
  });
}

void Blobstore::drain_channel(event::ChannelIter& it) {
  auto* f = static_cast<Freeze*>(it.ctx());
  Channel* ch = *static_cast<Channel**>(it.channel()->ctx());
  const Blob* b = f->bs->find(f->id);
  bool busy = false;
  for (const Request& r : ch->requests) busy |= r.active && r.blob == b;
  if (!busy || b == nullptr) return it.next(0);
  // Rare (a metadata change of a blob under I/O): look again after this thread's other work.
  ch->thread->post_local([](void* a) { drain_channel(*static_cast<event::ChannelIter*>(a)); }, &it);
}

void Blobstore::thaw_io(BlobId id) {
  Blob* b = find(id);
  // Also on a store being destroyed (crash): its channels may still hold parked requests.
  if (b == nullptr || b->frozen_.fetch_sub(1, std::memory_order_acq_rel) != 1 || channels_.load() == 0)
    return;
  auto* f = new Freeze{this, id, nullptr};
  mgr_.framework().for_each_channel(this, resume_parked, f,
                                    [](void* ctx, int) { delete static_cast<Freeze*>(ctx); });
}

// Requests of the thawed blob go on, in the order they came; others stay parked.
void Blobstore::resume_parked(event::ChannelIter& it) {
  auto* f = static_cast<Freeze*>(it.ctx());
  Channel* ch = *static_cast<Channel**>(it.channel()->ctx());
  const Blob* b = f->bs->find(f->id);
  Request* go = nullptr;
  Request** go_tail = &go;
  Request* keep = nullptr;
  Request** keep_tail = &keep;
  ch->parked_tail = nullptr;
  for (Request* r = ch->parked; r != nullptr;) {
    Request* next = r->next;
    r->next = nullptr;
    if (r->blob == b && b->frozen_.load(std::memory_order_acquire) == 0) {
      *go_tail = r;
      go_tail = &r->next;
    } else {
      *keep_tail = r;
      keep_tail = &r->next;
      ch->parked_tail = r;
    }
    r = next;
  }
  ch->parked = keep;
  while (go != nullptr) {
    Request* r = go;
    go = r->next;
    r->active = true;
    advance(r);
  }
  it.next(0);
}

}  // namespace pollux::blob
