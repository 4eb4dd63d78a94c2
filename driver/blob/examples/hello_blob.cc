// hello_blob: the blobstore's "hello world", in the seeds' spirit. On a RAM disk: make a
// blobstore, create a blob, open it, give it a cluster, write "Hello blob!" into it, read it
// back, then close and delete the blob and unload the store. Every step is an asynchronous
// call whose callback starts the next one, on one framework thread.
//   bazel run //driver/blob:hello_blob
#include <cstdio>
#include <cstring>
#include <memory>

#include "driver/bdev/modules/malloc.h"
#include "driver/blob/blobstore.h"
#include "driver/env/dma_memory.h"

using namespace pollux;

namespace {

struct Hello {
  event::Framework* fw = nullptr;
  std::unique_ptr<bdev::Manager> mgr;
  blob::Blobstore* bs = nullptr;
  blob::BlobId id = 0;
  blob::Blob* blob = nullptr;
  event::IoChannel* ch = nullptr;
  std::unique_ptr<env::DmaRegion> buf;  // blob I/O buffers are DMA memory
  int rc = 0;
};

void finish(Hello* h, const char* failed, int rc) {
  if (failed) {
    std::fprintf(stderr, "hello_blob: %s failed: %s\n", failed, std::strerror(-rc));
    h->rc = 1;
  }
  h->fw->stop(h->rc);
}

void unloaded(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "unload", rc);
  std::printf("blobstore unloaded\n");
  finish(h, nullptr, 0);
}

void deleted(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "delete", rc);
  std::printf("blob deleted\n");
  h->bs->unload(unloaded, h);
}

void closed(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "close", rc);
  h->bs->delete_blob(h->id, deleted, h);
}

void read_done(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "read", rc);
  const char* got = static_cast<const char*>(h->buf->data()) + 4096;
  std::printf("read back: \"%s\" (%s)\n", got, std::strcmp(got, "Hello blob!") == 0 ? "match" : "MISMATCH");
  if (std::strcmp(got, "Hello blob!") != 0) h->rc = 1;
  h->bs->free_io_channel(h->ch);
  h->bs->close_blob(h->blob, closed, h);
}

void written(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "write", rc);
  char* out = static_cast<char*>(h->buf->data()) + 4096;
  std::memset(out, 0, 4096);
  if (int e = h->bs->read(h->blob, h->ch, out, 0, 4096 / h->bs->io_unit_size(), read_done, h)) finish(h, "read", e);
}

void synced(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "sync_md", rc);
  h->ch = h->bs->alloc_io_channel();
  char* in = static_cast<char*>(h->buf->data());
  std::memset(in, 0, 4096);
  std::strcpy(in, "Hello blob!");
  std::printf("writing \"%s\" at io_unit 0 of blob %llu\n", in, static_cast<unsigned long long>(h->id));
  if (int e = h->bs->write(h->blob, h->ch, in, 0, 4096 / h->bs->io_unit_size(), written, h)) finish(h, "write", e);
}

void resized(void* arg, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "resize", rc);
  std::printf("blob resized to %llu cluster(s), %llu io_units of %llu bytes\n",
              static_cast<unsigned long long>(h->blob->num_clusters()),
              static_cast<unsigned long long>(h->blob->num_io_units()),
              static_cast<unsigned long long>(h->bs->io_unit_size()));
  h->bs->sync_md(h->blob, synced, h);  // the new size is durable from here on
}

void opened(void* arg, blob::Blob* b, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "open", rc);
  h->blob = b;
  h->bs->resize(b, 1, resized, h);
}

void created(void* arg, blob::BlobId id, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "create", rc);
  h->id = id;
  std::printf("created blob %llu\n", static_cast<unsigned long long>(id));
  h->bs->open_blob(id, opened, h);
}

void store_ready(void* arg, blob::Blobstore* bs, int rc) {
  auto* h = static_cast<Hello*>(arg);
  if (rc) return finish(h, "init", rc);
  h->bs = bs;
  std::printf("blobstore ready: %llu clusters of %llu bytes, %llu free\n",
              static_cast<unsigned long long>(bs->total_clusters()),
              static_cast<unsigned long long>(bs->cluster_size()),
              static_cast<unsigned long long>(bs->free_clusters()));
  bs->create_blob({}, created, h);
}

void start(void* arg) {
  auto* h = static_cast<Hello*>(arg);
  if (auto r = bdev::create_malloc_bdev(*h->mgr, {"Malloc0", 16384, 512, nullptr, nullptr}); !r)
    return finish(h, "malloc bdev", r.error().code);
  blob::StoreOptions o;
  o.cluster_size = 1 << 20;
  blob::Blobstore::init(*h->mgr, "Malloc0", o, store_ready, h);
}

}  // namespace

int main() {
  event::FrameworkOptions fo;
  fo.core_mask = "0x1";
  fo.pin_reactors = false;
  auto fw = event::Framework::create(fo);
  if (!fw) {
    std::fprintf(stderr, "hello_blob: %s\n", fw.error().message.c_str());
    return 1;
  }
  Hello h;
  h.fw = fw->get();
  auto mgr = bdev::Manager::create(*h.fw);
  auto buf = env::DmaRegion::create(env::MemoryRegistry::global(), 8192);
  if (!mgr || !buf) {
    std::fprintf(stderr, "hello_blob: set-up failed\n");
    return 1;
  }
  h.mgr = std::move(mgr).value();
  h.buf = std::move(buf).value();
  const int rc = h.fw->run(start, &h);
  return rc == 0 && h.rc == 0 ? 0 : 1;
}
