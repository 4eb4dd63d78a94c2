// Loading: the super block, then every metadata page. Clean or not, the in-memory state is
// rebuilt from the pages themselves (the masks on disk are only cross-checked), so a load
// after a crash is the same code as any other: pick each blob's newest complete chain, check
// it, finish or roll back half-made snapshots, check that no cluster has two owners, zero
// what is left over, and mark the store dirty again before handing it out.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "driver/blob/async.h"
#include "driver/blob/blobstore.h"

namespace pollux::blob {
namespace {

constexpr uint32_t kChunkPages = 64;
const char kSnapshotOf[] = "pollux.snapshot_of";
const char kMergeInto[] = "pollux.merge_into";

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// One memcmp, not a loop over bytes: a load checks every md page that is not in use.
bool all_zero(const uint8_t* p) {
  static const uint8_t kZeroPage[kPageSize] = {};
  return std::memcmp(p, kZeroPage, kPageSize) == 0;
}

struct Version {
  uint32_t count = 0;
  std::vector<uint32_t> pages;  // md-region index per chain position, kNoPage if missing
  bool conflict = false;
};

}  // namespace

void Blobstore::load(bdev::Manager& mgr, const std::string& bdev_name, const StoreOptions& opts,
                     StoreDoneFn cb, void* arg) {
  int rc = 0;
  Blobstore* bs = open_store(mgr, bdev_name, opts, &rc);
  if (bs == nullptr) return cb(arg, nullptr, rc);
  bs->load_super(cb, arg, opts.bstype);
}

void Blobstore::load_super(StoreDoneFn cb, void* arg, std::string bstype) {
  auto fail = [this, cb, arg](int rc, const std::string& why) {
    (void)why;
    abandon();
    cb(arg, nullptr, rc);
  };
  page_io(false, 0, 1, scratch_->data(), [this, fail, cb, arg, bstype](int rc) {
    if (rc != 0) return fail(rc, "super block unreadable");
    auto sb = decode_super(static_cast<const uint8_t*>(scratch_->data()));
    if (!sb.ok()) return fail(sb.error().code, sb.error().message);
    const bdev::Bdev& b = desc_->bdev();
    if (sb->io_unit_size != b.block_size() || sb->device_bytes != b.num_blocks() * b.block_size())
      return fail(-EILSEQ, "the bdev's geometry changed");
    if (!bstype.empty() && bstype != sb->bstype) return fail(-ENXIO, "bstype mismatch");
    sb_ = sb.value();
    report_.was_clean = sb_.clean;
    io_units_per_cluster_ = sb_.cluster_size / sb_.io_unit_size;
    page_mask_.assign(mask_bytes(sb_.md_pages) / 8, 0);
    cluster_mask_.assign(mask_bytes(sb_.total_clusters) / 8, 0);
    load_md_region(cb, arg);
  });
}

void Blobstore::load_md_region(StoreDoneFn cb, void* arg) {
  // Masks (cross-check only) and the md region are contiguous after the super block.
  const uint64_t first = sb_.page_mask_start, pages = sb_.md_start + sb_.md_pages - first;
  auto region = std::make_shared<std::vector<uint8_t>>(pages * kPageSize);
  const std::size_t chunks = (pages + kChunkPages - 1) / kChunkPages;
  for_each_step(
      chunks,
      [this, region, first, pages](std::size_t i, Step next) {
        const uint64_t at = i * kChunkPages;
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kChunkPages, pages - at));
        page_io(false, first + at, n, scratch_->data(), [this, region, at, n, next](int rc) {
          if (rc == 0) std::memcpy(region->data() + at * kPageSize, scratch_->data(), size_t{n} * kPageSize);
          next(rc);
        });
      },
      [this, region, cb, arg](int rc) {
        if (rc != 0) {
          abandon();
          return cb(arg, nullptr, rc);
        }
        std::vector<uint32_t> to_clear;
        std::vector<Blob*> to_resync;
        rc = rebuild(*region, &to_clear, &to_resync);
        if (rc != 0) {
          abandon();
          return cb(arg, nullptr, rc);
        }
        finish_load(std::move(to_clear), std::move(to_resync), cb, arg);
      });
}

int Blobstore::rebuild(std::vector<uint8_t>& region, std::vector<uint32_t>* to_clear,
                       std::vector<Blob*>* to_resync) {
  const uint64_t md_offset = (sb_.md_start - sb_.page_mask_start) * kPageSize;
  auto page = [&](uint32_t i) { return region.data() + md_offset + uint64_t{i} * kPageSize; };

  // 1. Every readable page, grouped into versions (blob id, sequence).
  std::map<BlobId, std::map<uint64_t, Version, std::greater<>>> versions;
  uint64_t max_seq = 0, max_id = 0, unreadable = 0;
  struct Claim {
    uint32_t page;
    BlobId id;
    std::string why;
  };
  std::vector<Claim> unreadable_claims;
  std::vector<uint8_t> selected(sb_.md_pages, 0);  // 1: live chain, 2: kept for a skipped blob
  for (uint32_t i = 0; i < sb_.md_pages; ++i) {
    PageHeader h;
    std::string why;
    if (!decode_header(page(i), &h, &why)) {
      if (!all_zero(page(i))) {
        ++unreadable;
        BlobId claimed;
        std::memcpy(&claimed, page(i), 8);
        unreadable_claims.push_back({i, claimed, why});
      }
      continue;
    }
    max_seq = std::max(max_seq, h.sequence);
    max_id = std::max(max_id, h.id);
    Version& v = versions[h.id][h.sequence];
    if (v.count == 0) {
      v.count = h.count;
      v.pages.assign(std::min<uint32_t>(h.count, static_cast<uint32_t>(sb_.md_pages)), kNoPage);
    }
    if (v.count != h.count || h.index >= v.pages.size() || v.pages[h.index] != kNoPage) {
      v.conflict = true;
      continue;
    }
    v.pages[h.index] = i;
  }
  if (unreadable > 0) report_.repairs.push_back(std::to_string(unreadable) + " unreadable md pages ignored");

  // 2. Per blob: the newest complete version decides (older ones were superseded, newer
  //    incomplete ones are syncs a crash interrupted).
  std::map<BlobId, BlobMetadata> found;
  std::map<BlobId, std::vector<uint32_t>> chains;
  auto skip = [&](BlobId id, const std::string& why, const std::vector<uint32_t>& keep) {
    report_.errors.push_back("blob " + hex(id) + ": " + why);
    ++report_.blobs_skipped;
    for (uint32_t p : keep) selected[p] = 2;
  };
  for (auto& [id, by_seq] : versions) {
    bool chosen = false;
    for (auto& [seq, v] : by_seq) {
      bool complete = !v.conflict && v.pages.size() == v.count;
      for (uint32_t k = 0; complete && k < v.count; ++k) {
        PageHeader h;
        std::string why;
        complete = v.pages[k] != kNoPage && decode_header(page(v.pages[k]), &h, &why) &&
                   h.next_page == (k + 1 < v.count ? v.pages[k + 1] : kNoPage);
      }
      if (!complete) {
        report_.repairs.push_back("blob " + hex(id) + ": dropped incomplete version " + std::to_string(seq));
        continue;
      }
      std::vector<const uint8_t*> chain;
      for (uint32_t p : v.pages) chain.push_back(page(p));
      auto md = decode_blob(chain, sb_.total_clusters);
      chosen = true;
      if (!md.ok()) {
        skip(id, md.error().message, v.pages);
        break;
      }
      bool in_layout = true;
      for (uint64_t c : md->clusters) in_layout &= c == 0 || c >= sb_.first_data_cluster;
      if (!in_layout) {
        skip(id, "cluster inside the metadata area", v.pages);
        break;
      }
      found[id] = std::move(md).value();
      chains[id] = v.pages;
      break;
    }
    if (!chosen) skip(id, "no complete metadata version", {});
  }

  // An unreadable page whose (untrusted) id names no loaded blob may have been that blob's
  // only copy: say so (it may also be a torn write of a blob that was never completed).
  for (const Claim& c : unreadable_claims)
    if (!found.count(c.id))
      report_.errors.push_back("md page " + std::to_string(c.page) + ": " + c.why + " (claims blob " +
                               hex(c.id) + ", which is not loaded)");

  // 3. Half-made snapshots: complete if the blob already points at them, else roll back.
  std::set<BlobId> completed;
  for (auto it = found.begin(); it != found.end();) {
    BlobMetadata& s = it->second;
    auto x = std::find_if(s.internal_xattrs.begin(), s.internal_xattrs.end(),
                          [](const Xattr& a) { return a.name == kSnapshotOf; });
    if (x == s.internal_xattrs.end()) {
      ++it;
      continue;
    }
    BlobId target = 0;
    if (x->value.size() == 8) std::memcpy(&target, x->value.data(), 8);
    auto t = found.find(target);
    if (t != found.end() && t->second.parent == s.id) {
      s.internal_xattrs.erase(x);
      completed.insert(s.id);
      ++report_.snapshots_completed;
      report_.repairs.push_back("snapshot " + hex(s.id) + " of " + hex(target) + " completed");
      ++it;
    } else {
      ++report_.snapshots_rolled_back;
      report_.repairs.push_back("snapshot " + hex(s.id) + " of " + hex(target) + " rolled back");
      chains.erase(s.id);
      it = found.erase(it);
    }
  }

  // 3b. Snapshots being merged into their clone: done once the clone no longer names them
  //     (it owns what it took: drop the snapshot), else rolled back (the mark goes).
  for (auto it = found.begin(); it != found.end();) {
    BlobMetadata& s = it->second;
    auto x = std::find_if(s.internal_xattrs.begin(), s.internal_xattrs.end(),
                          [](const Xattr& a) { return a.name == kMergeInto; });
    if (x == s.internal_xattrs.end()) {
      ++it;
      continue;
    }
    BlobId into = 0;
    if (x->value.size() == 8) std::memcpy(&into, x->value.data(), 8);
    auto c = found.find(into);
    if (c != found.end() && c->second.parent != s.id) {
      report_.repairs.push_back("snapshot " + hex(s.id) + " merged into " + hex(into) + ": deleted");
      chains.erase(s.id);
      it = found.erase(it);
    } else {
      report_.repairs.push_back("merge of snapshot " + hex(s.id) + " into " + hex(into) + " rolled back");
      s.internal_xattrs.erase(x);
      completed.insert(s.id);  // rewritten without the mark
      ++it;
    }
  }

  // 4. Parents must exist, be read-only, and not form a cycle.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = found.begin(); it != found.end();) {
      std::string why;
      const BlobId pid = it->second.parent;
      if (pid != kInvalidBlobId) {
        auto p = found.find(pid);
        if (p == found.end()) why = "parent " + hex(pid) + " missing";
        else if (!(p->second.flags & kFlagReadOnly)) why = "parent " + hex(pid) + " is writable";
      }
      // A cycle: walking up more steps than there are blobs.
      BlobId at = it->first;
      for (std::size_t steps = 0; why.empty() && at != kInvalidBlobId; ++steps) {
        auto a = found.find(at);
        if (a == found.end()) break;
        if (steps > found.size()) why = "parent chain loops";
        at = a->second.parent;
      }
      if (why.empty()) {
        ++it;
        continue;
      }
      skip(it->first, why, chains[it->first]);
      chains.erase(it->first);
      it = found.erase(it);
      changed = true;
    }
  }

  // 5. Ownership: one owner per cluster, or the store is not trusted at all.
  std::vector<BlobId> owner(sb_.total_clusters, kInvalidBlobId);
  for (const auto& [id, md] : found)
    for (uint64_t c : md.clusters) {
      if (c == 0) continue;
      if (owner[c] != kInvalidBlobId) {
        report_.errors.push_back("cluster " + std::to_string(c) + " owned by blobs " + hex(owner[c]) +
                                 " and " + hex(id));
        return -EILSEQ;
      }
      owner[c] = id;
    }

  // 6. Masks from the pages; the stored ones (if their CRC holds) only tell what was leaked.
  for (uint64_t c = 0; c < sb_.first_data_cluster; ++c) cluster_mask_[c / 64] |= 1ull << (c % 64);
  for (uint64_t c = 0; c < sb_.total_clusters; ++c)
    if (owner[c] != kInvalidBlobId) cluster_mask_[c / 64] |= 1ull << (c % 64);
  for (const auto& [id, pages] : chains)
    for (uint32_t p : pages) selected[p] = 1;
  for (uint32_t p = 0; p < sb_.md_pages; ++p)
    if (selected[p] != 0) page_mask_[p / 64] |= 1ull << (p % 64);
  const uint8_t* stored_clusters =
      region.data() + (sb_.cluster_mask_start - sb_.page_mask_start) * kPageSize;
  if (crc32c(stored_clusters, cluster_mask_.size() * 8) == sb_.cluster_mask_crc && sb_.clean) {
    for (std::size_t w = 0; w < cluster_mask_.size(); ++w) {
      uint64_t stored;
      std::memcpy(&stored, stored_clusters + w * 8, 8);
      report_.clusters_reclaimed += std::popcount(stored & ~cluster_mask_[w]);
    }
  }
  if (report_.clusters_reclaimed)
    report_.repairs.push_back(std::to_string(report_.clusters_reclaimed) + " clusters owned by no blob freed");

  // 7. Left-over pages (superseded, incomplete, unreadable, rolled back) are zeroed before
  //    their slots are reused, so none of them can ever be taken for a blob again.
  for (uint32_t p = 0; p < sb_.md_pages; ++p)
    if (selected[p] == 0 && !all_zero(page(p))) to_clear->push_back(p);
  report_.pages_cleared = to_clear->size();

  // 8. In memory, parents before children.
  std::vector<BlobId> order;
  std::set<BlobId> placed;
  for (std::size_t round = 0; order.size() < found.size() && round <= found.size(); ++round)
    for (const auto& [id, md] : found)
      if (!placed.count(id) && (md.parent == kInvalidBlobId || placed.count(md.parent))) {
        order.push_back(id);
        placed.insert(id);
      }
  for (BlobId id : order) {
    Blob* b = add_blob(std::move(found[id]));
    b->md_pages_ = chains[id];
    if (completed.count(id)) to_resync->push_back(b);  // its chain still says "incomplete"
  }
  report_.blobs = order.size();
  if (sb_.super_blob != kInvalidBlobId && !found.count(sb_.super_blob)) {
    report_.repairs.push_back("super blob " + hex(sb_.super_blob) + " is gone: cleared");
    sb_.super_blob = kInvalidBlobId;
  }
  next_seq_ = max_seq + 1;
  next_id_ = max_id + 1;
  return 0;
}

void Blobstore::finish_load(std::vector<uint32_t> to_clear, std::vector<Blob*> to_resync,
                            StoreDoneFn cb, void* arg) {
  auto fail = [this, cb, arg](int rc) {
    abandon();
    cb(arg, nullptr, rc);
  };
  for_each_step(
      to_clear.size(),
      [this, to_clear](std::size_t i, Step next) { zero_pages(sb_.md_start + to_clear[i], 1, next); },
      [this, to_resync, fail, cb, arg](int rc) {
        if (rc != 0) return fail(rc);
        for_each_step(
            to_resync.size(), [this, to_resync](std::size_t i, Step next) { persist(to_resync[i], next); },
            [this, fail, cb, arg](int rc) {
              if (rc != 0) return fail(rc);
              // From here on the store is in use: a crash must make the next load dirty.
              write_super(false, [this, fail, cb, arg](int rc) {
                if (rc != 0) return fail(rc);
                register_channels();
                cb(arg, this, 0);
              });
            });
      });
}

}  // namespace pollux::blob
