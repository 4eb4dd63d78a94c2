// Metadata operations per second on a malloc bdev (one core, step mode, wall clock):
// create (persisted) + close, open + close, snapshot, delete.
//   bazel run //driver/blob:blob_md_bench -- [count]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "driver/bdev/modules/malloc.h"
#include "driver/blob/blobstore.h"
#include "driver/env/clock.h"

using namespace pollux;

namespace {

struct Done {
  bool done = false;
  int rc = 0;
  blob::BlobId id = 0;
  blob::Blob* b = nullptr;
  blob::Blobstore* bs = nullptr;
};

event::Framework* g_fw;

void wait(Done& d) {
  while (!d.done) g_fw->step();
  if (d.rc != 0) {
    std::fprintf(stderr, "blob_md_bench: an operation failed: %d\n", d.rc);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  env::VirtualClock clock{1'000'000'000};
  event::FrameworkOptions fo;
  fo.core_mask = "0x1";
  fo.step_mode = true;
  fo.clock = &clock;
  auto fw = event::Framework::create(fo);
  if (!fw.ok()) return 1;
  g_fw = fw.value().get();
  auto mgr = bdev::Manager::create(*g_fw).value();
  event::Thread* t = g_fw->create_thread("md", 0);
  event::CurrentThreadScope scope(t);
  if (!bdev::create_malloc_bdev(*mgr, {"m0", (256u << 20) / 512, 512, nullptr, nullptr}).ok()) return 1;
  Done init;
  blob::StoreOptions so;
  so.cluster_size = 64 * 1024;
  blob::Blobstore::init(*mgr, "m0", so, [](void* a, blob::Blobstore* bs, int rc) {
    auto* d = static_cast<Done*>(a);
    d->done = true, d->rc = rc, d->bs = bs;
  }, &init);
  wait(init);
  blob::Blobstore* bs = init.bs;
  auto op = [](void* a, int rc) { static_cast<Done*>(a)->done = true, static_cast<Done*>(a)->rc = rc; };
  auto with_id = [](void* a, blob::BlobId id, int rc) {
    auto* d = static_cast<Done*>(a);
    d->done = true, d->rc = rc, d->id = id;
  };
  auto with_blob = [](void* a, blob::Blob* b, int rc) {
    auto* d = static_cast<Done*>(a);
    d->done = true, d->rc = rc, d->b = b;
  };
  using clk = std::chrono::steady_clock;
  auto rate = [](const char* what, int count, clk::time_point from) {
    const double s = std::chrono::duration<double>(clk::now() - from).count();
    std::printf("%-34s %8d ops %10.0f ops/s %8.2f us/op\n", what, count, count / s, s * 1e6 / count);
  };
  std::vector<blob::BlobId> ids;
  auto t0 = clk::now();
  for (int i = 0; i < n; ++i) {
    Done c, o, cl;
    blob::BlobOptions bo;
    bo.num_clusters = 1;
    bs->create_blob(bo, with_id, &c);
    wait(c);
    bs->open_blob(c.id, with_blob, &o);
    wait(o);
    bs->close_blob(o.b, op, &cl);
    wait(cl);
    ids.push_back(c.id);
  }
  rate("create (persisted) + open + close", n, t0);
  t0 = clk::now();
  for (int i = 0; i < n; ++i) {
    Done o, cl;
    bs->open_blob(ids[i], with_blob, &o);
    wait(o);
    bs->close_blob(o.b, op, &cl);
    wait(cl);
  }
  rate("open + close", n, t0);
  t0 = clk::now();
  for (int i = 0; i < n; ++i) {
    Done o, x, sy, cl;
    bs->open_blob(ids[i], with_blob, &o);
    wait(o);
    o.b->set_xattr("k", &i, sizeof i);
    bs->sync_md(o.b, op, &sy);
    wait(sy);
    bs->close_blob(o.b, op, &cl);
    wait(cl);
  }
  rate("open + set_xattr + sync_md + close", n, t0);
  const int snaps = n / 4;
  std::vector<blob::BlobId> sids;
  t0 = clk::now();
  for (int i = 0; i < snaps; ++i) {
    Done s;
    bs->snapshot(ids[i], {}, with_id, &s);
    wait(s);
    sids.push_back(s.id);
  }
  rate("snapshot", snaps, t0);
  t0 = clk::now();
  for (int i = 0; i < n; ++i) {
    Done d;
    bs->delete_blob(ids[i], op, &d);
    wait(d);
  }
  rate("delete", n, t0);
  std::printf("(malloc bdev 256 MiB, 64 KiB clusters, %llu md pages; every persist is flush, "
              "page write, flush, zero of the old page)\n",
              static_cast<unsigned long long>(bs->super_block().md_pages));
  bs->abandon();
  for (int i = 0; i < 1000; ++i) g_fw->step();
  return 0;
}
