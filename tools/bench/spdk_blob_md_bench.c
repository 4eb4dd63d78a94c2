/* SPDK's side of //driver/blob:blob_md_bench: the same metadata operations, one after another
 * on one core, on a 256 MiB malloc bdev (512 B blocks) with 64 KiB clusters, timed with the
 * wall clock:
 *   create (persisted) + open + close, open + close, open + set_xattr + sync_md + close,
 *   snapshot (of a quarter of the blobs), delete.
 * Built and run against an SPDK build by tools/bench/blob_md_side_by_side.sh. */
#include "spdk/bdev.h"
#include "spdk/blob.h"
#include "spdk/blob_bdev.h"
#include "spdk/env.h"
#include "spdk/event.h"
#include "spdk/stdinc.h"

enum phase { CREATE, OPEN_CLOSE, XATTR_SYNC, SNAPSHOT, DELETE, DONE };
static const char* const k_names[] = {"create (persisted) + open + close", "open + close",
                                      "open + set_xattr + sync_md + close", "snapshot", "delete"};

struct bench {
  struct spdk_blob_store* bs;
  int n, i;
  enum phase phase;
  spdk_blob_id* ids;
  struct spdk_blob* blob;
  uint64_t t0;
};

static struct bench g;

static void step(void);

static void fail(const char* what, int rc) {
  fprintf(stderr, "spdk_blob_md_bench: %s failed: %d\n", what, rc);
  spdk_app_stop(1);
}

static void report(void) {
  const int count = g.phase == SNAPSHOT ? g.n / 4 : g.n;
  const double s = (double)(spdk_get_ticks() - g.t0) / (double)spdk_get_ticks_hz();
  printf("%-34s %8d ops %10.0f ops/s %8.2f us/op\n", k_names[g.phase], count, count / s,
         s * 1e6 / count);
}

static void next_op(void) {
  g.i++;
  const int count = g.phase == SNAPSHOT ? g.n / 4 : g.n;
  if (g.i == count) {
    report();
    g.phase++;
    g.i = 0;
    g.t0 = spdk_get_ticks();
  }
  step();
}

static void unloaded(void* arg, int rc) {
  spdk_app_stop(rc);
}

static void op_done(void* arg, int rc) {
  if (rc) {
    return fail("an operation", rc);
  }
  next_op();
}

static void closed(void* arg, int rc) {
  if (rc) {
    return fail("close", rc);
  }
  next_op();
}

static void synced(void* arg, int rc) {
  if (rc) {
    return fail("sync_md", rc);
  }
  spdk_blob_close(g.blob, closed, NULL);
}

static void opened(void* arg, struct spdk_blob* blob, int rc) {
  if (rc) {
    return fail("open", rc);
  }
  g.blob = blob;
  if (g.phase == XATTR_SYNC) {
    spdk_blob_set_xattr(blob, "k", &g.i, sizeof(g.i));
    spdk_blob_sync_md(blob, synced, NULL);
    return;
  }
  spdk_blob_close(blob, closed, NULL);
}

static void created(void* arg, spdk_blob_id id, int rc) {
  if (rc) {
    return fail("create", rc);
  }
  g.ids[g.i] = id;
  spdk_bs_open_blob(g.bs, id, opened, NULL);
}

static void snapshotted(void* arg, spdk_blob_id id, int rc) {
  if (rc) {
    return fail("snapshot", rc);
  }
  next_op();
}

static void step(void) {
  struct spdk_blob_opts opts;

  switch (g.phase) {
    case CREATE:
      spdk_blob_opts_init(&opts, sizeof(opts));
      opts.num_clusters = 1;
      spdk_bs_create_blob_ext(g.bs, &opts, created, NULL);
      return;
    case OPEN_CLOSE:
    case XATTR_SYNC:
      spdk_bs_open_blob(g.bs, g.ids[g.i], opened, NULL);
      return;
    case SNAPSHOT:
      spdk_bs_create_snapshot(g.bs, g.ids[g.i], NULL, snapshotted, NULL);
      return;
    case DELETE:
      spdk_bs_delete_blob(g.bs, g.ids[g.i], op_done, NULL);
      return;
    case DONE:
      printf("(SPDK blobstore: malloc bdev 256 MiB, 64 KiB clusters)\n");
      spdk_bs_unload(g.bs, unloaded, NULL);
      return;
  }
}

static void bs_ready(void* arg, struct spdk_blob_store* bs, int rc) {
  if (rc) {
    return fail("bs_init", rc);
  }
  g.bs = bs;
  g.phase = CREATE;
  g.i = 0;
  g.t0 = spdk_get_ticks();
  step();
}

static void base_event(enum spdk_bdev_event_type type, struct spdk_bdev* bdev, void* ctx) {}

static void start(void* arg) {
  struct spdk_bs_dev* dev = NULL;
  struct spdk_bs_opts opts;
  int rc = spdk_bdev_create_bs_dev_ext("Malloc0", base_event, NULL, &dev);

  if (rc) {
    return fail("create_bs_dev", rc);
  }
  spdk_bs_opts_init(&opts, sizeof(opts));
  opts.cluster_sz = 64 * 1024;
  spdk_bs_init(dev, &opts, bs_ready, NULL);
}

int main(int argc, char** argv) {
  struct spdk_app_opts opts = {};
  int rc;

  if (argc < 2) {
    fprintf(stderr, "usage: %s CONFIG.json [count]\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g.n = argc > 2 ? atoi(argv[2]) : 2000;
  g.ids = calloc(g.n, sizeof(*g.ids));
  spdk_app_opts_init(&opts, sizeof(opts));
  opts.name = "blob_md_bench";
  opts.json_config_file = argv[1];
  opts.reactor_mask = "0x1";
  opts.no_huge = true;
  opts.mem_size = 1024;
  rc = spdk_app_start(&opts, start, NULL);
  spdk_app_fini();
  free(g.ids);
  return rc;
}
