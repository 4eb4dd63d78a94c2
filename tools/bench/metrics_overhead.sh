#!/usr/bin/env bash
# What --metrics costs pollux-bdevperf: runs each workload with metrics off and on (a scraper
# reading the endpoint every second, as Prometheus would), alternating, and
# prints IOPS. On a 2-core machine the run-to-run spread is several percent: use many runs.
#   tools/bench/metrics_overhead.sh [runs=3] [seconds=5]
# Workloads: a null bdev (the bdev layer alone: metrics add the collector's poller) and the
# functional emulator's NVMe namespaces over vfio-user (adds per-qpair latency tracking:
# a clock read per doorbell and per completion batch). Pin: bdevperf on core 0, the
# emulator on core 1.
set -euo pipefail
runs=${1:-3} secs=${2:-5}
cd "$(dirname "$0")/../.."
bazel build //driver/bdev/perf:pollux-bdevperf //emulator/device:pollux-emu >/dev/null 2>&1
B=bazel-bin/driver/bdev/perf/pollux-bdevperf
E=bazel-bin/emulator/device/pollux-emu
tmp=$(mktemp -d)
emu_pid=
scraper_pid=
cleanup() { kill $emu_pid $scraper_pid 2>/dev/null; rm -rf "$tmp"; }
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
    echo "$ep" >"$tmp/target"  # the scraper (started once, below) reads it from now on
  fi
  wait "$pid"
  rm -f "$tmp/target"
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

# One scraper for the whole script, on bdevperf's core so that what scrapes cost is charged
# to the run (a Prometheus server would run elsewhere); started once, so no interpreter
# start-up lands inside a run. It scrapes $tmp/target every second while that file exists.
taskset -c 0 python3 -c '
import sys, time, urllib.request
target = sys.argv[1]
while True:
    try:
        with open(target) as f:
            urllib.request.urlopen(f.read().strip(), timeout=5).read()
    except OSError:
        pass
    time.sleep(1)' "$tmp/target" &
scraper_pid=$!

echo "| workload | metrics off (IOPS) | metrics on, scraped every 1 s | median change |"
echo "|---|---|---|---|"
run_pair "null 4 KiB randread QD128" --null N0:1048576 -q 128 -o 4096 -w randread
run_pair "null 4 KiB randread QD1" --null N0:1048576 -q 1 -o 4096 -w randread
taskset -c 1 "$E" -s "$sock" -q &
emu_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
run_pair "NVMe (functional emulator) 4 KiB randread QD128 x2" --json "$tmp/nvme.json" -q 128 -o 4096 -w randread
run_pair "NVMe (functional emulator) 4 KiB randread QD1 x2" --json "$tmp/nvme.json" -q 1 -o 4096 -w randread
