#!/usr/bin/env bash
# Blobstore metadata operations per second, Pollux and SPDK side by side, alternating ROUNDS
# times in one run (one core each, a 256 MiB malloc bdev, 64 KiB clusters, COUNT blobs):
#   bazel build -c opt //driver/blob:blob_md_bench
#   SPDK_DIR=/path/to/spdk tools/bench/blob_md_side_by_side.sh [ROUNDS] [COUNT]
# SPDK's side is tools/bench/spdk_blob_md_bench.c, built here against SPDK_DIR's libraries.
# (COUNT 2000 makes SPDK's snapshots fail with -ENOMEM on this store: 1000 is the default.)
set -euo pipefail
rounds=${1:-3} count=${2:-1000}
root=$(cd "$(dirname "$0")/../.." && pwd)
pollux=$root/bazel-bin/driver/blob/blob_md_bench
[ -x "$pollux" ] || { echo "build first: bazel build -c opt //driver/blob:blob_md_bench"; exit 2; }
[ -n "${SPDK_DIR:-}" ] || { echo "SPDK_DIR must name an SPDK build"; exit 2; }
work=$(mktemp -d /tmp/blob-md-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
vfu=$SPDK_DIR/build/libvfio-user/build-release/lib
export PKG_CONFIG_PATH=$SPDK_DIR/build/lib/pkgconfig
gcc -O2 -I"$SPDK_DIR/build/include" -I"$SPDK_DIR/include" -o "$work/spdk_blob_md_bench" \
  "$root/tools/bench/spdk_blob_md_bench.c" -L"$vfu" -Wl,--no-as-needed \
  $(pkg-config --libs spdk_event spdk_event_bdev spdk_bdev_malloc spdk_blob_bdev spdk_blob \
    spdk_env_dpdk) $(pkg-config --libs spdk_syslibs) -Wl,--as-needed
cat >"$work/malloc.json" <<JSON
{"subsystems":[{"subsystem":"bdev","config":[
 {"method":"bdev_malloc_create","params":{"name":"Malloc0","num_blocks":524288,"block_size":512}}]}]}
JSON
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/dpdk/build/lib:$vfu
echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  echo "## round $r: Pollux"
  taskset -c 0 "$pollux" "$count"
  echo "## round $r: SPDK"
  taskset -c 0 timeout -s KILL 120 "$work/spdk_blob_md_bench" "$work/malloc.json" "$count" 2>/dev/null |
    grep -E 'ops/s|SPDK'
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
