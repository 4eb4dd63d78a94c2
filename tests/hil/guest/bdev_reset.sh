#!/bin/sh
# In the guest: the bdev layer on QEMU's NVMe controller through vfio-pci, configured the SPDK
# way (bdev_nvme_attach_controller, trtype pcie), under verified I/O with a controller reset
# every 0.3 s (bdevperf -w reset): outstanding I/O is retried or failed cleanly, the
# controller comes back, the data read back is what was written.
set -e
bdf=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/class")" = "0x010802" ] && bdf=$(basename "$d") && break
done
[ -n "$bdf" ] || { echo "hil: no NVMe controller in the guest"; exit 1; }
echo vfio-pci >"/sys/bus/pci/devices/$bdf/driver_override"
echo "$bdf" >/sys/bus/pci/drivers_probe
echo 32 >/proc/sys/vm/nr_hugepages
cat >/tmp/nvme.json <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "Nvme0", "trtype": "pcie", "traddr": "$bdf"}}]}]}
JSON
echo "hil: pollux-bdevperf -w reset on $bdf"
pollux-bdevperf --json /tmp/nvme.json -q 8 -o 16384 -w reset --reset-period 0.3 -t 2 -m 0x1 \
  --summary /tmp/summary.json
! grep -q '"verify_failures": [1-9]' /tmp/summary.json
resets=$(sed -n 's/.*"resets": \([0-9]*\).*/\1/p' /tmp/summary.json | head -1)
[ "${resets:-0}" -gt 0 ] || { echo "hil: no reset happened"; exit 1; }
echo "hil: $resets resets, 0 verify failures"
echo "hil: PASS"
