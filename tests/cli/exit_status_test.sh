#!/usr/bin/env bash
# Bad command lines: exit status 2 and one line on stderr naming the program, for every
# program (CLI11's own codes were 104-114), before anything starts.
set -euo pipefail
[ $# -eq 8 ] || { echo "expected the eight programs"; exit 1; }
bdevperf=$1 demo=$2 check=$3 perf=$4 emu=$5 scenario=$6 sim=$7 top=$8
err=${TEST_TMPDIR:-$(mktemp -d)}/err
fail() { echo "FAIL: $*"; exit 1; }

refused() {  # $1 = what the message must contain, then the command
  local want=$1
  shift
  local rc=0
  timeout 20 "$@" >/dev/null 2>"$err" || rc=$?
  [ $rc -eq 2 ] || fail "$* exited $rc, expected 2: $(cat "$err")"
  [ "$(wc -l <"$err")" -eq 1 ] || fail "$*: expected one line on stderr, got: $(cat "$err")"
  grep -q "^$(basename "$1"): " "$err" || fail "$*: the program is not named: $(cat "$err")"
  grep -q -- "$want" "$err" || fail "$*: '$want' not in: $(cat "$err")"
}

for p in "$bdevperf" "$demo" "$check" "$perf" "$emu" "$scenario" "$sim" "$top"; do
  refused ": " "$p" --no-such-option  # (or a required option missing, whichever CLI11 sees first)
done
# Conversion and validation errors (CLI11: 104, 105).
refused "--queue-depth" "$bdevperf" -q abc
refused "--queue-depth" "$bdevperf" -q 0
refused "--socket" "$emu"   # a required option missing (CLI11: 106)
refused "subcommand" "$scenario"
# Unsigned options: CLI11 wrapped these to 2^64-1.
refused "--seed" "$bdevperf" --seed -1
refused "--seed" "$perf" -r 'trtype:vfio-user traddr:/nonexistent' --seed 18446744073709551616
refused "--seed" "$emu" -s /nonexistent/s.sock --seed -1
refused "--seed" "$scenario" run x.yaml --seed -1
refused "--seed" "$sim" --seed 99999999999999999999999
# Floating-point options: nan and infinities passed CLI11's PositiveNumber.
refused "--time" "$bdevperf" --null N:1024 -t nan
refused "--time" "$perf" -r 'trtype:vfio-user traddr:/nonexistent' -t inf
refused "--time" "$demo" -t nan
refused "--time: expected a number > 0, got 0" "$perf" -r 'trtype:vfio-user traddr:/nonexistent' -t 0
# Output files that cannot be written are found before the run, not silently after it.
refused "--json /nonexistent/dir/out.json" \
  "$perf" -r 'trtype:vfio-user traddr:/nonexistent' --json /nonexistent/dir/out.json
refused "--summary /nonexistent/dir/s.json" "$bdevperf" --null N:1024 --summary /nonexistent/dir/s.json
# Help is not an error.
"$bdevperf" --help >/dev/null || fail "--help exited $?"
echo PASS
