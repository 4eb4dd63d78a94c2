#!/bin/sh
# Every qemu scenario parses and validates (pollux-scenario check), and running one where its
# device is not on vfio-pci is a set-up error (exit status 2) that names the device. The run
# uses a PCI address no machine has (00ff:ff:1f.7), never "auto": on a machine with a drive
# bound to vfio-pci, auto would pick it and write to it.
set -eu
runner=$1
shift
[ $# -ge 2 ] || { echo "expected the qemu scenarios"; exit 1; }
"$runner" check "$@"
scenario=${TEST_TMPDIR:-/tmp}/nowhere.yaml
sed 's/traddr: auto/traddr: "00ff:ff:1f.7"/' "$1" >"$scenario"
grep -q 00ff:ff:1f.7 "$scenario" || { echo "the scenario has no traddr: auto to replace"; exit 1; }
rc=0
out=$("$runner" run "$scenario" --report '' --quiet 2>&1) || rc=$?
echo "$out"
[ $rc -eq 2 ] || { echo "expected exit status 2, got $rc"; exit 1; }
echo "$out" | grep -q "device nvme0: 00ff:ff:1f.7 is not bound to vfio-pci" ||
  { echo "expected the device and its address named"; exit 1; }
echo PASS
