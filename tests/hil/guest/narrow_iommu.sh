#!/bin/sh
# In the guest, with an IOMMU of 39 address bits (HIL_AW_BITS=39; many client machines have
# one). IOVA = virtual address (about 2^47) cannot work there: by default the driver notices
# the narrow IOMMU when it opens the device and hands out compact IOVAs (from 4 GiB up), and
# verified I/O runs; forcing POLLUX_IOVA_MODE=va is refused with a message that says why,
# not left to fail later with IOMMU faults.
set -e
bdf=$(pollux-setup bdfs | head -1)
pollux-setup bind "$bdf"
pollux-setup hugepages 32
echo "hil: POLLUX_IOVA_MODE unset (auto), 4 KiB and 128 KiB verified I/O"
for size in 4096 131072; do
  pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o $size -w randrw -M 50 --verify -t 1 -c 0x1 \
    >/tmp/perf.log 2>&1 || { cat /tmp/perf.log; echo "hil: verified I/O failed"; exit 1; }
  grep -E "Attached|Total|verify" /tmp/perf.log
done
echo "hil: POLLUX_IOVA_MODE=compact"
POLLUX_IOVA_MODE=compact pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o 4096 -w randrw -M 50 \
  --verify -t 1 -c 0x1 >/tmp/perf.log 2>&1 || { cat /tmp/perf.log; echo "hil: compact failed"; exit 1; }
echo "hil: POLLUX_IOVA_MODE=va"
if POLLUX_IOVA_MODE=va pollux-perf -r "trtype:pcie traddr:$bdf" -q 1 -o 4096 -w randread -t 1 \
  -c 0x1 >/tmp/perf.log 2>&1; then
  cat /tmp/perf.log; echo "hil: IOVA = virtual address through a 39-bit IOMMU?"; exit 1
fi
cat /tmp/perf.log
grep -q "needs 48" /tmp/perf.log || { echo "hil: unclear refusal"; exit 1; }
echo "hil: PASS"
