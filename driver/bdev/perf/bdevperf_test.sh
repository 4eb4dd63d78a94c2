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
if "$perf" -q 4 >/dev/null 2>&1; then echo "no bdev should be refused"; exit 1; fi
if "$perf" --null bad -q 4 >/dev/null 2>&1; then echo "bad --null should be refused"; exit 1; fi
echo PASS
