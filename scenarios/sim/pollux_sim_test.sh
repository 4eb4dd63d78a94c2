#!/usr/bin/env bash
# pollux-sim's command line: a short run works; a run time that is not a positive finite
# number (it ran forever), and options that mean nothing alone, are refused with exit 2.
# Every run is bounded by `timeout`, so a regression fails instead of hanging the test.
set -euo pipefail
sim=$1
err=${TEST_TMPDIR:-$(mktemp -d)}/err
fail() { echo "FAIL: $*"; exit 1; }

timeout 60 "$sim" --time-ms 0.2 --warmup-ms 0 --json >"$err.out" || fail "a short run failed"
grep -q '"total_iops"' "$err.out" || fail "no result: $(cat "$err.out")"

refused() {  # $1 = what stderr must say, then the arguments
  local want=$1 rc=0
  shift
  timeout 20 "$sim" "$@" >/dev/null 2>"$err" || rc=$?
  [ $rc -eq 2 ] || fail "pollux-sim $*: exit $rc, expected 2: $(cat "$err")"
  grep -q -- "$want" "$err" || fail "pollux-sim $*: '$want' not in: $(cat "$err")"
}
for t in -5 0 nan inf -inf 1e300; do refused "--time-ms" -t "$t"; done
refused "--warmup-ms" --warmup-ms -1
refused "--scale-pages requires --scale-blocks" --scale-pages 64
refused "--scale-blocks" --scale-blocks 0
refused "--linger requires --metrics" --linger 5
refused "--mix applies to --rw randrw only" --rw randread --mix 30
# randrw without --mix is fio's 50/50 (it ran 100% reads): NAND programs happen.
timeout 60 "$sim" -p gen4-tlc --rw randrw -q 8 --time-ms 0.5 --json >"$err.out" || fail "randrw run"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["per_device"][0]; sys.exit(0 if d["write_amplification"] > 0 else 1)' \
  "$err.out" || fail "randrw without --mix wrote nothing: $(cat "$err.out")"
# The null profile is zero-latency at QD 1: only the host's modelled cost (it took the whole
# 20 us idle-jump cap: a completion posted during the step was jumped past).
timeout 60 "$sim" -p null -q 1 --time-ms 0.5 --json >"$err.out" || fail "null QD1 run"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["per_device"][0]; sys.exit(0 if d["mean_us"] < 1 else 1)' \
  "$err.out" || fail "null profile QD1 is not near zero latency: $(cat "$err.out")"
# (Read whole first: grep -q stops at its match, and a help longer than one pipe write would
# then die of SIGPIPE under pipefail.)
help=$("$sim" --help)
grep -q -- "-p,--profile TEXT=p4800x .*gen4-tlc.*p3700" <<<"$help" || fail "--help names no profiles or defaults"
refused "--interval-ms" -S 0
# -S: the write cliff of a full TLC drive in time: fast while the cache absorbs writes, then
# GC stalls them (a whole-run average hides both). With the TLC program time of the profile
# (2.8 ms a page group) GC can stall every write for tens of milliseconds: some windows after
# the cliff see no completion at all, so the slow writes are looked for over the whole run.
timeout 120 "$sim" -p gen4-tlc --scale-blocks 64 --scale-pages 16 --precondition steady -w randwrite \
  -q 16 -t 60 -S 2 --json >"$err.out" || fail "-S run"
python3 - "$err.out" <<'PY' || fail "-S series: $(cat "$err.out")"
import json, sys
s = json.load(open(sys.argv[1]))["per_device"][0]["intervals"]
assert len(s) >= 9 and [round(x["end_ms"]) for x in s] == [2 * (i + 1) for i in range(len(s))], s
later = s[len(s) // 2:]
assert s[0]["iops"] > 10 * min(x["iops"] for x in later), s
assert max(x["max_us"] for x in s) > 10 * s[0]["mean_us"], s
PY
# The emulator's memory store: zero writes keep nothing; --write-pattern writes are kept as
# their seeds (no bytes); the FTL's forward map holds the LPNs written.
timeout 60 "$sim" -p gen4-tlc -w randwrite -q 16 --time-ms 1 --json >"$err.out" || fail "zero writes"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["per_device"][0]; sys.exit(0 if d["store_pattern_blocks"] == 0 and d["store_byte_blocks"] == 0 and d["store_memory_bytes"] == 0 and d["ftl_map_bytes"] > 0 else 1)' \
  "$err.out" || fail "zero writes were kept: $(cat "$err.out")"
timeout 60 "$sim" -p gen4-tlc -w randwrite -q 16 --time-ms 1 --write-pattern --json >"$err.out" || fail "pattern writes"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["per_device"][0]; sys.exit(0 if d["store_pattern_blocks"] > 500 and d["store_byte_blocks"] == 0 and d["store_memory_bytes"] < 100 * d["store_pattern_blocks"] else 1)' \
  "$err.out" || fail "pattern writes not kept as seeds: $(cat "$err.out")"
# Over NVMe-oF/RDMA (--transport rdma): the same device behind a Pollux target on an emulated
# NIC, the host on another: QD 1 costs the device's latency plus the wire's round trip
# (two 5 us crossings at least), the I/O completes, and the same seed replays the same run.
timeout 120 "$sim" -p p4800x -q 1 --time-ms 1 --warmup-ms 0.2 --json >"$err.local" || fail "local QD1 run"
timeout 120 "$sim" -p p4800x -q 1 --time-ms 1 --warmup-ms 0.2 --transport rdma --wire-latency-ns 5000 \
  --json >"$err.rdma" || fail "rdma QD1 run"
timeout 120 "$sim" -p p4800x -q 1 --time-ms 1 --warmup-ms 0.2 --transport rdma --wire-latency-ns 5000 \
  --json >"$err.rdma2" || fail "rdma QD1 run again"
python3 - "$err.local" "$err.rdma" "$err.rdma2" <<'PY' || fail "rdma: $(cat "$err.rdma")"
import json, sys
local, rdma, again = (json.load(open(f)) for f in sys.argv[1:])
l, r = local["per_device"][0], rdma["per_device"][0]
assert r["iops"] > 0 and r["errors"] == 0, r
assert r["mean_us"] >= l["mean_us"] + 10, (l["mean_us"], r["mean_us"])
assert rdma["trace_hash"] == again["trace_hash"], (rdma["trace_hash"], again["trace_hash"])
assert rdma["trace_hash"] != local["trace_hash"]
PY
refused "--transport" --transport roce
refused "--wire-latency-ns" --transport rdma --wire-latency-ns 0
echo PASS
