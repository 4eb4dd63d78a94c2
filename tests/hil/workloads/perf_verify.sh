#!/bin/sh
# The driver test list, for any device: commands whose outcome the spec fixes, errors
# included (pollux-nvme-check), then identify (pollux-perf prints it on attach) and verified
# random I/O with one PRP entry (4 KiB), a PRP list (64 KiB) and 128 KiB transfers on every
# namespace, with PRPs and with SGLs, then on two cores (a queue pair each, interleaved
# stripes of every namespace). HIL_TRID: the transport ID (trtype:pcie ... in the QEMU
# guest, trtype:vfio-user ... against Pollux's emulator); HIL_KNOWN: --known CASE=why
# arguments for the implementation's documented deviations (docs/HARDWARE.md).
set -e
[ -n "${HIL_TRID:-}" ] || { echo "hil: HIL_TRID is not set"; exit 1; }
echo "hil: pollux-nvme-check"
log=${TMPDIR:-/tmp}/nvme-check.log
rc=0
# shellcheck disable=SC2086 # HIL_KNOWN is a list of arguments
pollux-nvme-check -r "$HIL_TRID" ${HIL_KNOWN:-} >"$log" 2>&1 || rc=$?
sed 's/^/hil:   /' "$log"
[ $rc -eq 0 ] || { echo "hil: pollux-nvme-check failed (exit status $rc)"; exit 1; }
for size in 4096 65536 131072; do
  for dptr in prp sgl; do
    echo "hil: pollux-perf --verify, $size-byte I/O, $dptr"
    flag=; [ $dptr = sgl ] && flag=--sgl
    pollux-perf -r "$HIL_TRID" -q 8 -o "$size" -w randrw -M 50 --verify -t 1 -c 0x1 $flag
  done
done
echo "hil: pollux-perf --verify, 4096-byte I/O, two queue pairs (cores 0 and 1)"
pollux-perf -r "$HIL_TRID" -q 8 -o 4096 -w randrw -M 50 --verify -t 1 -c 0x3
