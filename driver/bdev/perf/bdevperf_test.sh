#!/usr/bin/env bash
# pollux-bdevperf end to end: verify (write, read back, check headers) and reset-under-verify
# on malloc bdevs across two cores, a null-bdev run, and clear refusals of bad input.
set -euo pipefail
perf=$1
dir=${TEST_TMPDIR:-$(mktemp -d)}
check() {  # $1 = summary file, $2 = jq-free check: minimum resets
  python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["total"]
assert t["errors"] == 0, t
assert t["verify_failures"] == 0, t
assert t["iops"] > 0, t
for j in s["jobs"]:  # the bdev layer's latencies of the job's channel
    lat = j["latency_us"]
    assert j["ios"] > 0 and 0 < lat["min"] <= lat["avg"] <= lat["max"], j
resets = sum(j["resets"] for j in s["jobs"])
assert resets >= int(sys.argv[2]), f"only {resets} resets"
print(f"ok: {t['iops']:.0f} IOPS, {resets} resets")
PY
}
"$perf" --malloc M0:65536 --malloc M1:32768:4096 -q 16 -o 8192 -w verify -t 1 -m 0x3 --summary "$dir/verify.json" >/dev/null
check "$dir/verify.json" 0
"$perf" --malloc M0:65536 -q 16 -o 4096 -w reset --reset-period 0.1 -t 1 -m 0x3 --summary "$dir/reset.json" >/dev/null
check "$dir/reset.json" 4
"$perf" --null N0:1048576 -q 64 -o 4096 -w randrw -M 70 -t 0.5 --summary "$dir/null.json" >/dev/null
check "$dir/null.json" 0
refused() {  # $1 = what stderr must say, then the arguments: exit status 2, nothing run
  local want=$1 rc=0
  shift
  timeout 20 "$perf" "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  [ $rc -eq 2 ] || { echo "$*: exit $rc, expected 2"; cat "$dir/err"; exit 1; }
  grep -q -- "$want" "$dir/err" || { echo "$*: '$want' not in:"; cat "$dir/err"; exit 1; }
  if grep -q "running" "$dir/out"; then echo "$*: jobs ran"; exit 1; fi
}
refused "no bdev to test" -q 4
refused "bad --null" --null bad -q 4
# I/O that does not fit the bdev (an I/O larger than it divided by zero: SIGFPE).
refused "-o 4096: larger than bdev X (4 blocks of 512 bytes)" --null X:4:512 -o 4096 -t 0.2
refused "-o 512: not a multiple of bdev X's block size (4096 bytes)" --null X:64:4096 -o 512 -t 0.2
refused "bdev X holds 16 I/Os of 512 bytes, fewer than the 32 tasks" \
  --null X:16:512 -o 512 -q 32 -w verify -t 0.2
refused "--reset-period" --null X:1024 -w reset --reset-period -1 -t 0.2
# A bdev that stores no data cannot be verified (it "verified" 241 K I/Os with 0 failures).
refused "-w verify: bdev X (Null disk) stores no data" --null X:1024 -w verify -t 0.2
refused "-w reset: bdev X (Null disk) stores no data" --null X:1024 -w reset -t 0.2
refused "--time" --null X:1024 -t 1e300
# A virtual bdev on a base that does not exist: named (it said "no bdev to test").
cat >"$dir/missing.json" <<'JSON'
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_passthru_create", "params": {"name": "PT0", "base_bdev_name": "Nope"}},
  {"method": "bdev_split_create", "params": {"base_bdev": "Gone", "split_count": 2}}]}]}
JSON
refused "passthru PT0: base bdev 'Nope' does not exist (and 1 more)" --json "$dir/missing.json"
refused "passthru PT0: base bdev 'Nope' does not exist" --json "$dir/missing.json" --null N:1024
# A summary that cannot be written: refused before the run, or the run fails (a full disk).
refused "--summary /nonexistent/x.json: No such file or directory" --null X:1024 -t 0.1 \
  --summary /nonexistent/x.json
rc=0
"$perf" --null X:1024 -t 0.1 --summary /dev/full >/dev/null 2>"$dir/err" || rc=$?
[ $rc -eq 1 ] && grep -q "write failed" "$dir/err" || { echo "/dev/full: exit $rc"; exit 1; }
# A malloc bdev larger than the machine (it grew without bound).
refused "malloc bdev Big: 4000000000 blocks of 4096 bytes: cannot map" --malloc Big:4000000000:4096
# -S: a line per job per interval, and the series in the summary (1 s at 0.25 s).
"$perf" --null N0:1048576 -q 16 -o 4096 -w randread -t 1 -S 0.25 --summary "$dir/series.json" \
  >"$dir/series.log"
[ "$(grep -cE '^\[ *[0-9.]+ s\] N0 \(core 0\): +[1-9][0-9]* IOPS .* p99 ' "$dir/series.log")" -ge 3 ] ||
  { echo "-S lines"; cat "$dir/series.log"; exit 1; }
python3 - "$dir/series.json" <<'PY' || { cat "$dir/series.json"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))["jobs"][0]["intervals"]
assert len(s) >= 3 and all(x["iops"] > 0 and x["latency_us"]["max"] >= x["latency_us"]["p99"] > 0 for x in s), s
PY
echo PASS
