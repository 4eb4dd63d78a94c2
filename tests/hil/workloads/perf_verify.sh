#!/bin/sh
# The driver test list's I/O part, for any device: identify (pollux-perf prints it on
# attach), then verified random I/O with one PRP entry (4 KiB), a PRP list (64 KiB) and
# 128 KiB transfers on every namespace. HIL_TRID: the transport ID (trtype:pcie ... in the
# QEMU guest, trtype:vfio-user ... against Pollux's emulator).
set -e
[ -n "${HIL_TRID:-}" ] || { echo "hil: HIL_TRID is not set"; exit 1; }
for size in 4096 65536 131072; do
  echo "hil: pollux-perf --verify, $size-byte I/O"
  pollux-perf -r "$HIL_TRID" -q 8 -o "$size" -w randrw -M 50 --verify -t 1 -c 0x1
done
