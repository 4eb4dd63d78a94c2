#!/bin/sh
# Every qemu scenario parses and validates (pollux-scenario check), and running one where
# there is no QEMU device is a set-up error (exit status 2) that says so.
set -eu
runner=$1
shift
[ $# -ge 2 ] || { echo "expected the qemu scenarios"; exit 1; }
"$runner" check "$@"
rc=0
out=$("$runner" run "$1" --report '' --quiet 2>&1) || rc=$?
echo "$out"
[ $rc -eq 2 ] || { echo "expected exit status 2, got $rc"; exit 1; }
echo "$out" | grep -q "NVMe function" || { echo "expected the missing device named"; exit 1; }
echo PASS
