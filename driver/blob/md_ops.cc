// Metadata operations: each runs as one entry of the serial metadata queue.
//
// Ordering (docs/BLOBSTORE.md, "Write ordering"): data before metadata (flush), a new chain of
// pages before the old one is zeroed (copy-on-write with a higher sequence number), clusters a
// blob gave up are reused only once the metadata that gave them up is durable.
#include <algorithm>
#include <cstring>

#include "driver/blob/async.h"
#include "driver/blob/blobstore.h"

namespace pollux::blob {
namespace {

const char kSnapshotOf[] = "pollux.snapshot_of";  // internal xattr: snapshot not yet complete
const char kMergeInto[] = "pollux.merge_into";    // internal xattr: snapshot being merged

bool fits_in_page(const std::vector<Xattr>& xs) {
  for (const Xattr& x : xs)
    if (x.name.empty() || x.name.size() + x.value.size() + 8 > kDescriptorArea) return false;
  return true;
}

}  // namespace

// ------------------------------------------------------------------- in-memory blobs ----

Blob* Blobstore::add_blob(BlobMetadata md) {
  auto b = std::make_unique<Blob>();
  b->bs_ = this;
  b->md_ = std::move(md);
  b->io_read_only_.store(b->md_.flags & kFlagReadOnly);
  Blob* raw = b.get();
  blobs_[raw->md_.id] = std::move(b);
  if (raw->md_.parent != kInvalidBlobId) set_parent(raw, find(raw->md_.parent));
  publish_map(raw);
  return raw;
}

// Parent links and the clone counts that make "has clones" O(1) for delete.
void Blobstore::set_parent(Blob* b, Blob* p) {
  if (b->parent_ != nullptr) --b->parent_->clone_count_;
  b->parent_ = p;
  if (p != nullptr) ++p->clone_count_;
}

void Blobstore::forget_blob(Blob* b) {
  set_parent(b, nullptr);
  for (uint64_t c : b->md_.clusters)
    if (c != 0) free_cluster(c);
  for (uint64_t c : b->pending_free_) free_cluster(c);
  for (uint32_t p : b->md_pages_) page_mask_[p / 64] &= ~(1ull << (p % 64));
  b->map_.store(nullptr);
  blobs_.erase(b->md_.id);
}

void Blobstore::publish_map(Blob* b) {
  auto fresh = std::make_unique<ClusterMap>(b->md_.num_clusters);
  for (uint64_t i = 0; i < b->md_.num_clusters; ++i)
    fresh->at[i].store(b->md_.clusters[i], std::memory_order_relaxed);
  b->map_.store(fresh.get(), std::memory_order_release);
  ClusterMap* old = b->map_owner_.release();
  b->map_owner_ = std::move(fresh);
  if (old == nullptr) return;
  // Freed once every thread has passed a message: none is still looking at it.
  auto free_map = [](void* m) { delete static_cast<ClusterMap*>(m); };
  if (mgr_.framework().for_each_thread([](void*) {}, old, free_map) != 0) delete old;
}

void Blobstore::set_cluster(Blob* b, uint64_t blob_cluster, uint64_t dev) {
  b->md_.clusters[blob_cluster] = dev;
  b->map_.load(std::memory_order_relaxed)->at[blob_cluster].store(dev, std::memory_order_release);
  b->dirty_ = true;
}

uint64_t Blobstore::ancestor_cluster(const Blob* b, uint64_t blob_cluster) const {
  for (const Blob* a = b->parent_; a != nullptr; a = a->parent_)
    if (blob_cluster < a->md_.num_clusters && a->md_.clusters[blob_cluster] != 0)
      return a->md_.clusters[blob_cluster];
  return 0;
}

// ----------------------------------------------------------------- chain persistence ----

void Blobstore::persist(Blob* b, Step done) {
  auto pages = encode_blob(b->md_, next_seq_++);
  if (!pages.ok()) return done(pages.error().code);
  auto images = std::make_shared<std::vector<std::vector<uint8_t>>>(std::move(pages).value());
  auto where = std::make_shared<std::vector<uint32_t>>();
  for (std::size_t i = 0; i < images->size(); ++i) {
    auto p = alloc_page();
    if (!p.ok()) {
      for (uint32_t w : *where) page_mask_[w / 64] &= ~(1ull << (w % 64));
      return done(-ENOSPC);
    }
    where->push_back(p.value());
  }
  link_pages(*images, *where);
  auto undo = [this, where, done](int rc) {
    for (uint32_t w : *where) page_mask_[w / 64] &= ~(1ull << (w % 64));
    done(rc);
  };
  // 1. Data the new metadata points at is durable before the metadata.
  flush([this, b, images, where, undo, done](int rc) {
    if (rc != 0) return undo(rc);
    // 2. The new chain, in fresh pages.
    for_each_step(
        images->size(),
        [this, images, where](std::size_t i, Step next) {
          std::memcpy(scratch_->data(), (*images)[i].data(), kPageSize);
          page_io(true, sb_.md_start + (*where)[i], 1, scratch_->data(), next);
        },
        [this, b, where, undo, done](int rc) {
          if (rc != 0) return undo(rc);
          // 3. Durable: from here on the new chain is the blob.
          flush([this, b, where, undo, done](int rc) {
            if (rc != 0) return undo(rc);
            std::vector<uint32_t> old = std::move(b->md_pages_);
            b->md_pages_ = *where;
            b->dirty_ = false;
            for (uint64_t c : b->pending_free_) free_cluster(c);
            b->pending_free_.clear();
            // 4. Zero the superseded chain so no older version can come back; its pages are
            //    reused only once zeroed (a failure leaves them allocated until the next load).
            for_each_step(
                old.size(),
                [this, old](std::size_t i, Step next) { zero_pages(sb_.md_start + old[i], 1, next); },
                [this, old, done](int rc) {
                  if (rc == 0)
                    for (uint32_t p : old) page_mask_[p / 64] &= ~(1ull << (p % 64));
                  done(0);
                });
          });
        });
  });
}

void Blobstore::release_chain(Blob* b, Step done) {
  std::vector<uint32_t> pages = b->md_pages_;
  for_each_step(
      pages.size(),
      [this, pages](std::size_t i, Step next) { zero_pages(sb_.md_start + pages[i], 1, next); },
      [this, done](int rc) {
        if (rc != 0) return done(rc);
        flush(done);
      });
}

// -------------------------------------------------------------- cluster data moves ----

void Blobstore::clear_clusters(const std::vector<uint64_t>& clusters, ClearMethod m, Step done) {
  const bdev::Bdev& bd = desc_->bdev();
  const bool zeroes = m == ClearMethod::kWriteZeroes && bd.supports(bdev::IoType::kWriteZeroes);
  const bool unmap = (m == ClearMethod::kDefault || m == ClearMethod::kUnmap) &&
                     bd.supports(bdev::IoType::kUnmap);
  if (!zeroes && !unmap) return done(0);
  // Runs of consecutive clusters, one command each.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (uint64_t c : clusters) {
    if (!runs.empty() && runs.back().first + runs.back().second == c) ++runs.back().second;
    else runs.push_back({c, 1});
  }
  for_each_step(
      runs.size(),
      [this, runs, zeroes](std::size_t i, Step next) {
        const uint64_t lba = runs[i].first * io_units_per_cluster_;
        const uint64_t n = runs[i].second * io_units_per_cluster_;
        md_io([this, zeroes, lba, n](bdev::IoCompletionFn cb, void* arg) {
          return zeroes ? mgr_.write_zeroes(desc_, md_channel_, lba, n, cb, arg)
                        : mgr_.unmap(desc_, md_channel_, lba, n, cb, arg);
        }, next);
      },
      done);
}

// dst gets what the blob's ancestors hold at blob_cluster (or zeroes).
void Blobstore::copy_cluster(Blob* b, uint64_t blob_cluster, uint64_t dst, Step done) {
  if (!copy_buf_) {
    auto r = env::DmaRegion::create(*registry_, sb_.cluster_size);
    if (!r.ok()) return done(r.error().code);
    copy_buf_ = std::move(r).value();
  }
  const uint64_t src = ancestor_cluster(b, blob_cluster);
  const uint64_t pages = sb_.cluster_size / kPageSize;
  auto write_dst = [this, dst, pages, done](int rc) {
    if (rc != 0) return done(rc);
    page_io(true, dst * pages, static_cast<uint32_t>(pages), copy_buf_->data(), done);
  };
  if (src == 0) {
    std::memset(copy_buf_->data(), 0, sb_.cluster_size);
    return write_dst(0);
  }
  page_io(false, src * pages, static_cast<uint32_t>(pages), copy_buf_->data(), write_dst);
}

void Blobstore::allocate_missing(Blob* b, bool only_parent_owned, Step done) {
  const Blob* parent = b->parent_;
  for_each_step(
      b->md_.num_clusters,
      [this, b, parent, only_parent_owned](std::size_t c, Step next) {
        if (b->md_.clusters[c] != 0) return next(0);
        if (only_parent_owned &&
            (parent == nullptr || c >= parent->md_.num_clusters || parent->md_.clusters[c] == 0))
          return next(0);
        const uint64_t dev = alloc_cluster();
        if (dev == 0) return next(-ENOSPC);
        copy_cluster(b, c, dev, [this, b, c, dev, next](int rc) {
          if (rc != 0) {
            free_cluster(dev);
            return next(rc);
          }
          set_cluster(b, c, dev);
          next(0);
        });
      },
      done);
}

// ---------------------------------------------------------------------- operations ----

void Blobstore::create_blob(const BlobOptions& opts, BlobIdDoneFn cb, void* arg) {
  enqueue([this, opts, cb, arg](std::function<void()> finish) {
    auto fail = [cb, arg, finish](int rc) {
      finish();
      cb(arg, kInvalidBlobId, rc);
    };
    if (opts.num_clusters > kMaxBlobClusters || !fits_in_page(opts.xattrs)) return fail(-EINVAL);
    BlobMetadata md;
    md.id = next_blob_id();
    md.flags = opts.thin ? uint64_t{kFlagThin} : 0;
    md.clear_method = opts.clear_method;
    md.num_clusters = opts.num_clusters;
    md.clusters.assign(opts.num_clusters, 0);
    md.xattrs = opts.xattrs;
    std::vector<uint64_t> fresh;
    if (!opts.thin) {
      for (uint64_t i = 0; i < opts.num_clusters; ++i) {
        const uint64_t c = alloc_cluster();
        if (c == 0) {
          for (uint64_t f : fresh) free_cluster(f);
          return fail(-ENOSPC);
        }
        fresh.push_back(c);
        md.clusters[i] = c;
      }
    }
    Blob* b = add_blob(std::move(md));
    const BlobId id = b->md_.id;
    b->dirty_ = true;
    clear_clusters(fresh, opts.clear_method, [this, b, id, cb, arg, finish](int rc) {
      if (rc != 0) {
        forget_blob(b);
        finish();
        return cb(arg, kInvalidBlobId, rc);
      }
      persist(b, [this, b, id, cb, arg, finish](int rc) {
        if (rc != 0) forget_blob(b);
        finish();
        cb(arg, rc == 0 ? id : kInvalidBlobId, rc);
      });
    });
  });
}

void Blobstore::open_blob(BlobId id, BlobDoneFn cb, void* arg) {
  enqueue([this, id, cb, arg](std::function<void()> finish) {
    Blob* b = find(id);
    if (b != nullptr) ++b->open_refs_;
    finish();
    cb(arg, b, b ? 0 : -ENOENT);
  });
}

void Blobstore::close_blob(Blob* b, OpDoneFn cb, void* arg) {
  enqueue([this, b, cb, arg](std::function<void()> finish) {
    if (b->open_refs_ == 0) {
      finish();
      return cb(arg, -EINVAL);
    }
    auto closed = [b, cb, arg, finish](int rc) {
      if (rc == 0) --b->open_refs_;
      finish();
      cb(arg, rc);
    };
    if (b->dirty_) return persist(b, closed);
    closed(0);
  });
}

void Blobstore::resize(Blob* b, uint64_t n, OpDoneFn cb, void* arg) {
  enqueue_frozen(b->id(), [this, b, n, cb, arg](std::function<void()> finish) {
    auto done = [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    };
    if (b->is_read_only()) return done(-EPERM);
    if (n > kMaxBlobClusters) return done(-EINVAL);
    const uint64_t old = b->md_.num_clusters;
    std::vector<uint64_t> fresh;
    if (n > old && !b->is_thin()) {
      for (uint64_t i = old; i < n; ++i) {
        const uint64_t c = alloc_cluster();
        if (c == 0) {
          for (uint64_t f : fresh) free_cluster(f);
          return done(-ENOSPC);
        }
        fresh.push_back(c);
      }
    }
    for (uint64_t i = n; i < old; ++i)  // reusable once the smaller size is durable
      if (b->md_.clusters[i] != 0) b->pending_free_.push_back(b->md_.clusters[i]);
    b->md_.clusters.resize(n, 0);
    for (uint64_t i = old; i < n && !fresh.empty(); ++i) b->md_.clusters[i] = fresh[i - old];
    b->md_.num_clusters = n;
    b->dirty_ = true;
    publish_map(b);
    clear_clusters(fresh, b->md_.clear_method, done);
  });
}

void Blobstore::sync_md(Blob* b, OpDoneFn cb, void* arg) {
  enqueue([this, b, cb, arg](std::function<void()> finish) {
    auto done = [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    };
    if (b->dirty_ || b->md_pages_.empty()) return persist(b, done);
    flush(done);  // nothing new in the metadata: completed writes still become durable
  });
}

void Blobstore::delete_blob(BlobId id, OpDoneFn cb, void* arg) {
  // A snapshot with one clone is merged into it (the clone's I/O frozen meanwhile).
  const Blob* s = find(id);
  const BlobId only_clone = s != nullptr && s->clone_count_ == 1 ? s->clones().front() : kInvalidBlobId;
  enqueue_frozen(only_clone, [this, id, cb, arg](std::function<void()> finish) {
    auto done = [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    };
    Blob* b = find(id);
    if (b == nullptr) return done(-ENOENT);
    if (b->open_refs_ > 0 || b->clone_count_ > 1) return done(-EBUSY);
    if (b->clone_count_ == 1) return merge_into_clone(b, done);
    b->deleting_ = true;
    // Flush first: zeroings of this blob's superseded chains that are still in a volatile
    // cache must not come undone while the live chain is being zeroed (the old version would
    // be the only complete one left).
    flush([this, b, done](int rc) {
      if (rc != 0) {
        b->deleting_ = false;
        return done(rc);
      }
      release_chain(b, [this, b, done](int rc) {
      if (rc != 0) {
        b->deleting_ = false;
        return done(rc);
      }
      if (sb_.super_blob == b->md_.id) sb_.super_blob = kInvalidBlobId;
        forget_blob(b);  // the chain is durably gone: its clusters are free at once
        done(0);
      });
    });
  });
}

// Deleting snapshot s whose only clone is c: c takes the clusters it reads through s, and
// s's parent. Three steps, each durable before the next; a load after a crash completes or
// rolls back the merge from the mark on s (load.cc, step 3):
//   1. s is marked "merging into c" (its clusters are still only its own);
//   2. c's new metadata owns the clusters it took and names s's parent: from here on the
//      merge is done — a load drops a marked s whose clone no longer names it;
//   3. s's chain is zeroed; the clusters c did not take (c had its own copy) are free.
void Blobstore::merge_into_clone(Blob* s, Step done) {
  Blob* c = find(s->clones().front());
  Xattr mark{kMergeInto, std::vector<uint8_t>(8)};
  const BlobId cid = c->md_.id;
  std::memcpy(mark.value.data(), &cid, 8);
  s->md_.internal_xattrs.push_back(mark);
  s->deleting_ = true;
  persist(s, [this, s, c, done](int rc) {
    if (rc != 0) {
      s->remove_xattr(kMergeInto, true);  // dirty: a later persist clears the mark
      s->deleting_ = false;
      return done(rc);
    }
    const BlobMetadata saved = c->md_;
    std::vector<uint64_t> taken(s->md_.num_clusters, 0);
    if (c->md_.clusters.size() < s->md_.clusters.size()) c->md_.clusters.resize(s->md_.clusters.size(), 0);
    for (uint64_t i = 0; i < s->md_.num_clusters && i < c->md_.num_clusters; ++i) {
      if (c->md_.clusters[i] == 0 && s->md_.clusters[i] != 0) {
        c->md_.clusters[i] = taken[i] = s->md_.clusters[i];
      }
    }
    c->md_.clusters.resize(c->md_.num_clusters);
    c->md_.parent = s->md_.parent;
    if (s->parent_ == nullptr) c->md_.flags &= ~kFlagClone;
    set_parent(c, s->parent_);
    publish_map(c);
    persist(c, [this, s, c, saved, taken, done](int rc) {
      if (rc != 0) {  // c is as it was; s keeps its mark until it is persisted again
        c->md_ = saved;
        set_parent(c, s);
        publish_map(c);
        s->remove_xattr(kMergeInto, true);
        s->deleting_ = false;
        return done(rc);
      }
      for (uint64_t i = 0; i < taken.size(); ++i)
        if (taken[i] != 0) s->md_.clusters[i] = 0;  // c's now: not freed with s
      release_chain(s, [this, s, done](int) {
        // Done even if the zeroing failed: c owns what it took, and a load drops a marked
        // snapshot whose clone no longer names it.
        if (sb_.super_blob == s->md_.id) sb_.super_blob = kInvalidBlobId;
        forget_blob(s);
        done(0);
      });
    });
  });
}

void Blobstore::do_snapshot(Blob* b, std::vector<Xattr> xattrs,
                            std::function<void(BlobId, int)> done) {
  // 1. The snapshot takes the blob's clusters, marked incomplete (load rolls it back unless
  //    the blob's new metadata names it as parent).
  BlobMetadata md;
  md.id = next_blob_id();
  md.flags = kFlagReadOnly | kFlagSnapshot | (b->md_.flags & (kFlagThin | kFlagClone));
  md.parent = b->md_.parent;
  md.num_clusters = b->md_.num_clusters;
  md.clusters = b->md_.clusters;
  md.xattrs = std::move(xattrs);
  BlobId target = b->md_.id;
  Xattr pending{kSnapshotOf, std::vector<uint8_t>(8)};
  std::memcpy(pending.value.data(), &target, 8);
  md.internal_xattrs.push_back(pending);
  Blob* s = add_blob(std::move(md));
  persist(s, [this, b, s, done](int rc) {
    if (rc != 0) {
      s->md_.clusters.assign(s->md_.num_clusters, 0);  // they are still the blob's
      forget_blob(s);
      return done(kInvalidBlobId, rc);
    }
    // 2. The blob becomes an empty thin clone of the snapshot.
    const BlobMetadata saved = b->md_;
    Blob* saved_parent = b->parent_;
    b->md_.clusters.assign(b->md_.num_clusters, 0);
    b->md_.flags |= kFlagThin | kFlagClone;
    b->md_.parent = s->md_.id;
    set_parent(b, s);
    publish_map(b);
    persist(b, [this, b, s, saved, saved_parent, done](int rc) {
      if (rc != 0) {
        b->md_ = saved;
        set_parent(b, saved_parent);
        publish_map(b);
        s->md_.clusters.assign(s->md_.num_clusters, 0);
        return release_chain(s, [this, s, rc, done](int) {
          forget_blob(s);
          done(kInvalidBlobId, rc);
        });
      }
      // 3. Complete.
      s->remove_xattr(kSnapshotOf, true);
      persist(s, [s, done](int rc) { done(s->md_.id, rc); });
    });
  });
}

void Blobstore::snapshot(BlobId id, std::vector<Xattr> xattrs, BlobIdDoneFn cb, void* arg) {
  enqueue_frozen(id, [this, id, xattrs = std::move(xattrs), cb, arg](std::function<void()> finish) mutable {
    Blob* b = find(id);
    const int rc = b == nullptr ? -ENOENT
                   : b->is_snapshot() || !fits_in_page(xattrs) ? -EINVAL
                                                               : 0;
    if (rc != 0) {
      finish();
      return cb(arg, kInvalidBlobId, rc);
    }
    do_snapshot(b, std::move(xattrs), [cb, arg, finish](BlobId sid, int rc) {
      finish();
      cb(arg, sid, rc);
    });
  });
}

void Blobstore::clone(BlobId snapshot_id, std::vector<Xattr> xattrs, BlobIdDoneFn cb, void* arg) {
  enqueue([this, snapshot_id, xattrs = std::move(xattrs), cb, arg](std::function<void()> finish) {
    auto fail = [cb, arg, finish](int rc) {
      finish();
      cb(arg, kInvalidBlobId, rc);
    };
    Blob* s = find(snapshot_id);
    if (s == nullptr) return fail(-ENOENT);
    if (!s->is_read_only() || !fits_in_page(xattrs)) return fail(-EINVAL);
    BlobMetadata md;
    md.id = next_blob_id();
    md.flags = kFlagThin | kFlagClone;
    md.parent = s->md_.id;
    md.num_clusters = s->md_.num_clusters;
    md.clusters.assign(md.num_clusters, 0);
    md.xattrs = xattrs;
    Blob* c = add_blob(std::move(md));
    c->dirty_ = true;
    persist(c, [this, c, cb, arg, finish](int rc) {
      const BlobId id = c->md_.id;
      if (rc != 0) forget_blob(c);
      finish();
      cb(arg, rc == 0 ? id : kInvalidBlobId, rc);
    });
  });
}

void Blobstore::inflate(BlobId id, OpDoneFn cb, void* arg) {
  enqueue_frozen(id, [this, id, cb, arg](std::function<void()> finish) {
    auto done = [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    };
    Blob* b = find(id);
    if (b == nullptr) return done(-ENOENT);
    if (b->is_read_only()) return done(-EPERM);
    allocate_missing(b, false, [this, b, done](int rc) {
      if (rc != 0) return done(rc);
      b->md_.flags &= ~(kFlagThin | kFlagClone);
      b->md_.parent = kInvalidBlobId;
      set_parent(b, nullptr);
      b->dirty_ = true;
      persist(b, done);
    });
  });
}

void Blobstore::decouple_parent(BlobId id, OpDoneFn cb, void* arg) {
  enqueue_frozen(id, [this, id, cb, arg](std::function<void()> finish) {
    auto done = [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    };
    Blob* b = find(id);
    if (b == nullptr) return done(-ENOENT);
    if (b->is_read_only()) return done(-EPERM);
    if (b->parent_ == nullptr) return done(-EINVAL);
    allocate_missing(b, true, [this, b, done](int rc) {
      if (rc != 0) return done(rc);
      Blob* grandparent = b->parent_->parent_;
      b->md_.parent = grandparent ? grandparent->md_.id : kInvalidBlobId;
      if (grandparent == nullptr) b->md_.flags &= ~kFlagClone;
      set_parent(b, grandparent);
      b->dirty_ = true;
      persist(b, done);
    });
  });
}

void Blobstore::set_super_blob(BlobId id, OpDoneFn cb, void* arg) {
  enqueue([this, id, cb, arg](std::function<void()> finish) {
    if (id != kInvalidBlobId && find(id) == nullptr) {
      finish();
      return cb(arg, -ENOENT);
    }
    sb_.super_blob = id;
    write_super(false, [cb, arg, finish](int rc) {
      finish();
      cb(arg, rc);
    });
  });
}

}  // namespace pollux::blob
