#!/usr/bin/env bash
# pollux-setup against a fake sysfs/procfs tree: what it lists, what it writes when it binds
# and unbinds, and that it refuses drives that are mounted, in a shared IOMMU group, or
# without an IOMMU. (The real thing runs in the HIL guest: tests/hil.)
set -euo pipefail
setup=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
S=$t/sys P=$t/proc
mkdir -p "$S/bus/pci/drivers/nvme" "$S/bus/pci/drivers/vfio-pci" "$S/bus/pci/drivers/e1000e" \
  "$S/kernel/mm/hugepages/hugepages-2048kB" "$P"
touch "$S/bus/pci/drivers_probe" "$S/bus/pci/drivers/nvme/unbind"
echo 0 >"$S/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
echo 0 >"$S/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
: >"$P/swaps"
echo "/dev/nvme2n1 /mnt ext4 rw 0 0" >"$P/mounts"
dev() {  # bdf class driver group [controller namespace]
  local d=$S/bus/pci/devices/$1
  mkdir -p "$d"
  echo "$2" >"$d/class"; echo 0x1b36 >"$d/vendor"; echo 0x0010 >"$d/device"; : >"$d/driver_override"
  [ "$3" != none ] && ln -s "../../../../bus/pci/drivers/$3" "$d/driver"
  if [ "$4" != - ]; then
    mkdir -p "$S/kernel/iommu_groups/$4/devices"
    ln -s "../../../../kernel/iommu_groups/$4" "$d/iommu_group"
    ln -s "../../../../bus/pci/devices/$1" "$S/kernel/iommu_groups/$4/devices/$1"
  fi
  [ $# -ge 6 ] && mkdir -p "$d/nvme/$5/$6"
  return 0
}
dev 0000:01:00.0 0x010802 nvme 3 nvme0 nvme0n1
dev 0000:02:00.0 0x010802 nvme 4 nvme1 nvme1n1
dev 0000:02:00.1 0x020000 e1000e 4                  # a NIC in the same group
dev 0000:03:00.0 0x010802 nvme 5 nvme2 nvme2n1      # mounted (see mounts)
dev 0000:04:00.0 0x010802 none -                    # no IOMMU
dev 0000:05:00.0 0x010802 nvme 6 nvme3 nvme3c3n1     # a multipath path device
dev 0000:06:00.0 0x010802 nvme 7 nvme4 nvme4n1       # two drives in one group
dev 0000:06:00.1 0x010802 nvme 7 nvme5 nvme5n1
export POLLUX_SYSFS=$S POLLUX_PROC=$P
fail() { echo "FAIL: $*"; exit 1; }

out=$("$setup" list)
echo "$out"
echo "$out" | grep -q "^0000:01:00.0 *1b36:0010 *nvme *3 *nvme0n1$" || fail "list: 01:00.0"
echo "$out" | grep -q "^0000:03:00.0 .*nvme2n1 (mounted)$" || fail "list: the mounted drive"
echo "$out" | grep -q "0000:02:00.1" && fail "list: a NIC is not an NVMe controller"
[ "$("$setup" bdfs | head -2 | tr '\n' ' ')" = "0000:01:00.0 0000:02:00.0 " ] || fail "bdfs"

"$setup" bind 0000:01:00.0
[ "$(cat "$S/bus/pci/devices/0000:01:00.0/driver_override")" = vfio-pci ] || fail "bind: driver_override"
[ "$(cat "$S/bus/pci/drivers/nvme/unbind")" = 0000:01:00.0 ] || fail "bind: unbind from nvme"
[ "$(cat "$S/bus/pci/drivers_probe")" = 0000:01:00.0 ] || fail "bind: drivers_probe"

refuse() {  # expected-message args...
  local want=$1; shift
  if msg=$("$setup" "$@" 2>&1); then fail "'$*' should have been refused: $msg"; fi
  echo "$msg" | grep -q "$want" || fail "'$*': expected '$want', got '$msg'"
  echo "refused as expected: $msg"
}
refuse "shares IOMMU group 4 with 0000:02:00.1" bind 0000:02:00.0
refuse "/dev/nvme2n1 is in use (mounted)" bind 03:00.0
refuse "has no IOMMU group" bind 0000:04:00.0
refuse "multipath path" bind 0000:05:00.0
refuse "shares IOMMU group 7 with 0000:06:00.1" bind 0000:06:00.0
"$setup" bind 0000:06:00.0 0000:06:00.1 | grep -c "bound to vfio-pci" | grep -q 2 || fail "a group bound together"
echo "/dev/nvme0n1p2 /boot ext4 rw 0 0" >>"$P/mounts"
mkdir -p "$S/bus/pci/devices/0000:01:00.0/nvme/nvme0/nvme0n1/nvme0n1p2"
out=$("$setup" bind all 2>&1)
echo "$out" | grep -q "skipped 0000:04:00.0" || fail "bind all: skips what it cannot bind: $out"
refuse "no PCI device 0000:09:00.0" bind 0000:09:00.0
refuse "is not a PCI address" bind nvme0
refuse "unknown command" frobnicate
[ "$(cat "$S/bus/pci/devices/0000:02:00.0/driver_override")" = "" ] || fail "a refused bind wrote"

"$setup" hugepages 64 | grep -q "64 of 64" || fail "hugepages"
refuse "a number of 2 MiB pages" hugepages lots

# Unbind: 01:00.0 looks bound to vfio-pci now (the fake kernel does not rebind: do it here).
rm "$S/bus/pci/devices/0000:01:00.0/driver"
ln -s ../../../../bus/pci/drivers/vfio-pci "$S/bus/pci/devices/0000:01:00.0/driver"
"$setup" status | tee "$t/status.txt"; grep -q "0000:01:00.0 .*vfio-pci" "$t/status.txt" || fail "status shows the bound drive"
"$setup" reset
[ "$(cat "$S/bus/pci/drivers/vfio-pci/unbind")" = 0000:01:00.0 ] || fail "reset: unbind from vfio-pci"
[ -z "$(cat "$S/bus/pci/devices/0000:01:00.0/driver_override")" ] || fail "reset: driver_override cleared"
echo PASS
