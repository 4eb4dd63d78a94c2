#!/bin/sh
# In the guest: the Linux kernel's NVMe/RDMA host (nvme-rdma, driven by nvme-cli) against
# Pollux's target, pollux-tgt, whose RDMA transport runs on the libibverbs provider and accepts
# connections through librdmacm — over soft-RoCE (rxe.sh: rxe0 on a dummy netdev, 10.99.0.1;
# nothing leaves the guest). A 32 MiB malloc bdev is namespace 1.
#   - nvme discover -t rdma lists the subsystem (rdma, ipv4, 10.99.0.1, 4420, an NVMe
#     subsystem, RDMA connected QPs, rdma-cm);
#   - nvme connect -t rdma gives a 32 MiB namespace; what Identify tells the host (IOCCSZ:
#     4 KiB in-capsule, MDTS, SGLS), the queues the host got;
#   - a random pattern is written over the whole namespace with O_DIRECT (the first 1 MiB in
#     4 KiB writes: in the command capsule; the rest in 1 MiB writes: keyed SGLs, which
#     pollux-tgt fetches by RDMA READ); disconnect; a new controller reads it all back (RDMA
#     WRITE of the data, then the response SEND) and compares; one LBA's data differing would
#     be named;
#   - nvme disconnect; SIGTERM ends pollux-tgt with exit status 0.
# rxe under TCG moves a few MB/s: the times printed are not performance figures.
set -euo pipefail
echo  # ends the firmware's escape sequences' line: the first "hil:" line starts a line
nqn=nqn.2026-11.io.pollux:tgt-rdma addr=10.99.0.1 port=4420 mib=32
export RXE_ADDR=$addr
on_fail() {
  echo "hil: pollux-tgt's output:"
  sed 's/^/hil:   /' /tmp/tgt.log 2>/dev/null || true
  echo "hil: kernel log (nvme, rdma, last 20 lines):"
  dmesg | grep -E 'nvme|rdma|rxe' | tail -20 | sed 's/^/hil:   /'
  rxe.sh status || true
}
. /hil/bin/hil_lib.sh
require_gnu_tools

rxe.sh setup
[ -d /sys/module/nvme_rdma ] || run "modprobe nvme_rdma" modprobe nvme_rdma

cat >/tmp/tgt.json <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": $((mib * 2048)), "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "RDMA", "rdma_device": "ibverbs:rxe0",
      "num_shared_buffers": 128, "num_cqe": 4096}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "allow_any_host": true,
      "serial_number": "POLLUXHILRDMA1", "model_number": "Pollux HIL RDMA target"}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"nsid": 1, "bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "$addr", "trsvcid": "$port"}}}]}]}
JSON
step "target: pollux-tgt -m 0x1 on a $mib MiB malloc bdev, RDMA transport on ibverbs:rxe0"
pollux-tgt -m 0x1 --json /tmp/tgt.json --rpc /tmp/tgt.sock >/tmp/tgt.log 2>&1 &
tgt=$!
tgt_ready() {
  kill -0 $tgt 2>/dev/null || fail "pollux-tgt exited"
  grep -q "pollux-tgt: ready" /tmp/tgt.log
}
wait_for 300 "pollux-tgt not ready after 30 s" tgt_ready
grep "rdma" /tmp/tgt.log | sed 's/^/hil:   /' || true
grep -q "listening on $addr:$port (rdma_cm)" /tmp/tgt.log || fail "pollux-tgt does not listen through rdma_cm"
rdma resource show cm_id | grep "state LISTEN" | grep -q "src-addr $addr:$port " ||
  fail "no RDMA CM id listens on $addr:$port (rdma resource show cm_id)"
step "pollux-tgt listens: an RDMA CM id in state LISTEN on $addr:$port"

mkdir -p /etc/nvme
uuid=$(cat /proc/sys/kernel/random/uuid)
echo "nqn.2014-08.org.nvmexpress:uuid:$uuid" >/etc/nvme/hostnqn
echo "$uuid" >/etc/nvme/hostid

run "nvme discover" nvme discover -t rdma -a "$addr" -s "$port"
cp /tmp/run.log /tmp/discover.txt
entry=$(awk -v nqn="$nqn" '
  /^=====Discovery Log Entry/ { if (hit) exit; e = "" }
  /^[a-z_]+: / { v = $0; sub(/^[a-z_]+: */, "", v); sub(/ *$/, "", v); e = e $1 v " " }
  /^subnqn: / && v == nqn { hit = 1 }
  END { if (hit) print e }' /tmp/discover.txt)
[ -n "$entry" ] || { sed 's/^/hil:   /' /tmp/discover.txt; fail "nvme discover does not list $nqn"; }
step "nvme discover lists it: $entry"
for want in "trtype:rdma" "adrfam:ipv4" "traddr:$addr" "trsvcid:$port" "subtype:nvme subsystem" \
  "rdma_qptype:connected" "rdma_cms:rdma-cm"; do
  case " $entry" in *" $want "*) ;; *) fail "the discovery entry lacks $want" ;; esac
done

connect() {
  run "nvme connect -t rdma" nvme connect -t rdma -a "$addr" -s "$port" -n "$nqn"
  ctrl=
  for c in /sys/class/nvme/nvme*; do
    if [ "$(cat "$c/subsysnqn")" = "$nqn" ] && [ "$(cat "$c/transport")" = rdma ]; then
      ctrl=${c##*/}
    fi
  done
  [ -n "$ctrl" ] || fail "nvme connect returned but no rdma controller has subsystem $nqn"
  state=$(cat "/sys/class/nvme/$ctrl/state")
  [ "$state" = live ] || fail "$ctrl is $state, not live"
  wait_for 100 "no namespace 1 on $ctrl 10 s after connecting" ns_dev
  step "connected: $ctrl, $dev ($(cat "/sys/class/nvme/$ctrl/address"))"
}
ns_dev() {
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ -e "$s/$ctrl" ] || continue
    for d in "$s"/nvme*n1; do
      [ -e "$d" ] && [ -b "/dev/${d##*/}" ] && { dev=/dev/${d##*/}; return 0; }
    done
  done
  return 1
}
disconnect() {
  run "nvme disconnect" nvme disconnect -n "$nqn"
  grep -q "disconnected 1 controller" /tmp/run.log ||
    { sed 's/^/hil:   /' /tmp/run.log; fail "nvme disconnect did not disconnect our one controller"; }
  wait_for 50 "$ctrl still there 5 s after nvme disconnect" test ! -e "/sys/class/nvme/$ctrl"
}

connect
size=$(blockdev --getsize64 "$dev")
[ "$size" = $((mib * 1048576)) ] || fail "$dev has $size bytes, the target's namespace $((mib * 1048576))"
nvme id-ctrl "/dev/$ctrl" >/tmp/id-ctrl.txt || fail "nvme id-ctrl /dev/$ctrl"
f() { sed -n "s/^$1 *: *//p" /tmp/id-ctrl.txt | sed 's/ *$//'; }
q=/sys/class/nvme/$ctrl
step "Identify Controller: subnqn $(f subnqn), model '$(f mn)', IOCCSZ $(f ioccsz), IORCSZ $(f iorcsz)," \
  "MDTS $(f mdts), SGLS $(f sgls), MSDBD $(f msdbd), MAXCMD $(f maxcmd)"
step "queues: $(($(cat "$q/queue_count") - 1)) I/O queue(s) of $(($(cat "$q/sqsize") + 1)) entries"
[ "$(f subnqn)" = "$nqn" ] || fail "Identify's subnqn is not $nqn"
[ "$(f mn)" = "Pollux HIL RDMA target" ] || fail "Identify's model is '$(f mn)'"
[ "$(f ioccsz)" = 260 ] || fail "IOCCSZ $(f ioccsz), expected 260 (4096 bytes in-capsule)"

run "generating the pattern" "$dd" if=/dev/urandom of=/tmp/a bs=1M count=$mib
run "4 KiB writes to $dev" "$dd" if=/tmp/a of="$dev" bs=4096 count=256 oflag=direct
step "wrote 1 MiB in 4 KiB writes (in-capsule data)"
run "1 MiB writes to $dev" "$dd" if=/tmp/a of="$dev" bs=1M skip=1 seek=1 oflag=direct
step "wrote $((mib - 1)) MiB in 1 MiB writes (keyed SGL: pollux-tgt reads them by RDMA READ)"
disconnect
connect
run "reading $dev" "$dd" if="$dev" of=/tmp/r bs=1M iflag=direct
rc=0
"$cmp" /tmp/a /tmp/r >/tmp/cmp.log 2>&1 || rc=$?
if [ $rc != 0 ]; then
  byte=$(sed -n 's/.*differ: [a-z]* \([0-9]*\).*/\1/p' /tmp/cmp.log)
  [ -n "$byte" ] || { sed 's/^/hil:   /' /tmp/cmp.log; fail "cmp failed (exit status $rc)"; }
  fail "what was read back differs from what was written, first at byte $((byte - 1))" \
    "(LBA $(((byte - 1) / 512)))"
fi
step "read back $mib MiB over a new controller (pollux-tgt RDMA WRITEs it): equal"
disconnect
grep -E "nvmf/rdma" /tmp/tgt.log | grep -v "listening on" | tail -6 | sed 's/^/hil:   /' || true

kill -TERM $tgt
rc=0
wait $tgt || rc=$?
[ $rc = 0 ] || fail "pollux-tgt exited with status $rc after SIGTERM"
step "pollux-tgt ended (exit status 0)"
echo "hil: PASS"
