#!/bin/sh
# In the guest: give QEMU's NVMe controller to vfio-pci (pollux-setup), run the driver's I/O
# list on it through VFIO (workloads/perf_verify.sh), give the device back (pollux-setup reset).
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
HIL_TRID="trtype:pcie traddr:$bdf" perf_verify.sh
pollux-setup reset
[ "$(basename "$(readlink "/sys/bus/pci/devices/$bdf/driver")" 2>/dev/null)" != vfio-pci ] ||
  { echo "hil: pollux-setup reset left the device on vfio-pci"; exit 1; }
echo "hil: PASS"
