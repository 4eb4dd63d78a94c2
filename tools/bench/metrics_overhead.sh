#!/usr/bin/env bash
# What --metrics costs pollux-bdevperf: runs each workload with metrics off and on (a scraper
# reading the endpoint every second, as Prometheus would), alternating, and prints IOPS.
#   tools/bench/metrics_overhead.sh [runs=3] [seconds=5]
# Workloads: a null bdev (the bdev layer alone: metrics add the collector's poller) and the
# functional emulator's NVMe namespaces over vfio-user (adds per-qpair latency tracking:
# a clock read per submission and per completion batch). Pin: bdevperf on core 0, the
# emulator on core 1.
set -euo pipefail
runs=${1:-3} secs=${2:-5}
cd "$(dirname "$0")/../.."
bazel build //driver/bdev/perf:pollux-bdevperf //emulator/device:pollux-emu >/dev/null 2>&1
B=bazel-bin/driver/bdev/perf/pollux-bdevperf
E=bazel-bin/emulator/device/pollux-emu
tmp=$(mktemp -d)
emu_pid=
cleanup() { [ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
sock=$tmp/emu.sock
sed "s|/tmp/emu.sock|$sock|" driver/bdev/examples/nvme_emu.json >"$tmp/nvme.json"

iops() {  # args...: one bdevperf run; prints total IOPS
  local out=$tmp/out.txt
  taskset -c 0 "$B" "$@" -t "$secs" -m 0x1 >"$out" 2>&1 &
  local pid=$!
  if [[ " $* " == *" --metrics "* ]]; then
    local ep=""
    for _ in $(seq 100); do ep=$(grep -o 'http://[^ ]*/metrics' "$out" || true); [ -n "$ep" ] && break; sleep 0.05; done
    while kill -0 "$pid" 2>/dev/null; do curl -s -o /dev/null "$ep" || true; sleep 1; done
  fi
  wait "$pid"
  python3 -c 'import json,sys; print(round(json.loads(sys.stdin.read().splitlines()[-1])["total"]["iops"]))' <"$out"
}

run_pair() {  # label args...
  local label=$1; shift
  local off=() on=()
  for _ in $(seq "$runs"); do
    off+=("$(iops "$@")")
    on+=("$(iops "$@" --metrics 127.0.0.1:0)")
  done
  python3 - "$label" "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
label, off, on = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
mo, mn = statistics.median(off), statistics.median(on)
print(f"| {label} | {' / '.join(f'{x/1e6:.2f} M' for x in off)} | {' / '.join(f'{x/1e6:.2f} M' for x in on)} | {100*(mn-mo)/mo:+.1f}% |")
PY
}

echo "| workload | metrics off (IOPS) | metrics on, scraped every 1 s | median change |"
echo "|---|---|---|---|"
run_pair "null 4 KiB randread QD128" --null N0:1048576 -q 128 -o 4096 -w randread
run_pair "null 4 KiB randread QD1" --null N0:1048576 -q 1 -o 4096 -w randread
taskset -c 1 "$E" -s "$sock" -q &
emu_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
run_pair "NVMe (functional emulator) 4 KiB randread QD128 x2" --json "$tmp/nvme.json" -q 128 -o 4096 -w randread
run_pair "NVMe (functional emulator) 4 KiB randread QD1 x2" --json "$tmp/nvme.json" -q 1 -o 4096 -w randread
