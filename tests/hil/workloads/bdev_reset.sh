#!/bin/sh
# The bdev layer on any device, configured the SPDK way (bdev_nvme_attach_controller), under
# verified I/O with a controller reset every 0.3 s (bdevperf -w reset): no error, no verify
# failure, resets counted. HIL_TRTYPE / HIL_TRADDR: the controller (pcie + a PCI address, or
# vfio-user + a socket).
set -e
[ -n "${HIL_TRTYPE:-}" ] && [ -n "${HIL_TRADDR:-}" ] || { echo "hil: HIL_TRTYPE/HIL_TRADDR unset"; exit 1; }
dir=${TMPDIR:-/tmp}
cat >"$dir/nvme.json" <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "Nvme0", "trtype": "$HIL_TRTYPE", "traddr": "$HIL_TRADDR"}}]}]}
JSON
echo "hil: pollux-bdevperf -w reset on $HIL_TRTYPE $HIL_TRADDR"
pollux-bdevperf --json "$dir/nvme.json" -q 8 -o 16384 -w reset --reset-period 0.3 -t 2 -m 0x1 \
  --summary "$dir/summary.json"
if grep -q '"verify_failures": [1-9]' "$dir/summary.json"; then echo "hil: verify failures"; exit 1; fi
resets=$(sed -n 's/.*"resets": \([0-9]*\).*/\1/p' "$dir/summary.json" | head -1)
[ "${resets:-0}" -gt 0 ] || { echo "hil: no reset happened"; exit 1; }
echo "hil: $resets resets, 0 verify failures"
