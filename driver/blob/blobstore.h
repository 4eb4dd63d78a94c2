// The blobstore (after SPDK's): blobs — numbered, resizable runs of clusters with metadata and
// xattrs — on any bdev, persistent and power-fail safe. docs/BLOBSTORE.md describes the format
// and the write ordering that makes it safe.
//
// Threading: the store has one metadata thread, the one init()/load() ran on. Every metadata
// call (create, open, close, resize, sync, delete, xattrs, snapshot, clone, inflate, decouple,
// unload) is made there and completes there; metadata operations run one at a time, in order.
// I/O runs on any framework thread through that thread's channel (alloc_io_channel): no locks,
// no allocation on the I/O path (requests come from a per-channel pool); the first write to a
// thin blob's unallocated cluster asks the metadata thread for a cluster and then continues.
//
// Snapshot, inflate, decouple and resize freeze the blob's I/O around themselves (as SPDK
// does): requests in flight end first, new ones wait in their channel until the change is
// done (no locks: the blob's frozen count is read with one acquire load per request).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/blob/format.h"
#include "driver/env/dma_memory.h"
#include "driver/event/framework.h"

namespace pollux::blob {

class Blobstore;
class Blob;

using OpDoneFn = void (*)(void* arg, int rc);
using BlobIdDoneFn = void (*)(void* arg, BlobId id, int rc);
using BlobDoneFn = void (*)(void* arg, Blob* blob, int rc);
using StoreDoneFn = void (*)(void* arg, Blobstore* bs, int rc);

struct StoreOptions {
  uint32_t cluster_size = 1 << 20;  // bytes, a multiple of 4 KiB
  uint64_t md_pages = 0;            // metadata pages; 0: one per cluster
  std::string bstype;               // init: stored; load: must match unless empty
  env::MemoryRegistry* registry = nullptr;  // DMA memory for metadata I/O (default: global)
  uint32_t requests_per_channel = 512;
  // The base bdev is going away (hot removal): called once, on the thread the bdev layer
  // tells. The owner should end its I/O and crash() the store (nothing more can be written).
  std::function<void()> on_base_removed;
};

struct BlobOptions {
  uint64_t num_clusters = 0;
  bool thin = false;
  ClearMethod clear_method = ClearMethod::kDefault;
  std::vector<Xattr> xattrs;
};

// What load() found and repaired.
struct LoadReport {
  bool was_clean = false;
  uint64_t blobs = 0;               // loaded
  uint64_t blobs_skipped = 0;       // unreadable, inconsistent: see errors
  uint64_t clusters_reclaimed = 0;  // marked used on disk, owned by no blob (dirty load)
  uint64_t pages_cleared = 0;       // superseded, incomplete or unreadable md pages zeroed
  uint64_t snapshots_completed = 0, snapshots_rolled_back = 0;
  std::vector<std::string> errors;   // one line per skipped blob
  std::vector<std::string> repairs;  // one line per repair
};

// The per-cluster device map an I/O thread reads without locks. Entries go from 0 to a
// cluster once (release store on the metadata thread); a map that changes shape is replaced
// and the old one freed once every thread has passed a message.
struct ClusterMap {
  explicit ClusterMap(uint64_t n) : count(n), at(new std::atomic<uint64_t>[n ? n : 1]) {
    for (uint64_t i = 0; i < n; ++i) at[i].store(0, std::memory_order_relaxed);
  }
  uint64_t count;
  std::unique_ptr<std::atomic<uint64_t>[]> at;
};

class Blob {
 public:
  BlobId id() const { return md_.id; }
  uint64_t num_clusters() const { return md_.num_clusters; }
  uint64_t num_io_units() const;
  uint64_t num_allocated_clusters() const;
  uint64_t flags() const { return md_.flags; }
  bool is_thin() const { return md_.flags & kFlagThin; }
  bool is_read_only() const { return md_.flags & kFlagReadOnly; }
  bool is_snapshot() const { return md_.flags & kFlagSnapshot; }
  bool is_clone() const { return md_.flags & kFlagClone; }
  BlobId parent_id() const { return md_.parent; }
  ClearMethod clear_method() const { return md_.clear_method; }
  bool dirty() const { return dirty_; }
  std::vector<BlobId> clones() const;  // walks every blob
  bool has_clones() const { return clone_count_ > 0; }
  uint32_t clone_count() const { return clone_count_; }  // kept with each parent link
  // Where blob cluster `cl` lives on the device (0: not allocated here). Any thread.
  uint64_t device_cluster(uint64_t cl) const {
    const ClusterMap* m = map_.load(std::memory_order_acquire);
    return m != nullptr && cl < m->count ? m->at[cl].load(std::memory_order_acquire) : 0;
  }

  // Metadata thread; in memory until sync_md. -EINVAL (empty name), -EPERM (read-only),
  // -E2BIG (cannot fit in a metadata page), -ENOENT (remove/get of an unknown name).
  int set_xattr(const std::string& name, const void* value, std::size_t len, bool internal = false);
  int get_xattr(const std::string& name, const void** value, std::size_t* len,
                bool internal = false) const;
  int remove_xattr(const std::string& name, bool internal = false);
  std::vector<std::string> xattr_names(bool internal = false) const;
  // Marks the blob read-only (persisted by the next sync_md).
  void set_read_only();

  const BlobMetadata& metadata() const { return md_; }  // for tests and tools
  const std::vector<uint32_t>& md_pages() const { return md_pages_; }  // md-region indexes

 private:
  friend class Blobstore;
  Blobstore* bs_ = nullptr;
  BlobMetadata md_;
  bool dirty_ = false;
  uint32_t open_refs_ = 0;
  bool deleting_ = false;
  std::vector<uint32_t> md_pages_;        // the durable chain (md-region indexes)
  std::vector<uint64_t> pending_free_;    // clusters released once the next sync is durable
  Blob* parent_ = nullptr;                // read by I/O threads: stable while they run
  uint32_t clone_count_ = 0;              // blobs whose parent_ is this one
  std::atomic<ClusterMap*> map_{nullptr};
  std::atomic<bool> io_read_only_{false};
  std::atomic<uint32_t> frozen_{0};  // > 0: new I/O waits in its channel (freeze_io)
  std::unique_ptr<ClusterMap> map_owner_;
};

class Blobstore {
 public:
  // Formats bdev_name as an empty blobstore. Runs on the calling (metadata) thread.
  static void init(bdev::Manager& mgr, const std::string& bdev_name, const StoreOptions& opts,
                   StoreDoneFn cb, void* arg);
  // Loads, recovering after an unclean shutdown (see report()). Errors: -EILSEQ (corrupt
  // beyond per-blob repair, e.g. two blobs owning a cluster), -ENXIO (bstype mismatch).
  static void load(bdev::Manager& mgr, const std::string& bdev_name, const StoreOptions& opts,
                   StoreDoneFn cb, void* arg);
  // Writes the masks and a clean super block, then frees the store and calls cb(arg, 0).
  // -EBUSY if a blob is open or channels exist (nothing is written, the store stays).
  void unload(OpDoneFn cb, void* arg);
  // Frees the store writing nothing (what a crash leaves): the next load is dirty. Tests.
  void abandon();
  // What a host crash (or power loss) does to the store: from this call on it sends nothing
  // more to the base bdev (metadata and data I/O fail with -ENXIO, I/O already sent ends as
  // the base ends it); once the metadata queue is idle and every channel is freed, the store
  // is freed writing nothing and cb(arg, 0) runs. The next load is dirty. Metadata thread.
  void crash(OpDoneFn cb, void* arg);
  bool halted() const { return halted_.load(std::memory_order_acquire); }

  const SuperBlock& super_block() const { return sb_; }
  const LoadReport& report() const { return report_; }
  uint64_t io_unit_size() const { return sb_.io_unit_size; }
  uint64_t cluster_size() const { return sb_.cluster_size; }
  uint64_t total_clusters() const { return sb_.total_clusters; }
  uint64_t free_clusters() const;
  uint64_t used_md_pages() const;
  event::Thread* md_thread() const { return md_thread_; }
  bdev::Bdev& bdev() const { return desc_->bdev(); }
  std::vector<BlobId> blob_ids() const;  // sorted: iteration
  Blob* find(BlobId id);                 // open or not (inspection only)

  // -------- metadata operations (metadata thread) --------
  void create_blob(const BlobOptions& opts, BlobIdDoneFn cb, void* arg);
  void open_blob(BlobId id, BlobDoneFn cb, void* arg);  // -ENOENT
  void close_blob(Blob* blob, OpDoneFn cb, void* arg);  // syncs a dirty blob first
  void resize(Blob* blob, uint64_t num_clusters, OpDoneFn cb, void* arg);
  // Makes the blob's metadata, and every write completed before the call, durable.
  void sync_md(Blob* blob, OpDoneFn cb, void* arg);
  // -EBUSY if open or cloned more than once. A snapshot with one clone is merged into it (the
  // clone takes the clusters it read through the snapshot, and the snapshot's parent).
  void delete_blob(BlobId id, OpDoneFn cb, void* arg);
  void snapshot(BlobId id, std::vector<Xattr> xattrs, BlobIdDoneFn cb, void* arg);
  void clone(BlobId snapshot_id, std::vector<Xattr> xattrs, BlobIdDoneFn cb, void* arg);
  void inflate(BlobId id, OpDoneFn cb, void* arg);
  void decouple_parent(BlobId id, OpDoneFn cb, void* arg);
  void set_super_blob(BlobId id, OpDoneFn cb, void* arg);
  BlobId super_blob() const { return sb_.super_blob; }

  // -------- I/O (any thread, through its channel) --------
  event::IoChannel* alloc_io_channel();
  void free_io_channel(event::IoChannel* ch);
  // Offsets and lengths in io_units (the bdev's block size). 0 or -EINVAL (range, iovs),
  // -EPERM (read-only blob), -ENOMEM (the channel's requests are all in flight).
  int read(Blob* b, event::IoChannel* ch, void* buf, uint64_t offset, uint64_t len, OpDoneFn cb, void* arg);
  int write(Blob* b, event::IoChannel* ch, const void* buf, uint64_t offset, uint64_t len, OpDoneFn cb, void* arg);
  int readv(Blob* b, event::IoChannel* ch, const iovec* iov, int iovcnt, uint64_t offset, uint64_t len,
            OpDoneFn cb, void* arg);
  int writev(Blob* b, event::IoChannel* ch, const iovec* iov, int iovcnt, uint64_t offset, uint64_t len,
             OpDoneFn cb, void* arg);
  int write_zeroes(Blob* b, event::IoChannel* ch, uint64_t offset, uint64_t len, OpDoneFn cb, void* arg);
  int unmap(Blob* b, event::IoChannel* ch, uint64_t offset, uint64_t len, OpDoneFn cb, void* arg);

  ~Blobstore();

  // Internal (I/O path → metadata thread).
  struct Request;
  struct Channel;
  struct Freeze;
  void request_cluster(Request* r, uint64_t blob_cluster);

 private:
  using Step = std::function<void(int rc)>;
  Blobstore(bdev::Manager& mgr, bdev::Desc* desc, event::Thread* md_thread);
  static Blobstore* open_store(bdev::Manager& mgr, const std::string& bdev_name,
                               const StoreOptions& opts, int* rc);
  int setup_buffers(const StoreOptions& opts);
  void destroy(OpDoneFn cb, void* arg);
  static void finish_destroy(void* self);
  static void destroy_when_idle(void* self);
  static void on_base_event(bdev::DescEvent e, bdev::Bdev& b, void* ctx);
  void register_channels();

  // The serial metadata queue: op(finish) runs when every earlier op has called finish.
  void enqueue(std::function<void(std::function<void()> finish)> op);
  // As enqueue(), with the blob's I/O frozen from before the op starts (requests in flight
  // have ended; new ones wait in their channels) until it calls finish (as SPDK freezes I/O
  // around snapshot, inflate, decouple and a shrink: they move the blob's clusters).
  void enqueue_frozen(BlobId id, std::function<void(std::function<void()> finish)> op);
  void run_next();
  void freeze_io(BlobId id, std::function<void()> then);
  void thaw_io(BlobId id);
  static void drain_channel(event::ChannelIter& it);
  static void resume_parked(event::ChannelIter& it);

  // Metadata-thread I/O in pages (md scratch buffer) and bytes.
  using MdSubmit = std::function<int(bdev::IoCompletionFn cb, void* arg)>;
  struct MdIo;
  void md_io(MdSubmit submit, Step done);  // retried while the base is out of bdev_ios
  void page_io(bool write, uint64_t page, uint32_t pages, void* buf, Step done);
  void zero_pages(uint64_t page, uint64_t pages, Step done);
  void flush(Step done);
  void write_super(bool clean, Step done);
  void write_masks(Step done);

  // Blob metadata plumbing (inside a queued op).
  void persist(Blob* b, Step done);  // new chain, flush, zero the old one
  void release_chain(Blob* b, Step done);
  Result<uint32_t> alloc_page();
  uint64_t alloc_cluster();  // 0: none free
  void free_cluster(uint64_t c);
  bool cluster_used(uint64_t c) const;
  void clear_clusters(const std::vector<uint64_t>& clusters, ClearMethod m, Step done);
  void copy_cluster(Blob* b, uint64_t blob_cluster, uint64_t dst, Step done);
  uint64_t ancestor_cluster(const Blob* b, uint64_t blob_cluster) const;
  void publish_map(Blob* b);
  void set_cluster(Blob* b, uint64_t blob_cluster, uint64_t dev);
  Blob* add_blob(BlobMetadata md);
  void forget_blob(Blob* b);
  void set_parent(Blob* b, Blob* p);
  BlobId next_blob_id() { return next_id_++; }
  void allocate_missing(Blob* b, bool only_parent_owned, Step done);
  void do_snapshot(Blob* b, std::vector<Xattr> xattrs, std::function<void(BlobId, int)> done);
  void merge_into_clone(Blob* snapshot, Step done);

  // Load (load.cc).
  void load_super(StoreDoneFn cb, void* arg, std::string bstype);
  void load_md_region(StoreDoneFn cb, void* arg);
  int rebuild(std::vector<uint8_t>& region, std::vector<uint32_t>* to_clear,
              std::vector<Blob*>* to_resync);
  void finish_load(std::vector<uint32_t> to_clear, std::vector<Blob*> to_resync,
                   StoreDoneFn cb, void* arg);

  // I/O path (io.cc).
  static int channel_create(void* io_device, void* ctx);
  static void channel_destroy(void* io_device, void* ctx);
  int submit(Blob* b, event::IoChannel* ch, int op, const iovec* iov, int iovcnt, uint64_t offset,
             uint64_t len, OpDoneFn cb, void* arg);
  static void advance(Request* r);
  static void finish_if_done(Request* r);
  static void segment_done(bdev::BdevIo& io, bool ok, void* arg);
  static void allocate_on_md_thread(void* arg);
  static void resume(void* arg);

  bdev::Manager& mgr_;
  bdev::Desc* desc_;
  event::Thread* md_thread_;
  event::IoChannel* md_channel_ = nullptr;
  env::MemoryRegistry* registry_ = nullptr;
  uint32_t requests_per_channel_ = 512;
  SuperBlock sb_;
  LoadReport report_;
  uint32_t blocks_per_page_ = 8;
  uint64_t io_units_per_cluster_ = 0;
  std::unique_ptr<env::DmaRegion> scratch_;  // md pages / masks / load chunks
  std::unique_ptr<env::DmaRegion> copy_buf_; // one cluster, for copy-on-write and inflate
  std::vector<uint64_t> page_mask_, cluster_mask_;
  uint64_t page_hint_ = 0, cluster_hint_ = 0;
  std::map<BlobId, std::unique_ptr<Blob>> blobs_;
  uint64_t next_seq_ = 1;
  BlobId next_id_ = 1;
  std::deque<std::function<void(std::function<void()>)>> queue_;
  bool op_running_ = false;
  uint32_t posted_runs_ = 0;  // run_next messages posted and not yet run: destroy() waits
  bool destroying_ = false;   // destroy() began: a posted run_next starts nothing
  std::atomic<uint32_t> channels_{0};
  bool registered_ = false;
  OpDoneFn destroy_cb_ = nullptr;
  void* destroy_arg_ = nullptr;
  std::atomic<bool> halted_{false};  // crash(): nothing more goes to the base bdev
  std::function<void()> on_base_removed_;
};

}  // namespace pollux::blob
