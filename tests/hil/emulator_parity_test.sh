#!/usr/bin/env bash
# The driver test list the HIL tests run on QEMU's NVMe controller (workloads/), run here
# against Pollux's own emulator (pollux-emu over vfio-user, two namespaces with 512 B and
# 4 KiB blocks, like the guest's controller): a behaviour that differs between the two is
# either our emulator's bug or QEMU's (docs/HARDWARE.md lists what was found).
set -euo pipefail
emu=$1 check=$2 perf=$3 bdevperf=$4 perf_verify=$5 bdev_reset=$6
dir=$(mktemp -d /tmp/pollux-parity.XXXXXX)
emu_pid=
cleanup() { [ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
mkdir "$dir/bin"
ln -s "$(realpath "$check")" "$dir/bin/pollux-nvme-check"
ln -s "$(realpath "$perf")" "$dir/bin/pollux-perf"
ln -s "$(realpath "$bdevperf")" "$dir/bin/pollux-bdevperf"
export PATH=$dir/bin:$PATH TMPDIR=$dir
"$emu" --socket "$dir/emu.sock" -q &
emu_pid=$!
for _ in $(seq 100); do [ -S "$dir/emu.sock" ] && break; sleep 0.05; done
HIL_TRID="trtype:vfio-user traddr:$dir/emu.sock" sh "$perf_verify"
HIL_TRTYPE=vfio-user HIL_TRADDR=$dir/emu.sock sh "$bdev_reset"
echo PASS
