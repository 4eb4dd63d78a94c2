#!/usr/bin/env bash
# pollux-scenario on bad input: `check` refuses exactly what `run` refuses, both with exit 2
# and the same message; options that mean nothing alone are refused; a hung device gives a
# short report (it repeated one line per sweep read, ~250 times).
set -euo pipefail
runner=$1
dir=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

scenario() {  # $1 = file, $2 = device, $3 = workload, $4 = faults
  printf 'name: t\ntopology:\n  devices: [%s]\nworkloads:\n  - %s\nfaults: %s\n' "$2" "$3" "$4" >"$1"
}
refused() {  # $1 = file, $2 = what both check and run must say
  local rc=0
  "$runner" check "$1" >"$dir/check.out" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "check $1: exit $rc: $(cat "$dir/check.out")"
  grep -qF -- "$2" "$dir/check.out" || fail "check $1: '$2' not in: $(cat "$dir/check.out")"
  rc=0
  timeout 120 "$runner" run "$1" --report '' --quiet >"$dir/run.out" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "run $1: exit $rc: $(cat "$dir/run.out")"
  grep -qF -- "$2" "$dir/run.out" || fail "run $1: '$2' not in: $(cat "$dir/run.out")"
}
w='{name: w, bdev: nvme0n1, duration: 2ms, range: 1MiB}'
scenario "$dir/label.yaml" '{name: nvme0}' "$w" $'[{at: 1ms, action: clear, label: "lab\xbd"}]'
refused "$dir/label.yaml" "line 6: byte 0xBD is not UTF-8"
scenario "$dir/name.yaml" $'{name: "nv\xbd"}' $'{bdev: "nv\xbdn1"}' '[]'
refused "$dir/name.yaml" "line 3: byte 0xBD is not UTF-8"
scenario "$dir/profile.yaml" '{name: nvme0, profile: p9999}' "$w" '[]'
refused "$dir/profile.yaml" "profile 'p9999'"
scenario "$dir/range.yaml" '{name: nvme0}' '{bdev: nvme0n1, range: 1000000TiB}' '[]'
refused "$dir/range.yaml" "workloads[0].range: 1024000000.0 GiB"
scenario "$dir/insert.yaml" '{name: nvme0}' "$w" '[{at: 1ms, action: hot_insert}]'
refused "$dir/insert.yaml" "hot_insert of nvme0, which is present"
scenario "$dir/lba.yaml" '{name: nvme0}' "$w" \
  '[{at: 1ms, action: never_complete, lba: [0, 1000000000000]}]'
refused "$dir/lba.yaml" "faults[0].lba: 1000000000000 is beyond the device"
scenario "$dir/held.yaml" '{name: nvme0}' "$w" '[{at: 1ms, action: never_complete, count: 1}]'
refused "$dir/held.yaml" "only an I/O timeout ends the commands this fault loses"

# --linger means something only with --metrics.
scenario "$dir/ok.yaml" '{name: nvme0}' "$w" '[]'
rc=0
"$runner" run "$dir/ok.yaml" --linger 5s >/dev/null 2>"$dir/err" || rc=$?
[ $rc -eq 2 ] && grep -q -- "--linger requires --metrics" "$dir/err" || fail "--linger alone: $rc"

# A device that holds every command from 1 ms on, with timeouts only reported (action none):
# the run fails (exit 1) and the sweep says once that it gave up, not once per read.
printf 'name: hang\nhost: {io_timeout_us: 1000, timeout_action: none}\ntopology:\n  devices: [{name: nvme0}]\n%s\n' \
  "workloads: [{bdev: nvme0n1, queue_depth: 4, duration: 2ms, range: 4MiB}]" >"$dir/hang.yaml"
echo "faults: [{at: 1ms, action: never_complete}]" >>"$dir/hang.yaml"
rc=0
timeout 300 "$runner" run "$dir/hang.yaml" --report '' --quiet >"$dir/hang.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "hang: exit $rc: $(cat "$dir/hang.out")"
grep -q "FAILED: sweep of nvme0n1: a read of LBA .* did not complete within 1s" "$dir/hang.out" ||
  fail "no sweep line: $(cat "$dir/hang.out")"
failed=$(grep -c "^FAILED" "$dir/hang.out")
[ "$failed" -le 3 ] || fail "$failed FAILED lines: $(cat "$dir/hang.out")"
# Under `bazel run` (BUILD_WORKSPACE_DIRECTORY set) the replay command names `bazel run` and
# the scenario from the workspace root, never this machine's Bazel cache.
mkdir -p "$dir/ws/sc"
printf 'name: r\ntopology:\n  devices: [{name: nvme0}]\n%s\n%s\n' \
  "workloads: [{bdev: nvme0n1, duration: 1ms, range: 1MiB}]" "expect: {min_ios: 1000000000}" \
  >"$dir/ws/sc/r.yaml"
rc=0
BUILD_WORKSPACE_DIRECTORY="$dir/ws" timeout 120 "$runner" run "$dir/ws/sc/r.yaml" --report '' \
  --quiet >"$dir/replay.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "replay: exit $rc: $(cat "$dir/replay.out")"
grep -qF 'replay: bazel run //scenarios/runner:pollux-scenario -- run $PWD/sc/r.yaml --seed 1' \
  "$dir/replay.out" || fail "replay line: $(cat "$dir/replay.out")"
echo PASS
