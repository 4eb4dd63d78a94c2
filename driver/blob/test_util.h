// Test fixture of the blobstore: a step-mode framework, a bdev manager with a malloc bdev,
// a metadata thread t0 and an I/O thread t1, and synchronous wrappers that issue an
// asynchronous call on t0 and step the framework until its callback ran.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/blob/blobstore.h"
#include "driver/env/dma_memory.h"
#include "driver/event/test_util.h"

namespace pollux::blob::testing {

struct Outcome {
  bool called = false;
  int rc = 1;
  BlobId id = kInvalidBlobId;
  Blob* blob = nullptr;
  Blobstore* bs = nullptr;
  static void op(void* a, int rc) { *static_cast<Outcome*>(a) = {true, rc}; }
  static void with_id(void* a, BlobId id, int rc) { *static_cast<Outcome*>(a) = {true, rc, id}; }
  static void with_blob(void* a, Blob* b, int rc) {
    *static_cast<Outcome*>(a) = {true, rc, kInvalidBlobId, b};
  }
  static void with_store(void* a, Blobstore* bs, int rc) {
    *static_cast<Outcome*>(a) = {true, rc, kInvalidBlobId, nullptr, bs};
  }
};

class BlobFixture : public ::testing::Test {
 protected:
  static constexpr uint32_t kCluster = 64 * 1024;  // 128 io_units of 512 bytes
  static constexpr uint64_t kUnitsPerCluster = kCluster / 512;

  void SetUp() override {
    bdev::ManagerOptions o;
    o.io_pool_size = 4096;
    o.bounce_buffers = 0;
    auto m = bdev::Manager::create(*s.fw, o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    mgr = std::move(m).value();
    t0 = s.fw->create_thread("md", 0);
    t1 = s.fw->create_thread("io", 1);
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 4 << 20);
    ASSERT_TRUE(mem.ok());
    buf = std::move(mem).value();
    on(t0, [&] { ASSERT_TRUE(bdev::create_malloc_bdev(*mgr, {"m0", blocks_, 512, nullptr, nullptr}).ok()); });
  }
  void TearDown() override {
    if (ch != nullptr) on(t1, [&] { bs->free_io_channel(ch); });
    ch = nullptr;
    s.settle();
    if (bs != nullptr) on(t0, [&] { bs->abandon(); });
    bs = nullptr;
    s.settle();
    for (bdev::Bdev* b : mgr->bdevs()) on(t0, [&] { mgr->unregister_bdev(b->name()); });
    s.settle();
  }

  void on(event::Thread* t, const std::function<void()>& fn) {
    event::CurrentThreadScope scope(t);
    fn();
  }
  // Issues fn on t0 and steps until the outcome arrives.
  Outcome run(const std::function<void(Outcome*)>& fn, event::Thread* t = nullptr) {
    Outcome out;
    on(t ? t : t0, [&] { fn(&out); });
    for (int i = 0; i < 200000 && !out.called; ++i) s.fw->step();
    EXPECT_TRUE(out.called) << "callback never came";
    return out;
  }

  int init(StoreOptions o = {}) {
    if (o.cluster_size == (1 << 20)) o.cluster_size = kCluster;
    Outcome r = run([&](Outcome* out) { Blobstore::init(*mgr, "m0", o, Outcome::with_store, out); });
    bs = r.bs;
    return r.rc;
  }
  int load(StoreOptions o = {}) {
    Outcome r = run([&](Outcome* out) { Blobstore::load(*mgr, "m0", o, Outcome::with_store, out); });
    bs = r.bs;
    return r.rc;
  }
  int unload() {
    if (ch != nullptr) on(t1, [&] { bs->free_io_channel(ch); });
    ch = nullptr;
    s.settle();
    Outcome r = run([&](Outcome* out) { bs->unload(Outcome::op, out); });
    if (r.rc == 0) bs = nullptr;
    return r.rc;
  }
  // A crash: the store goes away without writing anything.
  void crash() {
    if (ch != nullptr) on(t1, [&] { bs->free_io_channel(ch); });
    ch = nullptr;
    s.settle();
    on(t0, [&] { bs->abandon(); });
    bs = nullptr;
    s.settle();
  }
  BlobId create(uint64_t clusters, bool thin = false, std::vector<Xattr> xattrs = {}, int* rc = nullptr) {
    BlobOptions o;
    o.num_clusters = clusters;
    o.thin = thin;
    o.xattrs = std::move(xattrs);
    Outcome r = run([&](Outcome* out) { bs->create_blob(o, Outcome::with_id, out); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.id;
  }
  Blob* open(BlobId id, int* rc = nullptr) {
    Outcome r = run([&](Outcome* out) { bs->open_blob(id, Outcome::with_blob, out); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.blob;
  }
  int close(Blob* b) { return run([&](Outcome* out) { bs->close_blob(b, Outcome::op, out); }).rc; }
  int sync(Blob* b) { return run([&](Outcome* out) { bs->sync_md(b, Outcome::op, out); }).rc; }
  int resize(Blob* b, uint64_t n) { return run([&](Outcome* out) { bs->resize(b, n, Outcome::op, out); }).rc; }
  int remove(BlobId id) { return run([&](Outcome* out) { bs->delete_blob(id, Outcome::op, out); }).rc; }
  int inflate(BlobId id) { return run([&](Outcome* out) { bs->inflate(id, Outcome::op, out); }).rc; }
  int decouple(BlobId id) { return run([&](Outcome* out) { bs->decouple_parent(id, Outcome::op, out); }).rc; }
  BlobId snapshot(BlobId id, int* rc = nullptr) {
    Outcome r = run([&](Outcome* out) { bs->snapshot(id, {}, Outcome::with_id, out); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.id;
  }
  BlobId clone(BlobId id, int* rc = nullptr) {
    Outcome r = run([&](Outcome* out) { bs->clone(id, {}, Outcome::with_id, out); });
    if (rc) *rc = r.rc;
    else EXPECT_EQ(r.rc, 0);
    return r.id;
  }

  event::IoChannel* channel() {
    if (ch == nullptr) on(t1, [&] { ch = bs->alloc_io_channel(); });
    return ch;
  }
  uint8_t* mem(std::size_t off = 0) { return static_cast<uint8_t*>(buf->data()) + off; }
  // Fills n io_units at mem(at) with a pattern of (seed, unit).
  void fill(std::size_t at, uint64_t n, uint64_t seed) {
    for (uint64_t u = 0; u < n; ++u)
      for (uint32_t i = 0; i < 512; i += 8) {
        const uint64_t v = seed * 1000003 + u * 7919 + i;
        std::memcpy(mem(at + u * 512 + i), &v, 8);
      }
  }
  int write(Blob* b, uint64_t off, uint64_t n, std::size_t at = 0) {
    int submit = 0;
    Outcome r = run([&](Outcome* out) {
      submit = bs->write(b, channel(), mem(at), off, n, Outcome::op, out);
      if (submit != 0) *out = {true, submit};
    }, t1);
    return r.rc;
  }
  int read(Blob* b, uint64_t off, uint64_t n, std::size_t at = 0) {
    Outcome r = run([&](Outcome* out) {
      const int submit = bs->read(b, channel(), mem(at), off, n, Outcome::op, out);
      if (submit != 0) *out = {true, submit};
    }, t1);
    return r.rc;
  }
  // Writes a pattern and returns it, for later comparison.
  std::vector<uint8_t> write_pattern(Blob* b, uint64_t off, uint64_t n, uint64_t seed) {
    fill(0, n, seed);
    EXPECT_EQ(write(b, off, n), 0);
    return std::vector<uint8_t>(mem(0), mem(n * 512));
  }
  std::vector<uint8_t> read_back(Blob* b, uint64_t off, uint64_t n) {
    std::memset(mem(0), 0xee, n * 512);
    EXPECT_EQ(read(b, off, n), 0);
    return std::vector<uint8_t>(mem(0), mem(n * 512));
  }

  uint64_t blocks_ = (32u << 20) / 512;  // 32 MiB: 512 clusters of 64 KiB
  event::testing::StepFramework s;
  std::unique_ptr<bdev::Manager> mgr;
  event::Thread *t0 = nullptr, *t1 = nullptr;
  std::unique_ptr<env::DmaRegion> buf;
  Blobstore* bs = nullptr;
  event::IoChannel* ch = nullptr;
};

}  // namespace pollux::blob::testing
