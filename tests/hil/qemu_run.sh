#!/usr/bin/env bash
# Boots the HIL guest (tools/guest) in QEMU with TCG: q35, an emulated Intel IOMMU (so the
# guest has real VFIO groups), QEMU's NVMe controller with two namespaces on a PCIe root
# port (hot-pluggable), a QMP socket. Runs GUEST_SCRIPT in the guest with BINARY... packed in
# (by tools/guest/pack.sh, PACK) and passes when the guest reports exit status 0.
#   qemu_run.sh [--hotplug=MODE:QMP_SCRIPT] PACK GUEST_SCRIPT BINARY...
# The guest: tools/setup.sh builds it (tools/guest/build.sh) under POLLUX_GUEST_CACHE or
# /var/cache/pollux-guest, keyed by build.sh, init and modules.txt; PACK's folder holds those
# three, and the guest used is the one built from them (build.sh --path), never another.
# --hotplug: one namespace on a -blockdev (it survives the controller's unplug), and
# QMP_SCRIPT (qmp_hotplug.py) pulls and re-plugs the controller when the guest asks: MODE
# console (markers on the console) or agent (requests on the guest's second serial port,
# /dev/ttyS1).
set -euo pipefail
qmp_script= qmp_mode=
case $1 in --hotplug=*) qmp_mode=${1#--hotplug=}; qmp_script=${qmp_mode#*:}; qmp_mode=${qmp_mode%%:*}; shift ;; esac
pack=$1 script=$2
shift 2
cache=$("$(dirname "$pack")/build.sh" --path) || { echo "FAIL"; exit 1; }  # it said why
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing: run tools/setup.sh"; exit 1; }
tmp=${TEST_TMPDIR:-$(mktemp -d)}
sock_dir=$(mktemp -d /tmp/pollux-hil.XXXXXX)  # UNIX socket paths must stay short
trap 'rm -rf "$sock_dir"' EXIT
"$pack" "$cache" "$tmp/initrd.cpio" "$script" "$@"
truncate -s 64M "$tmp/ns1.img"
truncate -s 32M "$tmp/ns2.img"
log=$tmp/console.log
nvme=(-device nvme,id=nvme0,serial=POLLUXHIL0001,bus=rp1
      -drive file="$tmp/ns1.img",if=none,id=ns1,format=raw
      -device nvme-ns,drive=ns1,bus=nvme0,nsid=1
      -drive file="$tmp/ns2.img",if=none,id=ns2,format=raw
      -device nvme-ns,drive=ns2,bus=nvme0,nsid=2,logical_block_size=4096,physical_block_size=4096)
# HIL_SECOND_NVME=1: a second controller (one 32 MiB namespace) on a second root port.
if [ "${HIL_SECOND_NVME:-0}" = 1 ]; then
  [ -z "$qmp_script" ] || { echo "qemu_run.sh: HIL_SECOND_NVME and --hotplug do not go together"; exit 1; }
  truncate -s 32M "$tmp/ns3.img"
  nvme+=(-device pcie-root-port,id=rp2,chassis=2,slot=2
         -device nvme,id=nvme1,serial=POLLUXHIL0002,bus=rp2
         -drive file="$tmp/ns3.img",if=none,id=ns3,format=raw
         -device nvme-ns,drive=ns3,bus=nvme1,nsid=1)
fi
qmp_pid=
agent_serial=()
boot() {
  : >"$log"
  if [ -n "$qmp_script" ]; then
    device='{"driver": "nvme", "id": "nvme0", "serial": "POLLUXHIL0001", "bus": "rp1", "drive": "ns1"}'
    # locking=off: a second node may have to open the same file (qmp_hotplug.py).
    nvme=(-blockdev driver=file,filename="$tmp/ns1.img",node-name=ns1,locking=off
          -device "nvme,id=nvme0,serial=POLLUXHIL0001,bus=rp1,drive=ns1")
    where=$log
    if [ "$qmp_mode" = agent ]; then
      where=$sock_dir/agent.sock
      agent_serial=(-serial unix:"$where",server=on,wait=off)
    fi
    python3 "$qmp_script" "$qmp_mode" "$where" "$sock_dir/qmp.sock" "$device" "$tmp/ns1.img" \
      >"$tmp/qmp.log" 2>&1 &
    qmp_pid=$!
  fi
  # -no-reboot: the guest's poweroff ends QEMU. TCG only: this machine's KVM cannot boot it.
  # thread=single: one host thread runs both vCPUs in turn. With multi-threaded TCG the guest
  # kernel's live code patching (int3 first, then the new bytes) can leave the other vCPU
  # executing a stale translation with the int3 in it: "Oops: int3" in sched_clock_cpu at
  # boot (CI run of stop 28, dhchap_interop_test). Costs 0-30% of a test's time here.
  local rc=0
  timeout "${HIL_TIMEOUT:-600}" qemu-system-x86_64 \
    -accel tcg,thread=single -cpu max -smp 2 -m 1024 -nographic -no-reboot -nodefaults -serial stdio \
    "${agent_serial[@]}" \
    -machine q35,kernel-irqchip=split \
    -device intel-iommu,intremap=on,caching-mode=on,aw-bits="${HIL_AW_BITS:-48}" \
    -device pcie-root-port,id=rp1,chassis=1,slot=1 \
    "${nvme[@]}" \
    -qmp unix:"$sock_dir/qmp.sock",server=on,wait=off \
    -kernel "$cache/vmlinuz" -initrd "$tmp/initrd.cpio" \
    -append "console=ttyS0 intel_iommu=on panic=-1 quiet" >>"$log" 2>&1 || rc=$?
  if [ -n "$qmp_pid" ]; then
    kill "$qmp_pid" 2>/dev/null || true
    cat "$tmp/qmp.log"
  fi
  return $rc
}
# QEMU 7.2 itself sometimes dies of SIGSEGV under controller resets with I/O in flight (its
# bug, not the guest's: docs/HARDWARE.md). That one case gets one more boot, said loudly.
rc=0
boot || rc=$?
if [ $rc -eq 139 ]; then
  echo "qemu_run: QEMU crashed (SIGSEGV); booting once more"
  rc=0
  boot || rc=$?
fi
# The guest's own lines (the console also holds firmware escape sequences).
grep -aE "^(hil|pollux|Attached|Device|pcie|Total|latency|driver|verify|init|BDF|[0-9a-f]{4}:|IOMMU|vfio|hugepages|reset)|POLLUX-HIL-EXIT|rror|FAIL" "$log" || true
grep -q "POLLUX-HIL-EXIT 0" "$log" || { echo "--- console"; tail -60 "$log"; echo "FAIL"; exit 1; }
echo PASS
