// Blobstore lifecycle (init, unload), the serial metadata queue and metadata-thread I/O.
#include "driver/blob/blobstore.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "driver/blob/async.h"

namespace pollux::blob {
namespace {

constexpr uint32_t kScratchPages = 64;

}  // namespace

// One metadata I/O; `submit` is tried again on the metadata thread's next turn while the base
// has no bdev_io free (-ENOMEM: a busy or resetting base), as SPDK's io_wait does.
struct Blobstore::MdIo {
  Blobstore* bs;
  MdSubmit submit;
  Step done;
  static void cb(bdev::BdevIo&, bool success, void* arg) {
    auto* w = static_cast<MdIo*>(arg);
    auto done = std::move(w->done);
    delete w;
    done(success ? 0 : -EIO);
  }
  static void attempt(void* arg) {
    auto* w = static_cast<MdIo*>(arg);
    const int rc = w->bs->halted() ? -ENXIO : w->submit(cb, w);
    if (rc == 0) return;
    if (rc == -ENOMEM) return w->bs->md_thread_->post_local(attempt, w);
    auto done = std::move(w->done);
    delete w;
    done(rc);
  }
};

void Blobstore::md_io(MdSubmit submit, Step done) {
  MdIo::attempt(new MdIo{this, std::move(submit), std::move(done)});
}

// ------------------------------------------------------------------------------ Blob ----

uint64_t Blob::num_io_units() const {
  return md_.num_clusters * bs_->cluster_size() / bs_->io_unit_size();
}

uint64_t Blob::num_allocated_clusters() const {
  return std::count_if(md_.clusters.begin(), md_.clusters.end(), [](uint64_t c) { return c != 0; });
}

std::vector<BlobId> Blob::clones() const {
  std::vector<BlobId> out;
  for (BlobId id : bs_->blob_ids())
    if (bs_->find(id)->md_.parent == md_.id) out.push_back(id);
  return out;
}

int Blob::set_xattr(const std::string& name, const void* value, std::size_t len, bool internal) {
  if (name.empty() || name.size() > 0xffff || len > 0xffff) return -EINVAL;
  if (is_read_only() && !internal) return -EPERM;
  if (name.size() + len + 8 > kDescriptorArea) return -E2BIG;
  auto& xs = internal ? md_.internal_xattrs : md_.xattrs;
  const auto* v = static_cast<const uint8_t*>(value);
  auto it = std::find_if(xs.begin(), xs.end(), [&](const Xattr& x) { return x.name == name; });
  if (it == xs.end()) it = xs.insert(xs.end(), Xattr{name, {}});
  it->value.assign(v, v + len);
  dirty_ = true;
  return 0;
}

int Blob::get_xattr(const std::string& name, const void** value, std::size_t* len, bool internal) const {
  const auto& xs = internal ? md_.internal_xattrs : md_.xattrs;
  for (const Xattr& x : xs) {
    if (x.name != name) continue;
    *value = x.value.data();
    *len = x.value.size();
    return 0;
  }
  return -ENOENT;
}

int Blob::remove_xattr(const std::string& name, bool internal) {
  if (is_read_only() && !internal) return -EPERM;
  auto& xs = internal ? md_.internal_xattrs : md_.xattrs;
  auto it = std::find_if(xs.begin(), xs.end(), [&](const Xattr& x) { return x.name == name; });
  if (it == xs.end()) return -ENOENT;
  xs.erase(it);
  dirty_ = true;
  return 0;
}

std::vector<std::string> Blob::xattr_names(bool internal) const {
  std::vector<std::string> out;
  for (const Xattr& x : internal ? md_.internal_xattrs : md_.xattrs) out.push_back(x.name);
  return out;
}

void Blob::set_read_only() {
  if (is_read_only()) return;
  md_.flags |= kFlagReadOnly;
  io_read_only_.store(true, std::memory_order_release);
  dirty_ = true;
}

// ------------------------------------------------------------------------- lifecycle ----

Blobstore::Blobstore(bdev::Manager& mgr, bdev::Desc* desc, event::Thread* md_thread)
    : mgr_(mgr), desc_(desc), md_thread_(md_thread) {}

Blobstore::~Blobstore() {
  if (md_channel_ != nullptr) mgr_.put_io_channel(md_channel_);
  if (registered_) mgr_.framework().unregister_io_device(this, nullptr, nullptr);
  if (desc_ != nullptr) mgr_.close(desc_);
}

void Blobstore::abandon() { destroy(nullptr, nullptr); }

void Blobstore::on_base_event(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
  auto* bs = static_cast<Blobstore*>(ctx);
  if (e != bdev::DescEvent::kRemove || !bs->on_base_removed_) return;
  auto f = std::move(bs->on_base_removed_);
  bs->on_base_removed_ = nullptr;
  f();
}

void Blobstore::crash(OpDoneFn cb, void* arg) {
  halted_.store(true, std::memory_order_release);
  destroy_cb_ = cb;
  destroy_arg_ = arg;
  destroy_when_idle(this);
}

// Operations still queued or running end quickly (their I/O fails); the store goes after.
void Blobstore::destroy_when_idle(void* self) {
  auto* bs = static_cast<Blobstore*>(self);
  if (bs->op_running_ || !bs->queue_.empty()) {
    bs->md_thread_->post_local(destroy_when_idle, bs);
    return;
  }
  bs->destroy(bs->destroy_cb_, bs->destroy_arg_);
}

// Channels are released by deferred messages: the store is freed only after the last one.
void Blobstore::destroy(OpDoneFn cb, void* arg) {
  destroy_cb_ = cb;
  destroy_arg_ = arg;
  destroying_ = true;
  if (posted_runs_ != 0) {  // a posted run_next holds `this`: go after it (messages are FIFO)
    md_thread_->post_local(
        [](void* self) {
          auto* bs = static_cast<Blobstore*>(self);
          bs->destroy(bs->destroy_cb_, bs->destroy_arg_);
        },
        this);
    return;
  }
  if (!registered_) return finish_destroy(this);
  registered_ = false;
  mgr_.framework().unregister_io_device(this, finish_destroy, this);
}

void Blobstore::finish_destroy(void* self) {
  auto* bs = static_cast<Blobstore*>(self);
  const OpDoneFn cb = bs->destroy_cb_;
  void* arg = bs->destroy_arg_;
  delete bs;
  if (cb) cb(arg, 0);
}

Blobstore* Blobstore::open_store(bdev::Manager& mgr, const std::string& bdev_name,
                                 const StoreOptions& opts, int* rc) {
  event::Thread* t = event::Thread::current();
  if (t == nullptr) {
    *rc = -EINVAL;
    return nullptr;
  }
  auto* bs = new Blobstore(mgr, nullptr, t);
  auto d = mgr.open(bdev_name, true, on_base_event, bs);
  if (!d.ok()) {
    delete bs;
    *rc = d.error().code;
    return nullptr;
  }
  bs->desc_ = d.value();
  bs->on_base_removed_ = opts.on_base_removed;
  // The store owns the bdev: nobody else may write it (bdevperf and virtual bdevs skip it).
  if (int rc2 = mgr.claim(d.value(), "blobstore"); rc2 != 0) {
    delete bs;
    *rc = rc2;
    return nullptr;
  }
  *rc = bs->setup_buffers(opts);
  if (*rc != 0) {
    delete bs;
    return nullptr;
  }
  return bs;
}

int Blobstore::setup_buffers(const StoreOptions& opts) {
  const uint32_t bsz = desc_->bdev().block_size();
  if (bsz == 0 || kPageSize % bsz != 0) return -EINVAL;
  blocks_per_page_ = kPageSize / bsz;
  registry_ = opts.registry ? opts.registry : &env::MemoryRegistry::global();
  requests_per_channel_ = std::max<uint32_t>(1, opts.requests_per_channel);
  auto s = env::DmaRegion::create(*registry_, size_t{kScratchPages} * kPageSize);
  if (!s.ok()) return s.error().code;
  scratch_ = std::move(s).value();
  md_channel_ = mgr_.get_io_channel(desc_);
  return md_channel_ ? 0 : -ENOMEM;
}

void Blobstore::register_channels() {
  mgr_.framework().register_io_device(this, channel_create, channel_destroy,
                                      sizeof(Channel*), "blobstore");
  registered_ = true;
}

void Blobstore::init(bdev::Manager& mgr, const std::string& bdev_name, const StoreOptions& opts,
                     StoreDoneFn cb, void* arg) {
  int rc = 0;
  if (opts.cluster_size < kPageSize || opts.cluster_size % kPageSize != 0 ||
      opts.bstype.size() > kBstypeLen) {
    cb(arg, nullptr, -EINVAL);
    return;
  }
  Blobstore* bs = open_store(mgr, bdev_name, opts, &rc);
  if (bs == nullptr) {
    cb(arg, nullptr, rc);
    return;
  }
  SuperBlock& sb = bs->sb_;
  const bdev::Bdev& b = bs->desc_->bdev();
  sb.io_unit_size = b.block_size();
  sb.cluster_size = opts.cluster_size;
  sb.device_bytes = b.num_blocks() * b.block_size();
  sb.total_clusters = sb.device_bytes / sb.cluster_size;
  sb.md_pages = opts.md_pages ? opts.md_pages : sb.total_clusters;
  sb.page_mask_start = 1;
  sb.page_mask_pages = (mask_bytes(sb.md_pages) + kPageSize - 1) / kPageSize;
  sb.cluster_mask_start = 1 + sb.page_mask_pages;
  sb.cluster_mask_pages = (mask_bytes(sb.total_clusters) + kPageSize - 1) / kPageSize;
  sb.md_start = sb.cluster_mask_start + sb.cluster_mask_pages;
  const uint64_t pages_per_cluster = sb.cluster_size / kPageSize;
  sb.first_data_cluster = (sb.md_start + sb.md_pages + pages_per_cluster - 1) / pages_per_cluster;
  sb.bstype = opts.bstype;
  if (sb.total_clusters == 0 || sb.first_data_cluster >= sb.total_clusters ||
      sb.md_pages >= (uint64_t{1} << 31)) {
    bs->abandon();
    cb(arg, nullptr, -ENOSPC);
    return;
  }
  bs->io_units_per_cluster_ = sb.cluster_size / sb.io_unit_size;
  bs->page_mask_.assign(mask_bytes(sb.md_pages) / 8, 0);
  bs->cluster_mask_.assign(mask_bytes(sb.total_clusters) / 8, 0);
  for (uint64_t c = 0; c < sb.first_data_cluster; ++c) bs->cluster_mask_[c / 64] |= 1ull << (c % 64);
  // Old metadata must not survive into the new store: zero masks and md region, make that
  // durable, and only then write the super block that makes the region meaningful.
  const uint64_t layout_pages = sb.md_start + sb.md_pages;
  bs->zero_pages(1, layout_pages - 1, [bs, cb, arg](int rc) {
    if (rc != 0) {
      bs->abandon();
      return cb(arg, nullptr, rc);
    }
    bs->flush([bs, cb, arg](int rc) {
      if (rc != 0) {
        bs->abandon();
        return cb(arg, nullptr, rc);
      }
      bs->write_super(false, [bs, cb, arg](int rc) {
        if (rc != 0) {
          bs->abandon();
          return cb(arg, nullptr, rc);
        }
        bs->register_channels();
        cb(arg, bs, 0);
      });
    });
  });
}

void Blobstore::unload(OpDoneFn cb, void* arg) {
  for (auto& [id, b] : blobs_)
    if (b->open_refs_ > 0) return cb(arg, -EBUSY);
  if (channels_ > 0) return cb(arg, -EBUSY);
  enqueue([this, cb, arg](std::function<void()> finish) {
    write_masks([this, cb, arg, finish](int rc) {
      if (rc != 0) {
        finish();
        return cb(arg, rc);
      }
      flush([this, cb, arg, finish](int rc) {
        if (rc != 0) {
          finish();
          return cb(arg, rc);
        }
        write_super(true, [this, cb, arg, finish](int rc) {
          if (rc != 0) {
            finish();
            return cb(arg, rc);
          }
          destroy(cb, arg);  // no finish(): nothing may run on this store any more
        });
      });
    });
  });
}

// ---------------------------------------------------------------------- serial queue ----

void Blobstore::enqueue(std::function<void(std::function<void()>)> op) {
  queue_.push_back(std::move(op));
  if (!op_running_) run_next();
}

void Blobstore::enqueue_frozen(BlobId id, std::function<void(std::function<void()>)> op) {
  freeze_io(id, [this, id, op = std::move(op)]() mutable {
    enqueue([this, id, op = std::move(op)](std::function<void()> finish) {
      op([this, id, finish] {
        finish();
        thaw_io(id);
      });
    });
  });
}

void Blobstore::run_next() {
  if (op_running_ || queue_.empty()) return;
  op_running_ = true;
  auto op = std::move(queue_.front());
  queue_.pop_front();
  // The next op starts from a fresh stack frame: ops that complete inline cannot recurse.
  op([this] {
    op_running_ = false;
    ++posted_runs_;  // destroy_when_idle waits for it: the message holds `this`
    md_thread_->post_local(
        [](void* self) {
          auto* bs = static_cast<Blobstore*>(self);
          --bs->posted_runs_;
          if (!bs->destroying_) bs->run_next();
        },
        this);
  });
}

// ------------------------------------------------------------------- metadata I/O ----

void Blobstore::page_io(bool write, uint64_t page, uint32_t pages, void* buf, Step done) {
  const uint64_t lba = page * blocks_per_page_, n = uint64_t{pages} * blocks_per_page_;
  md_io([this, write, buf, lba, n](bdev::IoCompletionFn cb, void* arg) {
    return write ? mgr_.write(desc_, md_channel_, buf, lba, n, cb, arg)
                 : mgr_.read(desc_, md_channel_, buf, lba, n, cb, arg);
  }, std::move(done));
}

void Blobstore::zero_pages(uint64_t page, uint64_t pages, Step done) {
  if (pages == 0) return done(0);
  if (halted()) return done(-ENXIO);
  if (desc_->bdev().supports(bdev::IoType::kWriteZeroes)) {
    return md_io([this, page, pages](bdev::IoCompletionFn cb, void* arg) {
      return mgr_.write_zeroes(desc_, md_channel_, page * blocks_per_page_, pages * blocks_per_page_,
                               cb, arg);
    }, std::move(done));
  }
  // No write-zeroes: zero buffers, a scratch-full at a time.
  const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(pages, kScratchPages));
  std::memset(scratch_->data(), 0, size_t{n} * kPageSize);
  page_io(true, page, n, scratch_->data(), [this, page, pages, n, done](int rc) {
    if (rc != 0) return done(rc);
    zero_pages(page + n, pages - n, done);
  });
}

void Blobstore::flush(Step done) {
  if (halted()) return done(-ENXIO);
  if (!desc_->bdev().supports(bdev::IoType::kFlush)) return done(0);
  md_io([this](bdev::IoCompletionFn cb, void* arg) {
    return mgr_.flush(desc_, md_channel_, 0, desc_->bdev().num_blocks(), cb, arg);
  }, std::move(done));
}

void Blobstore::write_super(bool clean, Step done) {
  sb_.clean = clean;
  encode_super(sb_, static_cast<uint8_t*>(scratch_->data()));
  page_io(true, 0, 1, scratch_->data(), [this, done](int rc) {
    if (rc != 0) return done(rc);
    flush(done);
  });
}

// Both masks, a scratch-full at a time; their CRCs go in the super block.
void Blobstore::write_masks(Step done) {
  sb_.page_mask_crc = crc32c(page_mask_.data(), page_mask_.size() * 8);
  sb_.cluster_mask_crc = crc32c(cluster_mask_.data(), cluster_mask_.size() * 8);
  struct Chunk {
    const std::vector<uint64_t>* words;
    uint64_t disk_page, mask_page, pages;
  };
  std::vector<Chunk> chunks;
  auto cut = [&](const std::vector<uint64_t>* w, uint64_t start, uint64_t pages) {
    for (uint64_t at = 0; at < pages; at += kScratchPages)
      chunks.push_back({w, start + at, at, std::min<uint64_t>(kScratchPages, pages - at)});
  };
  cut(&page_mask_, sb_.page_mask_start, sb_.page_mask_pages);
  cut(&cluster_mask_, sb_.cluster_mask_start, sb_.cluster_mask_pages);
  for_each_step(
      chunks.size(),
      [this, chunks](std::size_t i, Step next) {
        const Chunk& c = chunks[i];
        const std::size_t bytes = c.words->size() * 8, from = c.mask_page * kPageSize;
        std::memset(scratch_->data(), 0, c.pages * kPageSize);
        if (from < bytes)
          std::memcpy(scratch_->data(), reinterpret_cast<const uint8_t*>(c.words->data()) + from,
                      std::min<std::size_t>(bytes - from, c.pages * kPageSize));
        page_io(true, c.disk_page, static_cast<uint32_t>(c.pages), scratch_->data(), next);
      },
      std::move(done));
}

// -------------------------------------------------------------------- allocation ----

Result<uint32_t> Blobstore::alloc_page() {
  for (uint64_t i = 0; i < sb_.md_pages; ++i) {
    const uint64_t p = (page_hint_ + i) % sb_.md_pages;
    if (!(page_mask_[p / 64] >> (p % 64) & 1)) {
      page_mask_[p / 64] |= 1ull << (p % 64);
      page_hint_ = p + 1;
      return static_cast<uint32_t>(p);
    }
  }
  return make_error(ENOSPC, "no free metadata page");
}

bool Blobstore::cluster_used(uint64_t c) const { return cluster_mask_[c / 64] >> (c % 64) & 1; }

uint64_t Blobstore::alloc_cluster() {
  const uint64_t span = sb_.total_clusters - sb_.first_data_cluster;
  for (uint64_t i = 0; i < span; ++i) {
    const uint64_t c = sb_.first_data_cluster + (cluster_hint_ + i) % span;
    if (!cluster_used(c)) {
      cluster_mask_[c / 64] |= 1ull << (c % 64);
      cluster_hint_ = c + 1 - sb_.first_data_cluster;
      return c;
    }
  }
  return 0;
}

void Blobstore::free_cluster(uint64_t c) { cluster_mask_[c / 64] &= ~(1ull << (c % 64)); }

uint64_t Blobstore::free_clusters() const {
  uint64_t used = 0;
  for (uint64_t w : cluster_mask_) used += std::popcount(w);
  return sb_.total_clusters - used;
}

uint64_t Blobstore::used_md_pages() const {
  uint64_t used = 0;
  for (uint64_t w : page_mask_) used += std::popcount(w);
  return used;
}

std::vector<BlobId> Blobstore::blob_ids() const {
  std::vector<BlobId> ids;
  for (const auto& [id, b] : blobs_)
    if (!b->deleting_) ids.push_back(id);
  return ids;
}

Blob* Blobstore::find(BlobId id) {
  auto it = blobs_.find(id);
  return it == blobs_.end() || it->second->deleting_ ? nullptr : it->second.get();
}

}  // namespace pollux::blob
