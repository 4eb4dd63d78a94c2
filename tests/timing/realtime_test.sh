#!/usr/bin/env bash
# Realtime mode: pollux-emu runs the p3700 model paced to the wall clock in its own process;
# the unchanged pollux-perf drives it over vfio-user. A completion can never arrive before its
# simulated time, so QD1 4 KiB random reads take at least the model's fastest, about 68 us
# (the fastest die's tR without jitter; a lower bound only: this shared machine may add delay,
# never remove it). Data still verifies.
set -euo pipefail
emu=$1
perf=$2
dir=$(mktemp -d /tmp/pollux-test.XXXXXX)
sock=$dir/emu.sock
"$emu" --socket "$sock" --profile p3700 --quiet &
emu_pid=$!
trap 'kill $emu_pid 2>/dev/null; wait $emu_pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done  # start-up, not a race fix
[ -S "$sock" ] || { echo "pollux-emu did not create $sock"; exit 1; }

"$perf" -r "trtype:vfio-user traddr:$sock" -q 1 -o 4096 -w randread --io-count 2000 -t 20 \
  --json "$dir/qd1.json" | tail -2
python3 - "$dir/qd1.json" <<'PY'
import json, sys
lat = json.load(open(sys.argv[1]))["devices"][0]["latency_us"]
assert lat["min"] >= 60.0, f"a QD1 read completed in {lat['min']} us: faster than the model allows"
print(f"QD1 latency min {lat['min']:.1f} us, p50 {lat['p50']:.1f} us: paced, never early")
PY
out=$("$perf" -r "trtype:vfio-user traddr:$sock" -q 16 -o 4096 -w randwrite --verify --io-count 3000 -t 20 --seed 7 2>&1) \
  || { echo "$out"; exit 1; }
echo "$out" | grep -E "verify: [1-9][0-9]* reads checked, 0 failures" || { echo "$out"; exit 1; }
echo PASS
