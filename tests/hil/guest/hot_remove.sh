#!/bin/sh
# In the guest: surprise removal of QEMU's NVMe controller (QMP device_del from the host)
# while pollux-perf runs verified I/O on it through vfio-pci. The kernel asks for the device
# back (the request eventfd): the driver must notice, stop the controller, fail what is
# outstanding, let go (pollux-perf ends by itself: nothing hangs) so the unplug completes. Then a controller is
# plugged into the same slot (device_add, same backing store): it is bound again and every
# block still holds what was written before the removal (--pattern: each block carries its
# LBA and the run's generation).
set -e
ticks=0
tick() {  # tick LIMIT MESSAGE: one more tenth of a second of waiting, or fail
  ticks=$((ticks + 1))
  [ $ticks -le "$1" ] || { echo "hil: $2"; exit 1; }
  sleep 0.1
}
bdf=$(pollux-setup bdfs | head -1)
[ -n "$bdf" ] || { echo "hil: no NVMe controller"; exit 1; }
pollux-setup bind "$bdf"
pollux-setup hugepages 32
gen=24301  # the generation every block gets
blocks64k=1024  # 64 KiB I/Os in the 64 MiB namespace (qemu_run.sh: ns1.img)
pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o 65536 -w write --pattern $gen \
  --io-count "$blocks64k" -t 60 -c 0x1 >/tmp/fill.log 2>&1 || { cat /tmp/fill.log; exit 1; }
echo "hil: namespace filled with generation $gen"
pollux-perf -r "trtype:pcie traddr:$bdf" -q 32 -o 4096 -w randrw -M 50 --pattern $gen -t 60 \
  -c 0x1 >/tmp/perf1.log 2>&1 &
perf=$!
until grep -q "^Attached" /tmp/perf1.log; do  # attached: I/O starts right after
  kill -0 $perf 2>/dev/null || { cat /tmp/perf1.log; echo "hil: pollux-perf ended before attaching"; exit 1; }
  tick 300 "pollux-perf did not attach"
done
sleep 1
kill -0 $perf 2>/dev/null || { cat /tmp/perf1.log; echo "hil: pollux-perf ended before the removal"; exit 1; }
echo "hil: remove-now"
ticks=0
while kill -0 $perf 2>/dev/null; do tick 300 "pollux-perf still running 30 s after the removal: it hangs"; done
rc=0
wait $perf || rc=$?
grep -E "^(Attached|Total|verify)|device gone|errors" /tmp/perf1.log || true
echo "hil: pollux-perf ended $((ticks / 10)).$((ticks % 10)) s after the removal request, exit status $rc"
[ "$rc" -ne 0 ] || { echo "hil: pollux-perf reported success for I/O on a removed device"; exit 1; }
grep -q "verify: .* 0 failures" /tmp/perf1.log || { cat /tmp/perf1.log; echo "hil: verify failures"; exit 1; }
ticks=0
while [ -e "/sys/bus/pci/devices/$bdf" ]; do tick 200 "$bdf still present 20 s after pollux-perf let go"; done
echo "hil: $bdf is gone"
echo "hil: insert-now"
ticks=0
while [ -z "$(pollux-setup bdfs)" ]; do tick 300 "no controller 30 s after device_add"; done
bdf=$(pollux-setup bdfs | head -1)
echo "hil: $bdf is back"
pollux-setup bind "$bdf"
# Every block, sequentially: what was written before (and during) the removal is there.
pollux-perf -r "trtype:pcie traddr:$bdf" -q 8 -o 65536 -w read --pattern $gen \
  --io-count "$blocks64k" -t 60 -c 0x1 >/tmp/perf2.log 2>&1 ||
  { cat /tmp/perf2.log; echo "hil: data lost or I/O failed after re-insertion"; exit 1; }
grep -E "^verify" /tmp/perf2.log
echo "hil: PASS"
