#!/bin/sh
# In the guest: bdev_nvme with its hot-plug poller watching the PCI slot
# (bdev_nvme_set_hotplug), pollux-bdevperf -w verify on the bdev. QMP device_del pulls the
# controller: outstanding I/O fails, the bdev goes, bdevperf lets go so the unplug completes.
# device_add puts one back: once it is bound to vfio-pci the poller attaches it, bdevperf
# opens the bdev again and verified I/O carries on.
set -e
ticks=0
tick() {  # tick LIMIT MESSAGE: one more tenth of a second of waiting, or fail
  ticks=$((ticks + 1))
  [ $ticks -le "$1" ] || { echo "hil: $2"; cat /tmp/bdevperf.log; exit 1; }
  sleep 0.1
}
bdf=$(pollux-setup bdfs | head -1)
pollux-setup bind "$bdf"
pollux-setup hugepages 32
cat >/tmp/nvme.json <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "Nvme0", "trtype": "pcie", "traddr": "$bdf"}},
  {"method": "bdev_nvme_set_hotplug",
   "params": {"period_us": 100000, "slots": [{"name": "Nvme0", "trtype": "pcie", "traddr": "$bdf"}]}}]}]}
JSON
pollux-bdevperf --json /tmp/nvme.json -q 8 -o 4096 -w verify -t 20 -m 0x1 \
  --summary /tmp/summary.json >/tmp/bdevperf.log 2>&1 &
perf=$!
ticks=0; until grep -q running /tmp/bdevperf.log; do tick 300 "bdevperf did not start"; done
sleep 1
echo "hil: remove-now"
ticks=0
while [ -e "/sys/bus/pci/devices/$bdf" ]; do tick 300 "$bdf still present 30 s after device_del: bdevperf did not let go"; done
echo "hil: $bdf is gone; bdevperf still running: $(kill -0 $perf 2>/dev/null && echo yes || echo no)"
echo "hil: insert-now"
ticks=0; while [ -z "$(pollux-setup bdfs)" ]; do tick 300 "no controller after device_add"; done
bdf=$(pollux-setup bdfs | head -1)
pollux-setup bind "$bdf"
rc=0
wait $perf || rc=$?
cat /tmp/bdevperf.log | grep -E "Nvme0n1|reopens|Total" || true
reopens=$(sed -n 's/.*"reopens": \([0-9]*\).*/\1/p' /tmp/summary.json | head -1)
after=$(sed -n 's/.*"ios_since_reopen": \([0-9]*\).*/\1/p' /tmp/summary.json | head -1)
echo "hil: bdevperf exit status $rc, reopens ${reopens:-0}, verified I/Os since: ${after:-0}"
[ "${reopens:-0}" -ge 1 ] || { echo "hil: the bdev never came back"; exit 1; }
[ "${after:-0}" -ge 100 ] || { echo "hil: I/O did not resume on the re-attached bdev"; exit 1; }
if grep -q '"verify_failures": [1-9]' /tmp/summary.json; then echo "hil: verify failures"; exit 1; fi
echo "hil: PASS"
