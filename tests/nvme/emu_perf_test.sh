#!/usr/bin/env bash
# pollux-perf --verify against a real pollux-emu process over a UNIX socket: several I/O
# sizes (one block, PRP list, MDTS), queue depths, both namespaces, two cores' worth of
# queue pairs. Fails on any I/O error or verify mismatch.
set -euo pipefail
emu=$1
perf=$2
# UNIX socket paths must fit in 108 bytes: Bazel's TEST_TMPDIR is too deep.
dir=$(mktemp -d /tmp/pollux-test.XXXXXX)
sock=$dir/emu.sock
"$emu" --socket "$sock" --quiet &
emu_pid=$!
trap 'kill $emu_pid 2>/dev/null; wait $emu_pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done  # start-up, not a race fix
[ -S "$sock" ] || { echo "pollux-emu did not create $sock"; exit 1; }

run() {
  echo "== pollux-perf $*"
  out=$("$perf" -r "trtype:vfio-user traddr:$sock" "$@" --seed 42 2>&1) || { echo "$out"; exit 1; }
  echo "$out" | tail -4
  echo "$out" | grep -qE "verify: [1-9][0-9]* reads checked, 0 failures" || { echo "no clean verify line"; exit 1; }
}
run -q 8 -o 4096 -w randwrite --verify --io-count 4000 -t 10
run -q 4 -o 512 -w randwrite --verify --io-count 2000 -t 10 -n 1
run -q 16 -o 65536 -w write --verify --io-count 2000 -t 10
run -q 2 -o 131072 -w randwrite --verify --io-count 500 -t 10
run -q 32 -o 16384 -w randwrite --verify --io-count 4000 -t 10 -c 0x3
# Beyond MDTS (128 KiB here) the driver splits, as SPDK's does: verified, and counted.
out=$("$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 1048576 -w randwrite --verify --io-count 40 \
  -t 20 -n 1 --seed 42 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E "^driver: [1-9][0-9]* I/Os beyond MDTS split into [1-9][0-9]* commands" ||
  { echo "$out"; echo "no split reported"; exit 1; }
echo "$out" | grep -qE "verify: [1-9][0-9]* reads checked, 0 failures" || { echo "$out"; exit 1; }
# -LL: spdk_nvme_perf's latency summary and histogram; the histogram's last bucket is 100%.
"$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 4096 -w randread --io-count 500 -t 10 -n 1 -LL \
  >"$dir/lat.log" 2>&1 || { cat "$dir/lat.log"; exit 1; }
grep -q "^Summary latency data (us)" "$dir/lat.log" && grep -q "^Latency histogram (us)" "$dir/lat.log" &&
  tail -1 "$dir/lat.log" | grep -q " 100.0000%" || { echo "-LL output"; cat "$dir/lat.log"; exit 1; }
# Runs that could do nothing are refused with one line and status 2, before any I/O: a size no
# namespace's blocks divide, a namespace that is not there.
refused() {  # $1: what the message must say; the rest: pollux-perf's arguments
  local want=$1 rc=0
  shift
  "$perf" -r "trtype:vfio-user traddr:$sock" "$@" >"$dir/out.log" 2>"$dir/err.log" || rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$dir/err.log" ||
    { echo "pollux-perf $*: exit $rc, expected 2 and '$want'"; cat "$dir/out.log" "$dir/err.log"; exit 1; }
}
refused "-o 1000: not a multiple of the block size of NSID 1 (512-byte blocks), NSID 2" -o 1000 -t 5
refused "-n 5: no such namespace (there are: 1, 2)" -n 5 -t 5
# --json -: stdout is the JSON alone (the table goes to stderr); a mixed workload is split.
"$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 4096 -w randrw -M 70 --io-count 400 -t 10 \
  --json - >"$dir/summary.json" 2>"$dir/table.log"
python3 - "$dir/summary.json" <<'PY' || { cat "$dir/summary.json"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
for dev in d["devices"]:
    assert dev["reads"] > 0 and dev["writes"] > 0, dev
    assert dev["reads"] + dev["writes"] == dev["ios"], dev
PY
grep -q "^  reads [0-9]* IOPS (avg .*), writes [0-9]* IOPS" "$dir/table.log" ||
  { echo "no read/write split in the table"; cat "$dir/table.log"; exit 1; }
# -S: a line per core per interval while it runs, and the series in the JSON summary (2 s at
# 0.5 s: 3 whole intervals at least; the last may fall on the deadline).
"$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 4096 -w randread -t 2 -S 0.5 \
  --json "$dir/series.json" >"$dir/series.log" 2>&1 || { cat "$dir/series.log"; exit 1; }
[ "$(grep -cE '^\[ *[0-9.]+ s\] core +0: +[1-9][0-9]* IOPS .* p99 ' "$dir/series.log")" -ge 3 ] ||
  { echo "-S lines"; cat "$dir/series.log"; exit 1; }
python3 - "$dir/series.json" <<'PY' || { cat "$dir/series.json"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
s = d["intervals"][0]["series"]
assert d["interval_s"] == 0.5 and len(s) >= 3, d.get("intervals")
assert all(x["iops"] > 0 and x["latency_us"]["max"] >= x["latency_us"]["p99"] > 0 for x in s), s
assert [round(x["end_s"] * 2) for x in s] == list(range(1, len(s) + 1)), s  # every 0.5 s
PY
# One client at a time: the same controller twice is refused up front; reached through a
# second spelling of its path, the second connection times out with the reason (it hung).
rc=0
"$perf" -r "trtype:vfio-user traddr:$sock" -r "trtype:vfio-user traddr:$sock" -t 1 \
  >"$dir/twice.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "the same controller as an earlier -r" "$dir/twice.log" ||
  { echo "-r X -r X: exit $rc"; cat "$dir/twice.log"; exit 1; }
rc=0
timeout 60 "$perf" -r "trtype:vfio-user traddr:$sock" -r "trtype:vfio-user traddr:$dir/./emu.sock" \
  -t 1 >"$dir/busy.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "is another one attached?" "$dir/busy.log" ||
  { echo "a busy server: exit $rc"; cat "$dir/busy.log"; exit 1; }
# A second pollux-emu on a socket a running one serves is refused (it used to take the path over
# and delete it on exit, leaving the first unreachable); the first keeps serving.
rc=0
"$emu" --socket "$sock" --quiet >"$dir/second.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "a running server answers there" "$dir/second.log" ||
  { echo "second server: exit $rc"; cat "$dir/second.log"; exit 1; }
[ -S "$sock" ] || { echo "the first server's socket is gone"; exit 1; }
run -q 4 -o 4096 -w randwrite --verify --io-count 200 -t 10
# A stale socket (its server killed) is replaced; a --metrics port in use is named as such.
python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" "$dir/stale.sock"
python3 - "$dir/port" <<'PY' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1])); time.sleep(30)
PY
holder=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.05; done
rc=0
timeout 20 "$emu" --socket "$dir/stale.sock" --quiet --metrics "127.0.0.1:$(cat "$dir/port")" \
  >"$dir/metrics.log" 2>&1 || rc=$?
kill $holder 2>/dev/null || true
[ $rc -eq 2 ] && grep -q "cannot listen: Address already in use" "$dir/metrics.log" ||
  { echo "--metrics on a port in use: exit $rc"; cat "$dir/metrics.log"; exit 1; }
echo "PASS"
