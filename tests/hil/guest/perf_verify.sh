#!/bin/sh
# In the guest: give QEMU's NVMe controller to vfio-pci and run Pollux's driver on it through
# VFIO: identify (pollux-perf prints it on attach), then verified random I/O with several I/O
# sizes (one PRP entry, a PRP list, transfers near MDTS) on every namespace.
set -e
bdf=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/class")" = "0x010802" ] && bdf=$(basename "$d") && break
done
[ -n "$bdf" ] || { echo "hil: no NVMe controller in the guest"; exit 1; }
group=$(basename "$(readlink "/sys/bus/pci/devices/$bdf/iommu_group")")
echo "hil: NVMe controller $bdf, IOMMU group $group"
echo vfio-pci >"/sys/bus/pci/devices/$bdf/driver_override"
echo "$bdf" >/sys/bus/pci/drivers_probe
[ -e "/dev/vfio/$group" ] || { echo "hil: /dev/vfio/$group did not appear"; exit 1; }
echo 32 >/proc/sys/vm/nr_hugepages
for size in 4096 65536 131072; do
  echo "hil: pollux-perf --verify, $size-byte I/O"
  pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o "$size" -w randrw -M 50 --verify -t 1 -c 0x1
done
echo "hil: PASS"
