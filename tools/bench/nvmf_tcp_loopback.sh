#!/usr/bin/env bash
# NVMe/TCP target on loopback: pollux-perf 4 KiB randread at QD 1 and QD 128 against pollux-tgt
# (null bdev, target on core 0, host on core 1), and — when SPDK_DIR names an SPDK build — the
# same against SPDK's nvmf_tgt, and SPDK's spdk_nvme_perf as the host against both,
# alternating, ROUNDS times (runs here vary by tens of percent: compare only figures of one
# run of this script).
#   tools/bench/nvmf_tcp_loopback.sh [ROUNDS] [SECONDS]      (after bazel build of both tools)
#   SPDK_DIR=/path/to/spdk tools/bench/nvmf_tcp_loopback.sh 3 5
#   PAIRS=native SPDK_DIR=... tools/bench/nvmf_tcp_loopback.sh 12 3   (only each project's own
#     host on its own target, the comparison issue 17 item 7 asks for, and a summary of the
#     per-round ratios at the end)
# PAIRS=native also probes the machine before each measurement: `machine` is what a plain
# loopback stream of C2H-shaped records moves (tools/bench:zerocopy_probe, 0.5 s, no Pollux
# code). This machine's loopback copies change speed 2-3x for minutes at a time, whatever
# runs, so the summary also gives the medians over the rounds whose two probes (pollux's
# measurement and SPDK's) agree within 25 %: both pairs saw the same machine.
set -euo pipefail
rounds=${1:-3} secs=${2:-5} pairs=${PAIRS:-all}
[ "$pairs" = all ] || [ "$pairs" = native ] || { echo "PAIRS: all or native"; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
tgt=$root/bazel-bin/fabric/tgt/pollux-tgt perf=$root/bazel-bin/driver/nvme/perf/pollux-perf
probe_bin=$root/bazel-bin/tools/bench/zerocopy_probe
for b in "$tgt" "$perf" "$probe_bin"; do [ -x "$b" ] || { echo "build first: $b"; exit 2; }; done
work=$(mktemp -d /tmp/nvmf-bench.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
nqn=nqn.2026-11.io.pollux:bench port=4520
cat >"$work/null.json" <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_null_create", "params": {"name": "Null0", "num_blocks": 2097152, "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "allow_any_host": true}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"bdev_name": "Null0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$port"}}}]}]}
JSON

start_pollux() {
  "$tgt" -m 0x1 --json "$work/null.json" --rpc "$work/rpc.sock" >"$work/tgt.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "ready" "$work/tgt.log" && return; sleep 0.1; done
  cat "$work/tgt.log"
  exit 1
}
start_spdk() {
  (cd "$SPDK_DIR" && LD_LIBRARY_PATH=build/lib:build/libvfio-user/build-release/lib \
    exec build/bin/nvmf_tgt -m 0x1 --no-huge -s 1024 -r "$work/spdk.sock") >"$work/spdk.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -S "$work/spdk.sock" ] && break; sleep 0.1; done
  local rpc="$SPDK_DIR/scripts/rpc.py -s $work/spdk.sock"
  $rpc nvmf_create_transport -t TCP >/dev/null
  $rpc bdev_null_create Null0 1024 512 >/dev/null
  $rpc nvmf_create_subsystem "$nqn" -a -s SPDK0001 >/dev/null
  $rpc nvmf_subsystem_add_ns "$nqn" Null0 >/dev/null
  $rpc nvmf_subsystem_add_listener "$nqn" -t tcp -a 127.0.0.1 -s $port >/dev/null
}
probe() {  # TARGET-NAME QD: the machine's loopback copy speed now, in K records per second
  local k
  k=$("$probe_bin" --seconds 0.5 | sed -n 's/.*: \([0-9]*\) K records\/s.*/\1/p')
  printf "%-10s machine %-3s %6s K records/s (loopback probe, before QD %s)\n" "$1" "$2" "$k" "$2"
}
stop() {
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}
measure() {  # TARGET-NAME QD
  local out
  out=$("$perf" -r "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:$port subnqn:$nqn" \
    -q "$2" -o 4096 -w randread -t "$secs" -c 0x2 2>&1) || { echo "$out"; exit 1; }
  echo "$out" | awk -v t="$1" -v q="$2" '
    /^Total/ { iops = $2; avg = $4 }
    /^latency percentiles/ { p50 = $5; p99 = $7 }
    END { printf "%-10s QD %-3s %9.0f IOPS  avg %7.2f us  p50 %7.2f us  p99 %8.2f us\n", t, q, iops, avg, p50, p99 }'
}
measure_spdk_host() {  # TARGET-NAME QD: spdk_nvme_perf as the host (average latency only)
  local out
  out=$(cd "$SPDK_DIR" && LD_LIBRARY_PATH=build/lib:build/libvfio-user/build-release/lib \
    build/bin/spdk_nvme_perf -r "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$nqn" \
    -q "$2" -o 4096 -w randread -t "$secs" -c 0x2 --no-huge -s 1024 2>&1) || { echo "$out"; exit 1; }
  echo "$out" | awk -v t="$1" -v q="$2" '
    /^Total/ { iops = $3; avg = $5 }
    END { printf "%-10s QD %-3s %9.0f IOPS  avg %7.2f us  (host: spdk_nvme_perf)\n", t, q, iops, avg }'
}
results=$(mktemp /tmp/nvmf-bench-results.XXXXXX)
echo "$(uname -n): $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  if [ "$pairs" = native ]; then
    # Each measurement on a target of its own, the probe just before it (with no target
    # spinning on core 0), pollux's and SPDK's alternating: QD 1, then QD 128.
    for qd in 1 128; do
      probe pollux-tgt "$qd" | tee -a "$results"
      start_pollux
      measure pollux-tgt "$qd" | tee -a "$results"
      stop
      if [ -n "${SPDK_DIR:-}" ]; then
        probe nvmf_tgt "$qd" | tee -a "$results"
        start_spdk
        measure_spdk_host nvmf_tgt "$qd" | tee -a "$results"
        stop
      fi
    done
    continue
  fi
  start_pollux
  measure pollux-tgt 1 | tee -a "$results"
  measure pollux-tgt 128 | tee -a "$results"
  if [ -n "${SPDK_DIR:-}" ]; then
    measure_spdk_host pollux-tgt 1
    measure_spdk_host pollux-tgt 128
  fi
  stop
  if [ -n "${SPDK_DIR:-}" ]; then
    start_spdk
    measure nvmf_tgt 1
    measure nvmf_tgt 128
    measure_spdk_host nvmf_tgt 1 | tee -a "$results"
    measure_spdk_host nvmf_tgt 128 | tee -a "$results"
    stop
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${SPDK_DIR:-}" ]; then
  # Each round's pollux-tgt + pollux-perf against nvmf_tgt + spdk_nvme_perf: QD 128 IOPS ratio,
  # QD 1 average latency difference; the medians over the rounds.
  awk '
    function alike(a, b) { return a > 0 && b > 0 && a / b < 1.25 && b / a < 1.25 }
    $2 == "machine" { k[$1 " " $3] = $4; next }
    /^pollux-tgt/ && $3 == 1   { pl = $7 }
    /^pollux-tgt/ && $3 == 128 { pi = $4 }
    /^nvmf_tgt/ && $3 == 1     { sl = $7 }
    /^nvmf_tgt/ && $3 == 128   { n++; r[n] = pi / $4; d[n] = pl - sl
      s128 = alike(k["pollux-tgt 128"], k["nvmf_tgt 128"]); s1 = alike(k["pollux-tgt 1"], k["nvmf_tgt 1"])
      if (s128) { m++; rs[m] = r[n] }
      if (s1) { m1++; ds[m1] = d[n] }
      printf "round %2d: QD 128 %.2fx SPDK (machine %s / %s K rec/s%s), QD 1 avg latency %+.2f us (machine %s / %s%s)\n",
        n, r[n], k["pollux-tgt 128"], k["nvmf_tgt 128"], s128 ? "" : ": changed",
        d[n], k["pollux-tgt 1"], k["nvmf_tgt 1"], s1 ? "" : ": changed" }
    function median(a, k,   i, j, t) {
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
    END {
      if (n) printf "median of %d rounds: QD 128 %.2fx SPDK, QD 1 avg latency %+.2f us\n", n, median(r, n), median(d, n)
      if (m) printf "where both pairs saw the same machine: QD 128 %.2fx SPDK (median of %d rounds)\n", median(rs, m), m
      if (m1) printf "where both pairs saw the same machine: QD 1 avg latency %+.2f us (median of %d rounds)\n", median(ds, m1), m1
    }
  ' "$results"
fi
rm -f "$results"
