#!/bin/sh
# In the guest: scenario files of scenarios/qemu run by pollux-scenario against QEMU's
# controller through vfio-pci (topology device type qemu). Hot-plug requests go out on
# /dev/ttyS1 to qmp_hotplug.py's agent on the host, which answers there.
set -e
bdf=$(pollux-setup bdfs | head -1)
[ -n "$bdf" ] || { echo "hil: no NVMe controller in the guest"; exit 1; }
pollux-setup bind "$bdf"
pollux-setup hugepages 32
rc=0
for f in host-reset-under-load.yaml hot-remove-reinsert.yaml; do
  echo "hil: pollux-scenario run $f"
  status=0
  pollux-scenario run "/hil/bin/$f" --quiet --report /tmp/report >/tmp/run.log 2>&1 || status=$?
  sed 's/^/hil:   /' /tmp/run.log
  echo "hil: $f: exit status $status"
  [ $status -eq 0 ] || rc=1
done
[ $rc -eq 0 ] && echo "hil: PASS"
exit $rc
