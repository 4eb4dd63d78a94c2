#!/bin/sh
# In the guest, with an IOMMU of 39 address bits (HIL_AW_BITS=39; many client machines have
# one): Pollux maps DMA memory at IOVA = virtual address (about 2^47), so attaching must be
# refused with a message that says why, not fail later with IOMMU faults.
set -e
bdf=$(pollux-setup bdfs | head -1)
pollux-setup bind "$bdf"
if pollux-perf -r "trtype:pcie traddr:$bdf" -q 1 -o 4096 -w randread -t 1 -c 0x1 >/tmp/perf.log 2>&1; then
  cat /tmp/perf.log; echo "hil: attached through a 39-bit IOMMU?"; exit 1
fi
cat /tmp/perf.log
grep -q "needs 48-bit IOVAs" /tmp/perf.log || { echo "hil: unclear refusal"; exit 1; }
echo "hil: PASS"
