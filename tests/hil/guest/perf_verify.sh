#!/bin/sh
# In the guest: give QEMU's NVMe controller to vfio-pci (pollux-setup) and run Pollux's driver
# on it through VFIO: identify (pollux-perf prints it on attach), then verified random I/O with
# several I/O sizes (one PRP entry, a PRP list, 128 KiB) on every namespace; then give the
# device back (pollux-setup reset).
set -e
bdf=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/class")" = "0x010802" ] && bdf=$(basename "$d") && break
done
[ -n "$bdf" ] || { echo "hil: no NVMe controller in the guest"; exit 1; }
group=$(basename "$(readlink "/sys/bus/pci/devices/$bdf/iommu_group")")
echo "hil: NVMe controller $bdf, IOMMU group $group"
pollux-setup bind "$bdf"
pollux-setup hugepages 32
pollux-setup status
[ -e "/dev/vfio/$group" ] || { echo "hil: /dev/vfio/$group did not appear"; exit 1; }
for size in 4096 65536 131072; do
  echo "hil: pollux-perf --verify, $size-byte I/O"
  pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o "$size" -w randrw -M 50 --verify -t 1 -c 0x1
done
pollux-setup reset
[ "$(basename "$(readlink "/sys/bus/pci/devices/$bdf/driver")" 2>/dev/null)" != vfio-pci ] ||
  { echo "hil: pollux-setup reset left the device on vfio-pci"; exit 1; }
echo "hil: PASS"
