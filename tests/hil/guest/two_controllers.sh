#!/bin/sh
# In the guest: two NVMe controllers (HIL_SECOND_NVME=1), both on vfio-pci, driven by one
# pollux-perf --verify. Their IOMMU groups share the process's one VFIO container: the
# process has /dev/vfio/vfio open once (a region is mapped and pinned once, not per drive).
set -e
bdfs=$(pollux-setup bdfs)
[ "$(echo "$bdfs" | wc -l)" -eq 2 ] || { echo "hil: expected two NVMe controllers: $bdfs"; exit 1; }
set -- $bdfs
for b in "$@"; do
  pollux-setup bind "$b"
  echo "hil: $b in IOMMU group $(basename "$(readlink "/sys/bus/pci/devices/$b/iommu_group")")"
done
pollux-setup hugepages 64
pollux-perf -r "trtype:pcie traddr:$1" -r "trtype:pcie traddr:$2" -q 8 -o 4096 -w randrw -M 50 \
  --verify -t 3 -c 0x1 >/tmp/perf.log 2>&1 &
perf=$!
i=0
until [ "$(grep -c Attached /tmp/perf.log)" -eq 2 ]; do
  i=$((i + 1))
  [ $i -le 300 ] || { cat /tmp/perf.log; echo "hil: the controllers did not attach"; exit 1; }
  sleep 0.1
done
containers=$(ls -l "/proc/$perf/fd" | grep -c "/dev/vfio/vfio$" || true)
groups=$(ls -l "/proc/$perf/fd" | grep -cE "/dev/vfio/[0-9]+$" || true)
echo "hil: pollux-perf holds $containers VFIO container(s) and $groups group(s)"
rc=0
wait $perf || rc=$?
grep -E "Attached|Total|verify" /tmp/perf.log
[ $rc -eq 0 ] || { cat /tmp/perf.log; echo "hil: pollux-perf failed ($rc)"; exit 1; }
[ "$containers" -eq 1 ] || { echo "hil: expected one shared container"; exit 1; }
echo "hil: PASS"
