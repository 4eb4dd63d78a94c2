#!/usr/bin/env bash
# Pollux against SPDK, side by side in one run: each workload is run by SPDK's tool and by
# Pollux's, one after the other, alternating which goes first, several rounds. Figures from
# another run are not comparable on these machines (±15% and more between runs).
#
#   tools/bench/spdk_side_by_side.sh SPDK_DIR [runs=3] [seconds=5] [what=all|bdev|nvme]
#
# SPDK_DIR: a built SPDK tree (build/examples/bdevperf, build/bin/spdk_nvme_perf), e.g.
# /tmp/spdk (docs/BENCHMARKS.md and /work/shared/notes/ENVIRONMENT.md say how it was built).
# Needs 2 MiB hugepages for SPDK (512 free or more) and a hugetlbfs mount, e.g.
#   echo 1024 > /proc/sys/vm/nr_hugepages; mkdir -p /dev/hugepages
#   mount -t hugetlbfs nodev /dev/hugepages
# (the script does not change them: undo what you set when you are done).
#
# bdev: SPDK's bdevperf and pollux-bdevperf, one reactor on core 0, 4 KiB randread:
#   null bdev (1,048,576 x 512 B) QD128 and QD1, malloc bdev (65,536 x 4 KiB) QD128.
# nvme: spdk_nvme_perf (vfio-user host, -g) and pollux-perf, core 0, against one pollux-emu
#   on core 1 (namespace 1, unwritten blocks), 4 KiB randread QD128 and QD1.
# Prints each command once, then a Markdown table: every run's IOPS, the ratio of medians,
# and the 1-minute load average seen before each run (min-max).
# POLLUX_BDEVPERF, POLLUX_PERF, POLLUX_EMU: other Pollux binaries (e.g. an older build, for
# a before/after table); without them the script builds this tree's.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1/build/examples/bdevperf" ]; then
  echo "usage: $0 SPDK_DIR [runs=3] [seconds=5] [all|bdev|nvme]" >&2
  echo "  SPDK_DIR must hold a built SPDK (build/examples/bdevperf)" >&2
  exit 2
fi
spdk=$(cd "$1" && pwd)
runs=${2:-3} secs=${3:-5} what=${4:-all}
case $what in all | bdev | nvme) ;; *) echo "what: all, bdev or nvme" >&2; exit 2 ;; esac
free_huge=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if [ "${free_huge:-0}" -lt 512 ] || ! grep -q hugetlbfs /proc/mounts; then
  echo "SPDK needs 2 MiB hugepages (free: ${free_huge:-0}, want >= 512) and a hugetlbfs mount" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
if [ -z "${POLLUX_BDEVPERF:-}${POLLUX_PERF:-}${POLLUX_EMU:-}" ]; then
  bazel build //driver/bdev/perf:pollux-bdevperf //driver/nvme/perf:pollux-perf \
    //emulator/device:pollux-emu >/dev/null 2>&1
fi
B=${POLLUX_BDEVPERF:-$PWD/bazel-bin/driver/bdev/perf/pollux-bdevperf}
P=${POLLUX_PERF:-$PWD/bazel-bin/driver/nvme/perf/pollux-perf}
E=${POLLUX_EMU:-$PWD/bazel-bin/emulator/device/pollux-emu}
export LD_LIBRARY_PATH=$spdk/build/lib:$spdk/build/libvfio-user/build-release/lib
tmp=$(mktemp -d)
emu_pid=
# SPDK's hugepage files (spdk_pid<PID>map_<N>) that a run left behind (it happened once in
# many spdk_nvme_perf -g runs) hold hugepages until removed: remove those this script's runs
# left, i.e. new since the start and of a process that has ended.
huge_dirs=$(awk '$3 == "hugetlbfs" {print $2}' /proc/mounts)
ls $huge_dirs 2>/dev/null | grep '^spdk_pid' | sort >"$tmp/huge_before" || true
cleanup() {
  [ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null
  for d in $huge_dirs; do
    for f in "$d"/spdk_pid*; do
      [ -e "$f" ] || continue
      grep -qx "$(basename "$f")" "$tmp/huge_before" && continue
      pid=${f##*spdk_pid}; pid=${pid%%map_*}
      kill -0 "$pid" 2>/dev/null || rm -f "$f"
    done
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/null.json" <<'EOF'
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_null_create", "params": {"name": "Null0", "num_blocks": 1048576, "block_size": 512}}]}]}
EOF
cat >"$tmp/malloc.json" <<'EOF'
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 65536, "block_size": 4096}}]}]}
EOF

load() { cut -d' ' -f1 /proc/loadavg; }
fail() { echo "run failed: $1 (output below)" >&2; cat "$2" >&2; exit 1; }

# Each prints the run's total IOPS.
spdk_bdevperf() {  # json qd
  local out=$tmp/out
  (cd "$spdk" && build/examples/bdevperf -m 0x1 -r "$tmp/spdk.sock" --json "$1" -q "$2" \
    -o 4096 -w randread -t "$secs") >"$out" 2>&1 || fail "SPDK bdevperf $*" "$out"
  tr '\r' '\n' <"$out" | awk '$1 == "Total" && $2 == ":" {print int($3)}' | tail -1
}
pollux_bdevperf() {  # bdev-spec-args... qd (last)
  local out=$tmp/out qd=${*: -1} args=("${@:1:$#-1}")
  taskset -c 0 "$B" "${args[@]}" -q "$qd" -o 4096 -w randread -t "$secs" -m 0x1 >"$out" 2>&1 ||
    fail "pollux-bdevperf $*" "$out"
  python3 -c 'import json,sys; print(round(json.loads(sys.stdin.read().splitlines()[-1])["total"]["iops"]))' <"$out"
}
spdk_nvme_perf() {  # qd
  local out=$tmp/out
  (cd "$spdk" && build/bin/spdk_nvme_perf -g -r "trtype:VFIOUSER traddr:$tmp/emu subnqn:nqn.x:y ns:1" \
    -q "$1" -o 4096 -w randread -t "$secs" -c 0x1) >"$out" 2>&1 || fail "spdk_nvme_perf $*" "$out"
  tr '\r' '\n' <"$out" | awk '$1 == "Total" && $2 == ":" {print int($3)}' | tail -1
}
pollux_perf() {  # qd
  local out=$tmp/out
  taskset -c 0 "$P" -r "trtype:vfio-user traddr:$tmp/emu/cntrl" -q "$1" -o 4096 -w randread \
    -t "$secs" -c 0x1 -n 1 --json "$tmp/perf.json" >"$out" 2>&1 || fail "pollux-perf $*" "$out"
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["total"]["iops"]))' "$tmp/perf.json"
}

# label spdk-fn spdk-args pollux-fn pollux-args: alternating rounds, then one table row.
pair() {
  local label=$1 sf=$2 sa=$3 pf=$4 pa=$5 s=() p=() loads=()
  for r in $(seq "$runs"); do
    if [ $((r % 2)) -eq 1 ]; then
      loads+=("$(load)"); s+=("$($sf $sa)")
      loads+=("$(load)"); p+=("$($pf $pa)")
    else
      loads+=("$(load)"); p+=("$($pf $pa)")
      loads+=("$(load)"); s+=("$($sf $sa)")
    fi
  done
  python3 - "$label" "${s[*]}" "${p[*]}" "${loads[*]}" <<'PY'
import statistics, sys
label, s, p, loads = sys.argv[1], [int(x) for x in sys.argv[2].split()], \
    [int(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
if not s or not p or len(s) != len(p):
    sys.exit(f"{label}: a run gave no IOPS figure")
fmt = lambda xs: ' / '.join(f'{x/1e6:.2f}' for x in xs)
ratio = statistics.median(p) / statistics.median(s)
print(f"| {label} | {fmt(s)} | {fmt(p)} | **{ratio:.2f}×** | {min(loads):.2f}–{max(loads):.2f} |", flush=True)
PY
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
echo "# $runs runs of ${secs} s each, alternating; SPDK $(cat "$spdk/VERSION" 2>/dev/null || echo '?') in $spdk"
echo "# Pollux: $B ($(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+changes'))"
echo "#   SPDK bdev:   build/examples/bdevperf -m 0x1 --json {null,malloc}.json -q QD -o 4096 -w randread -t $secs"
echo "#   Pollux bdev: taskset -c 0 pollux-bdevperf {--null Null0:1048576 | --malloc Malloc0:65536:4096} -q QD -o 4096 -w randread -t $secs -m 0x1"
echo "#   SPDK nvme:   build/bin/spdk_nvme_perf -g -r 'trtype:VFIOUSER traddr:DIR subnqn:nqn.x:y ns:1' -q QD -o 4096 -w randread -t $secs -c 0x1"
echo "#   Pollux nvme: taskset -c 0 pollux-perf -r 'trtype:vfio-user traddr:DIR/cntrl' -q QD -o 4096 -w randread -t $secs -c 0x1 -n 1"
echo "#   (pollux-emu -s DIR/cntrl -q on core 1 for the nvme rows)"
echo
echo "| workload (4 KiB randread, one core) | SPDK IOPS (M) | Pollux IOPS (M) | Pollux / SPDK (medians) | load |"
echo "|---|---|---|---|---|"
if [ "$what" != nvme ]; then
  pair "null bdev QD128" spdk_bdevperf "$tmp/null.json 128" pollux_bdevperf "--null Null0:1048576 128"
  pair "null bdev QD1" spdk_bdevperf "$tmp/null.json 1" pollux_bdevperf "--null Null0:1048576 1"
  pair "malloc bdev QD128" spdk_bdevperf "$tmp/malloc.json 128" pollux_bdevperf "--malloc Malloc0:65536:4096 128"
fi
if [ "$what" != bdev ]; then
  mkdir -p "$tmp/emu"
  taskset -c 1 "$E" -s "$tmp/emu/cntrl" -q &
  emu_pid=$!
  for _ in $(seq 100); do [ -S "$tmp/emu/cntrl" ] && break; sleep 0.05; done
  pair "pollux-emu ns 1, QD128: spdk_nvme_perf vs pollux-perf" spdk_nvme_perf 128 pollux_perf 128
  pair "pollux-emu ns 1, QD1: spdk_nvme_perf vs pollux-perf" spdk_nvme_perf 1 pollux_perf 1
fi
