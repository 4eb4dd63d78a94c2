#!/bin/sh
# In the guest: bdev_nvme on QEMU's NVMe controller through vfio-pci under verified I/O with
# controller resets (workloads/bdev_reset.sh).
set -e
bdf=$(pollux-setup bdfs | head -1)
[ -n "$bdf" ] || { echo "hil: no NVMe controller in the guest"; exit 1; }
pollux-setup bind "$bdf"
pollux-setup hugepages 32
HIL_TRTYPE=pcie HIL_TRADDR=$bdf bdev_reset.sh
echo "hil: PASS"
