// Logical volumes (after SPDK's lvol): an lvstore is a blobstore (bstype "LVOLSTORE") on a
// base bdev; each lvol is a blob exposed as a bdev named "<lvstore>/<lvol>". Thick or thin;
// snapshot, clone, inflate, decouple, resize, rename, delete. The lvstore's name and the lvol
// names live in internal xattrs, so a load brings every lvol bdev back.
//
// Threading: every call on the lvstore's metadata thread (the one create/load ran on); lvol
// bdev I/O from any thread, through the blobstore's per-thread channels. A flush of an lvol
// syncs its blob's metadata (so thin allocations become durable, as SPDK persists them).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/blob/blobstore.h"

namespace pollux::lvol {

class LvolStore;
struct Lvol;

using StoreDoneFn = void (*)(void* arg, LvolStore* lvs, int rc);
using LvolDoneFn = void (*)(void* arg, Lvol* lvol, int rc);
using DoneFn = void (*)(void* arg, int rc);

struct Lvol {
  LvolStore* lvs = nullptr;
  std::string name;
  blob::Blob* blob = nullptr;
  std::string bdev_name() const;
};

class LvolStore {
 public:
  static constexpr const char* kBstype = "LVOLSTORE";

  // Formats `base` as a new lvstore named `name`. -EEXIST if a loaded lvstore has that name.
  // `dma`: where the store's metadata buffers are registered for DMA (default: global).
  // `md_pages`: the metadata region's pages (0: one per cluster, SPDK's default ratio; a
  // dirty load reads every one of them).
  static void create(bdev::Manager& mgr, const std::string& base, const std::string& name,
                     uint32_t cluster_size, StoreDoneFn cb, void* arg,
                     env::MemoryRegistry* dma = nullptr, uint64_t md_pages = 0);
  // Loads the lvstore on `base` and registers a bdev per lvol.
  static void load(bdev::Manager& mgr, const std::string& base, StoreDoneFn cb, void* arg,
                   env::MemoryRegistry* dma = nullptr);
  // Unregisters the lvol bdevs (-EBUSY if one is open), closes the blobs, unloads the store.
  void unload(DoneFn cb, void* arg);
  // What a host crash leaves (a scenario's power loss), and what the base bdev's hot removal
  // brings about by itself: from this call on nothing more is sent to the base; the lvol
  // bdevs go (their users are told kRemove and their I/O ends), then the store is freed
  // writing nothing, and cb(arg, 0) (cb may be null). A later load() of the base recovers it
  // (dirty load). Metadata thread; a second call while one runs is ignored (-EALREADY).
  void crash(DoneFn cb, void* arg);
  static LvolStore* find(const std::string& name);  // loaded lvstores, by name
  // The loaded lvstores whose base bdev is in `mgr` (a program unloads them when it stops,
  // as SPDK's lvol module does when the bdev subsystem finishes).
  static std::vector<LvolStore*> loaded_on(const bdev::Manager& mgr);

  const std::string& name() const { return name_; }
  blob::Blobstore& blobstore() { return *bs_; }
  uint64_t cluster_size() const { return bs_->cluster_size(); }
  uint64_t free_clusters() const { return bs_->free_clusters(); }
  Lvol* lvol(const std::string& name);
  std::vector<std::string> lvol_names() const;

  // size in bytes, rounded up to clusters. -EEXIST (name taken), -ENOSPC.
  void create_lvol(const std::string& name, uint64_t size_bytes, bool thin, LvolDoneFn cb, void* arg);
  void snapshot(Lvol* lvol, const std::string& snapshot_name, LvolDoneFn cb, void* arg);
  void clone(Lvol* snapshot, const std::string& clone_name, LvolDoneFn cb, void* arg);
  void inflate(Lvol* lvol, DoneFn cb, void* arg);
  void decouple_parent(Lvol* lvol, DoneFn cb, void* arg);
  // Resize and rename re-register the lvol's bdev (users holding it open are told kRemove).
  void resize(Lvol* lvol, uint64_t size_bytes, DoneFn cb, void* arg);
  void rename(Lvol* lvol, const std::string& new_name, DoneFn cb, void* arg);
  // -EBUSY with more than one clone; a snapshot with one clone is merged into it (SPDK's
  // bdev_lvol_delete of a snapshot).
  void destroy(Lvol* lvol, DoneFn cb, void* arg);

  ~LvolStore();

 private:
  LvolStore(bdev::Manager& mgr, blob::Blobstore* bs) : mgr_(mgr), bs_(bs) {}
  void add_lvol(blob::Blob* b, const std::string& name, std::function<void(Lvol*, int)> done);
  int register_bdev(Lvol* lvol);
  void unregister_bdev(Lvol* lvol, std::function<void()> then);
  void open_and_add(blob::BlobId id, const std::string& name, LvolDoneFn cb, void* arg);

  static blob::StoreOptions store_options(std::shared_ptr<LvolStore*> self,
                                           env::MemoryRegistry* registry);

  bdev::Manager& mgr_;
  blob::Blobstore* bs_;
  std::string name_;
  bool crashing_ = false;
  std::map<std::string, std::unique_ptr<Lvol>> lvols_;
};

}  // namespace pollux::lvol
