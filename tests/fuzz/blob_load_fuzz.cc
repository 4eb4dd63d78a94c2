// Blobstore load (driver/blob) of a store whose metadata is arbitrary: the super block, the
// masks and the metadata pages of a real store, edited by the input — bytes changed, pages
// copied over others (two chains claiming one blob, a chain through a page of another), pages
// zeroed — with the CRC of an edited page recomputed or not. The store was made by the
// blobstore itself (thick, thin, snapshot, clone, a blob whose xattrs span three pages, a
// resized one, a super blob), then unloaded cleanly or abandoned (a dirty store).
//
// Input: one configuration byte (bit 0: the dirty store), then records (opcode low 2 bits;
// bit 2: recompute the page's CRC afterwards):
//   0 PAGE(1) OFF(2) LEN(1) BYTES   bytes written into page PAGE (of the super block, masks
//                                   and metadata region) at OFF
//   1 PAGE(1) SRC(1)                page SRC copied over page PAGE
//   2 PAGE(1)                       page PAGE zeroed
//   3 PAGE(1)                       nothing but the CRC (with bit 2)
//
// What must hold: no crash, hang or sanitizer report; a load that fails says so with a
// negative errno and leaves no store; a load that succeeds is consistent (every cluster of a
// blob in the data area and owned once, the free count right, every parent present), every
// blob reads back, the data clusters were not written (when the super block is the real one),
// and the store unloads cleanly and loads again to the very same blobs.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/blob/blobstore.h"
#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/event/framework.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

namespace blob = pollux::blob;
namespace bdev = pollux::bdev;
namespace event = pollux::event;
namespace env = pollux::env;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr uint32_t kBlockSize = 512;
constexpr uint64_t kDeviceBytes = 1 << 20;
constexpr uint64_t kBlocks = kDeviceBytes / kBlockSize;
constexpr uint32_t kCluster = 16 * 1024;  // 64 clusters
constexpr uint32_t kRequests = 32;  // per channel: the checks read one cluster at a time
constexpr uint64_t kMdPages = 24;
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

struct Outcome {
  bool called = false;
  int rc = 1;
  blob::BlobId id = blob::kInvalidBlobId;
  blob::Blob* b = nullptr;
  blob::Blobstore* bs = nullptr;
};

// A blobstore's world: a step-mode framework (metadata thread t0, I/O thread t1 on a second
// reactor), a bdev manager and a 1 MiB malloc bdev, and synchronous wrappers.
struct World {
  env::VirtualClock clock{1'000'000'000};
  std::unique_ptr<event::Framework> fw;
  event::Thread *t0 = nullptr, *t1 = nullptr;
  std::unique_ptr<bdev::Manager> mgr;
  std::unique_ptr<env::DmaRegion> buf;  // the whole device's size
  blob::Blobstore* bs = nullptr;
  event::IoChannel* ch = nullptr;

  World() {
    event::FrameworkOptions fo;
    fo.core_mask = "0x3";
    fo.step_mode = true;
    fo.clock = &clock;
    fo.msg_ring_size = 256;
    auto f = event::Framework::create(fo);
    check(f.ok(), "framework");
    fw = std::move(f).value();
    t0 = fw->create_thread("md", 0);
    t1 = fw->create_thread("io", 1);
    on(t0, [&] {
      bdev::ManagerOptions mo;
      mo.io_pool_size = 1024;
      mo.io_cache_size = 16;
      mo.bounce_buffers = 0;
      auto m = bdev::Manager::create(*fw, mo);
      check(m.ok(), "bdev manager");
      mgr = std::move(m).value();
      check(bdev::create_malloc_bdev(*mgr, {"m0", kBlocks, kBlockSize, nullptr, nullptr}).ok(),
            "malloc bdev");
    });
    auto r = env::DmaRegion::create(env::MemoryRegistry::global(), kDeviceBytes);
    check(r.ok(), "DMA buffer");
    buf = std::move(r).value();
  }
  ~World() {
    if (bs != nullptr) crash();
    for (bdev::Bdev* b : mgr->bdevs()) on(t0, [&] { mgr->unregister_bdev(b->name()); });
    settle();
    fw->stop(0);
    for (int i = 0; i < 10000 && !fw->finished(); ++i) fw->step();
    on(t0, [&] { mgr.reset(); });
  }

  void on(event::Thread* t, const std::function<void()>& fn) {
    event::CurrentThreadScope scope(t);
    fn();
  }
  void settle() {
    for (int i = 0; i < 200000; ++i)
      if (!fw->step()) return;
    fail("the framework is still busy after 200,000 steps (a livelock)");
  }
  Outcome run(const std::function<void(Outcome*)>& fn, event::Thread* t = nullptr) {
    Outcome out;
    on(t ? t : t0, [&] { fn(&out); });
    for (int i = 0; i < 200000 && !out.called; ++i) fw->step();
    check(out.called, "a blobstore call never called back");
    return out;
  }
  uint8_t* mem() { return static_cast<uint8_t*>(buf->data()); }

  // The whole raw device from or to mem(), while no store holds it.
  void raw(bool write) {
    bdev::Desc* desc = nullptr;
    event::IoChannel* c = nullptr;
    on(t0, [&] {
      auto d = mgr->open("m0", true);
      check(d.ok(), "open m0");
      desc = d.value();
      c = mgr->get_io_channel(desc);
    });
    Outcome r = run([&](Outcome* o) {
      auto done = [](bdev::BdevIo&, bool ok, void* a) {
        *static_cast<Outcome*>(a) = {true, ok ? 0 : -EIO};
      };
      const int rc = write ? mgr->write(desc, c, mem(), 0, kBlocks, done, o)
                           : mgr->read(desc, c, mem(), 0, kBlocks, done, o);
      if (rc != 0) *o = {true, rc};
    });
    check(r.rc == 0, "raw I/O on the device");
    on(t0, [&] {
      mgr->put_io_channel(c);
      mgr->close(desc);
    });
    settle();
  }

  int load() {
    Outcome r = run([&](Outcome* o) {
      blob::StoreOptions so;
      so.requests_per_channel = kRequests;
      blob::Blobstore::load(*mgr, "m0", so,
                            [](void* a, blob::Blobstore* s, int rc) {
                              auto* out = static_cast<Outcome*>(a);
                              *out = {true, rc, blob::kInvalidBlobId, nullptr, s};
                            },
                            o);
    });
    bs = r.bs;
    return r.rc;
  }
  int init() {
    Outcome r = run([&](Outcome* o) {
      blob::StoreOptions so;
      so.requests_per_channel = kRequests;
      so.cluster_size = kCluster;
      so.md_pages = kMdPages;
      blob::Blobstore::init(*mgr, "m0", so,
                            [](void* a, blob::Blobstore* s, int rc) {
                              auto* out = static_cast<Outcome*>(a);
                              *out = {true, rc, blob::kInvalidBlobId, nullptr, s};
                            },
                            o);
    });
    bs = r.bs;
    return r.rc;
  }
  void free_channel() {
    if (ch != nullptr) on(t1, [&] { bs->free_io_channel(ch); });
    ch = nullptr;
    settle();
  }
  int unload() {
    free_channel();
    Outcome r = run([&](Outcome* o) {
      bs->unload([](void* a, int rc) { *static_cast<Outcome*>(a) = {true, rc}; }, o);
    });
    if (r.rc == 0) bs = nullptr;
    return r.rc;
  }
  void crash() {
    free_channel();
    on(t0, [&] { bs->abandon(); });
    bs = nullptr;
    settle();
  }
  static void op_done(void* a, int rc) { *static_cast<Outcome*>(a) = {true, rc}; }
  blob::Blob* open(blob::BlobId id, int* rc) {
    Outcome r = run([&](Outcome* o) {
      bs->open_blob(id,
                    [](void* a, blob::Blob* b, int rc) {
                      *static_cast<Outcome*>(a) = {true, rc, blob::kInvalidBlobId, b};
                    },
                    o);
    });
    *rc = r.rc;
    return r.b;
  }
  int close(blob::Blob* b) {
    return run([&](Outcome* o) { bs->close_blob(b, op_done, o); }).rc;
  }
  blob::BlobId create(uint64_t clusters, bool thin, std::vector<blob::Xattr> xattrs = {}) {
    Outcome r = run([&](Outcome* o) {
      blob::BlobOptions bo;
      bo.num_clusters = clusters;
      bo.thin = thin;
      bo.xattrs = std::move(xattrs);
      bs->create_blob(bo,
                      [](void* a, blob::BlobId id, int rc) {
                        *static_cast<Outcome*>(a) = {true, rc, id};
                      },
                      o);
    });
    check(r.rc == 0, "create blob");
    return r.id;
  }
  event::IoChannel* channel() {
    if (ch == nullptr) on(t1, [&] { ch = bs->alloc_io_channel(); });
    return ch;
  }
  int io(blob::Blob* b, bool write, uint64_t offset, uint64_t n) {
    Outcome r = run(
        [&](Outcome* o) {
          const int rc = write ? bs->write(b, channel(), mem(), offset, n, op_done, o)
                               : bs->read(b, channel(), mem(), offset, n, op_done, o);
          if (rc != 0) *o = {true, rc};
        },
        t1);
    return r.rc;
  }
};

// ------------------------------------------------------------------- the real store ---

struct Image {
  std::vector<uint8_t> device;  // the whole device
  uint64_t md_end = 0;          // pages [0, md_end): super block, masks, metadata region
  blob::SuperBlock sb;
};

Image build(bool dirty) {
  World w;
  check(w.init() == 0, "init a store");
  const blob::BlobId thick = w.create(3, false, {{"name", {'t'}}});
  const blob::BlobId thin = w.create(8, true);
  int rc = 0;
  blob::Blob* b = w.open(thin, &rc);
  check(rc == 0, "open thin");
  std::memset(w.mem(), 0x5a, 4 * kBlockSize);
  check(w.io(b, true, 0, 4) == 0 && w.io(b, true, 5 * kCluster / kBlockSize, 4) == 0, "write");
  w.free_channel();
  check(w.close(b) == 0, "close thin");
  Outcome s = w.run([&](Outcome* o) {
    w.bs->snapshot(thin, {},
                   [](void* a, blob::BlobId id, int rc) {
                     *static_cast<Outcome*>(a) = {true, rc, id};
                   },
                   o);
  });
  check(s.rc == 0, "snapshot");
  Outcome c = w.run([&](Outcome* o) {
    w.bs->clone(s.id, {},
                [](void* a, blob::BlobId id, int rc) {
                  *static_cast<Outcome*>(a) = {true, rc, id};
                },
                o);
  });
  check(c.rc == 0, "clone");
  const blob::BlobId big = w.create(1, false);
  b = w.open(big, &rc);
  const std::vector<uint8_t> v(1500, 3);
  for (int i = 0; i < 6; ++i) check(b->set_xattr("x" + std::to_string(i), v.data(), v.size()) == 0, "xattr");
  check(w.close(b) == 0, "close big");
  const blob::BlobId grown = w.create(2, false);
  b = w.open(grown, &rc);
  check(w.run([&](Outcome* o) { w.bs->resize(b, 4, World::op_done, o); }).rc == 0, "resize");
  check(w.run([&](Outcome* o) { w.bs->sync_md(b, World::op_done, o); }).rc == 0, "sync");
  check(w.close(b) == 0, "close grown");
  check(w.run([&](Outcome* o) { w.bs->set_super_blob(thick, World::op_done, o); }).rc == 0,
        "super blob");
  Image img;
  img.sb = w.bs->super_block();
  img.md_end = img.sb.md_start + img.sb.md_pages;
  if (dirty) {
    w.crash();
  } else {
    check(w.unload() == 0, "unload");
  }
  w.raw(false);
  img.device.assign(w.mem(), w.mem() + kDeviceBytes);
  return img;
}

const Image& image(bool dirty) {
  static const Image clean = build(false);
  static const Image unclean = build(true);
  return dirty ? unclean : clean;
}

// ----------------------------------------------------------------------- the checks ---

void check_consistent(blob::Blobstore& bs) {
  const blob::SuperBlock& sb = bs.super_block();
  std::set<uint64_t> owned;
  for (blob::BlobId id : bs.blob_ids()) {
    const blob::Blob* b = bs.find(id);
    check(b != nullptr, "a listed blob is not there");
    check(b->metadata().clusters.size() == b->num_clusters(), "a blob's cluster map size");
    for (uint64_t c : b->metadata().clusters) {
      if (c == 0) continue;
      check(c >= sb.first_data_cluster, "a blob cluster in the metadata area");
      check(c < sb.total_clusters, "a blob cluster beyond the device");
      check(owned.insert(c).second, "a cluster with two owners");
    }
    if (b->parent_id() != blob::kInvalidBlobId)
      check(bs.find(b->parent_id()) != nullptr, "a blob whose parent is not loaded");
  }
  check(bs.free_clusters() == sb.total_clusters - sb.first_data_cluster - owned.size(),
        "the free cluster count");
}

struct Snapshot {
  blob::BlobId id;
  blob::BlobMetadata md;
};
std::vector<Snapshot> state_of(blob::Blobstore& bs) {
  std::vector<Snapshot> out;
  for (blob::BlobId id : bs.blob_ids()) out.push_back({id, bs.find(id)->metadata()});
  return out;
}
bool same(const blob::BlobMetadata& a, const blob::BlobMetadata& b) {
  return a.id == b.id && a.flags == b.flags && a.clear_method == b.clear_method &&
         a.num_clusters == b.num_clusters && a.parent == b.parent && a.clusters == b.clusters &&
         a.xattrs == b.xattrs && a.internal_xattrs == b.internal_xattrs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader in{data, size};
  uint8_t config = 0;
  in.take(&config, 1);
  const Image& img = image(config & 1);
  // The input's device, in one buffer for the process: a fresh 1 MiB vector per input was a
  // quarter of the harness's time (mapped, faulted in page by page and unmapped again).
  static std::vector<uint8_t> dev;
  dev.assign(img.device.begin(), img.device.end());
  const uint64_t pages = img.md_end;
  if (g_debug) {  // for corpus authors: which page holds what
    std::fprintf(stderr, "pages: super 0, masks 1-%llu, metadata %llu-%llu:",
                 static_cast<unsigned long long>(img.sb.md_start - 1),
                 static_cast<unsigned long long>(img.sb.md_start),
                 static_cast<unsigned long long>(pages - 1));
    for (uint64_t i = img.sb.md_start; i < pages; ++i) {
      uint64_t id;
      std::memcpy(&id, dev.data() + i * blob::kPageSize, 8);
      if (id != 0) std::fprintf(stderr, " %llu=blob %#llx", static_cast<unsigned long long>(i),
                                static_cast<unsigned long long>(id));
    }
    std::fprintf(stderr, "\n");
  }
  bool super_touched = false;
  auto page = [&](uint8_t i) { return dev.data() + (i % pages) * blob::kPageSize; };
  for (uint8_t op = 0; in.take(&op, 1);) {
    uint8_t p = 0;
    if (!in.get(&p)) break;
    super_touched |= p % pages == 0;
    switch (op & 3) {
      case 0: {
        uint16_t off = 0;
        uint8_t len = 0;
        if (!in.get(&off) || !in.get(&len)) break;
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(len, &got);
        const std::size_t at = off % blob::kPageSize;
        std::memcpy(page(p) + at, b, std::min<std::size_t>(got, blob::kPageSize - at));
        break;
      }
      case 1: {
        uint8_t src = 0;
        if (in.get(&src) && page(src) != page(p)) std::memcpy(page(p), page(src), blob::kPageSize);
        break;
      }
      case 2:
        std::memset(page(p), 0, blob::kPageSize);
        break;
      default:
        break;
    }
    if (op & 4) {
      const uint32_t c = blob::crc32c(page(p), blob::kPageCrcOffset);
      std::memcpy(page(p) + blob::kPageCrcOffset, &c, 4);
    }
  }

  // One world for the process (a fresh one costs more than the load): every input rewrites
  // the whole device, and ends with no store.
  static World& w = *new World;
  std::memcpy(w.mem(), dev.data(), dev.size());
  w.raw(true);
  const int rc = w.load();
  if (g_debug) std::fprintf(stderr, "load: %d\n", rc);
  if (rc != 0) {
    check(rc < 0, "a failed load without a negative errno");
    check(w.bs == nullptr, "a failed load left a store");
    w.bs = nullptr;
    return 0;
  }
  check(w.bs != nullptr, "a load that succeeded gave no store");
  blob::Blobstore& bs = *w.bs;
  check_consistent(bs);
  const blob::LoadReport& report = bs.report();
  check(report.blobs == bs.blob_ids().size(), "the report's blob count");
  if (g_debug) {
    std::fprintf(stderr, "%zu blobs, %llu skipped, %llu pages cleared\n", bs.blob_ids().size(),
                 static_cast<unsigned long long>(report.blobs_skipped),
                 static_cast<unsigned long long>(report.pages_cleared));
    for (const std::string& e : report.errors) std::fprintf(stderr, "  error: %s\n", e.c_str());
    for (const std::string& e : report.repairs) std::fprintf(stderr, "  repair: %s\n", e.c_str());
  }
  // Every blob reads (its first two clusters at most).
  for (blob::BlobId id : bs.blob_ids()) {
    int orc = 0;
    blob::Blob* b = w.open(id, &orc);
    check(orc == 0 && b != nullptr, "a loaded blob does not open");
    const uint64_t n = std::min<uint64_t>(b->num_io_units(), 2 * kCluster / kBlockSize);
    if (n > 0) check(w.io(b, false, 0, n) == 0, "a loaded blob does not read");
    w.free_channel();
    check(w.close(b) == 0, "a loaded blob does not close");
  }
  const std::vector<Snapshot> first = state_of(bs);
  // Unloaded cleanly and loaded again: the very same blobs.
  check(w.unload() == 0, "a loaded store does not unload");
  check(w.load() == 0, "a store that loaded and unloaded does not load again");
  const std::vector<Snapshot> second = state_of(*w.bs);
  check(first.size() == second.size(), "a second load finds a different number of blobs");
  for (std::size_t i = 0; i < first.size(); ++i)
    check(first[i].id == second[i].id && same(first[i].md, second[i].md),
          "a second load finds a different blob");
  check(w.bs->report().was_clean, "a store unloaded cleanly loads dirty");
  w.crash();
  // The load wrote metadata only: the data clusters are as they were.
  if (!super_touched) {
    w.raw(false);
    const std::size_t data = img.sb.first_data_cluster * kCluster;
    check(std::memcmp(w.mem() + data, dev.data() + data, kDeviceBytes - data) == 0,
          "a load wrote into the data clusters");
  }
  return 0;
}
