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
# Beyond MDTS (128 KiB here) the driver refuses before the device sees anything.
if "$perf" -r "trtype:vfio-user traddr:$sock" -q 1 -o 262144 -w read --io-count 1 -t 5 >"$dir/big.log" 2>&1; then
  echo "an I/O beyond MDTS should have failed"; cat "$dir/big.log"; exit 1
fi
grep -q "Argument list too long\|E2BIG\|submit" "$dir/big.log" || { cat "$dir/big.log"; exit 1; }
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
echo "PASS"
