#!/bin/sh
# In the guest: the Linux kernel's NVMe/TCP host (nvme-cli) against Pollux's target, pollux-tgt,
# on a 64 MiB malloc bdev at 127.0.0.1:4420 — what nvmet_tcp_baseline.sh does against the
# kernel's own target, now against ours:
#   - nvme discover lists the subsystem (tcp, ipv4, 127.0.0.1, 4420, an NVMe subsystem);
#   - nvme connect gives a 64 MiB namespace; what Identify tells the host (IOCCSZ, MDTS, ...);
#   - a random 64 MiB pattern A written over the whole namespace with O_DIRECT (the first 4 MiB
#     in 4 KiB writes, in-capsule; the rest in 1 MiB writes: R2T and H2CData); disconnect;
#     connect again with header and data digests, read everything back and compare; write
#     pattern B; disconnect; connect without digests, read back and compare — each read over a
#     new controller (reads come from the target's RAM, not the host's page cache);
#   - a namespace hot-added by RPC while the host is connected: the target's Asynchronous Event
#     (namespace attribute notice) makes the kernel read the changed-namespace log and rescan,
#     and the namespace appears (no nvme ns-rescan); data written to it reads back; its bdev
#     deleted by RPC: the namespace goes from the host too;
#   - nvme disconnect; the target ends every association and exits 0 on SIGTERM.
set -euo pipefail
echo  # ends the firmware's escape sequences' line: the first "hil:" line starts a line
nqn=nqn.2026-11.io.pollux:tgt addr=127.0.0.1 port=4420 mib=64
on_fail() {
  echo "hil: pollux-tgt's output:"
  sed 's/^/hil:   /' /tmp/tgt.log 2>/dev/null || true
  echo "hil: kernel log (nvme, last 20 lines):"
  dmesg | grep -E 'nvme' | tail -20 | sed 's/^/hil:   /'
}
. /hil/bin/hil_lib.sh
require_gnu_tools

ip link set lo up || fail "ip link set lo up"
for m in crc32c_generic nvme_tcp; do
  [ -d "/sys/module/$m" ] || run "modprobe $m" modprobe "$m"
done

cat >/tmp/tgt.json <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": $((mib * 2048)), "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "num_shared_buffers": 128}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "allow_any_host": true,
      "serial_number": "POLLUXHILTGT1", "model_number": "Pollux HIL target"}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"nsid": 1, "bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "$addr", "trsvcid": "$port"}}}]}]}
JSON
step "target: pollux-tgt -m 0x1 on a $mib MiB malloc bdev"
pollux-tgt -m 0x1 --json /tmp/tgt.json --rpc /tmp/tgt.sock >/tmp/tgt.log 2>&1 &
tgt=$!
tgt_ready() {
  kill -0 $tgt 2>/dev/null || fail "pollux-tgt exited"
  grep -q "pollux-tgt: ready" /tmp/tgt.log
}
wait_for 200 "pollux-tgt not ready after 20 s" tgt_ready
sed 's/^/hil:   /' /tmp/tgt.log

mkdir -p /etc/nvme
uuid=$(cat /proc/sys/kernel/random/uuid)
echo "nqn.2014-08.org.nvmexpress:uuid:$uuid" >/etc/nvme/hostnqn
echo "$uuid" >/etc/nvme/hostid

run "nvme discover" nvme discover -t tcp -a "$addr" -s "$port"
cp /tmp/run.log /tmp/discover.txt
entry=$(awk -v nqn="$nqn" '
  /^=====Discovery Log Entry/ { if (hit) exit; e = "" }
  /^[a-z]+: / { v = $0; sub(/^[a-z]+: */, "", v); sub(/ *$/, "", v); e = e $1 v " " }
  /^subnqn: / && v == nqn { hit = 1 }
  END { if (hit) print e }' /tmp/discover.txt)
[ -n "$entry" ] || { sed 's/^/hil:   /' /tmp/discover.txt; fail "nvme discover does not list $nqn"; }
step "nvme discover lists it: $entry"
for want in "trtype:tcp" "adrfam:ipv4" "traddr:$addr" "trsvcid:$port" "subtype:nvme subsystem"; do
  case " $entry" in *" $want "*) ;; *) fail "the discovery entry lacks $want" ;; esac
done

connect() {
  run "nvme connect $*" nvme connect -t tcp -a "$addr" -s "$port" -n "$nqn" "$@"
  ctrl=
  for c in /sys/class/nvme/nvme*; do
    if [ "$(cat "$c/subsysnqn")" = "$nqn" ] && [ "$(cat "$c/transport")" = tcp ]; then
      ctrl=${c##*/}
    fi
  done
  [ -n "$ctrl" ] || fail "nvme connect returned but no tcp controller has subsystem $nqn"
  state=$(cat "/sys/class/nvme/$ctrl/state")
  [ "$state" = live ] || fail "$ctrl is $state, not live"
  wait_for 100 "no namespace 1 on $ctrl 10 s after connecting" ns_dev
  digests="no digests"
  [ $# = 0 ] || digests="header and data digests"
  step "connected ($digests): $ctrl, $dev ($(cat "/sys/class/nvme/$ctrl/address"))"
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
check() {
  run "reading $dev" "$dd" if="$dev" of=/tmp/r bs=4M iflag=direct
  rc=0
  "$cmp" "$1" /tmp/r >/tmp/cmp.log 2>&1 || rc=$?
  rm -f /tmp/r
  [ $rc = 0 ] && { step "read back $mib MiB: $2, equal"; return 0; }
  byte=$(sed -n 's/.*differ: [a-z]* \([0-9]*\).*/\1/p' /tmp/cmp.log)
  [ -n "$byte" ] || { sed 's/^/hil:   /' /tmp/cmp.log; fail "$2: cmp failed (exit status $rc)"; }
  fail "$2: what was read back differs from what was written, first at byte $((byte - 1))" \
    "(LBA $(((byte - 1) / 512)))"
}
write() {
  run "4 KiB writes to $dev" "$dd" if="$1" of="$dev" bs=4096 count=1024 oflag=direct
  run "1 MiB writes to $dev" "$dd" if="$1" of="$dev" bs=1M skip=4 seek=4 oflag=direct
}

connect
size=$(blockdev --getsize64 "$dev")
[ "$size" = $((mib * 1048576)) ] || fail "$dev has $size bytes, the target's namespace $((mib * 1048576))"
nvme id-ctrl "/dev/$ctrl" >/tmp/id-ctrl.txt || fail "nvme id-ctrl /dev/$ctrl"
f() { sed -n "s/^$1 *: *//p" /tmp/id-ctrl.txt | sed 's/ *$//'; }
q=/sys/class/nvme/$ctrl
step "Identify Controller: subnqn $(f subnqn), model '$(f mn)', serial '$(f sn)', version $(f ver)," \
  "cntlid $(f cntlid), IOCCSZ $(f ioccsz), IORCSZ $(f iorcsz), MDTS $(f mdts), SGLS $(f sgls)," \
  "MAXCMD $(f maxcmd), KAS $(f kas), NN $(f nn), OAES $(f oaes)"
step "queues: $(($(cat "$q/queue_count") - 1)) I/O queue(s) of $(($(cat "$q/sqsize") + 1)) entries," \
  "KATO $(cat "$q/kato") s"
[ "$(f subnqn)" = "$nqn" ] || fail "Identify's subnqn is not $nqn"
[ "$(f mn)" = "Pollux HIL target" ] || fail "Identify's model is '$(f mn)'"
[ "$(f ioccsz)" = 260 ] || fail "IOCCSZ $(f ioccsz), expected 260 (4096 bytes in-capsule)"
nvme id-ns "$dev" >/tmp/id-ns.txt || fail "nvme id-ns $dev"
nvme ns-descs "$dev" >/tmp/ns-descs.txt 2>&1 || fail "nvme ns-descs $dev"
grep -q "^uuid" /tmp/ns-descs.txt || { sed 's/^/hil:   /' /tmp/ns-descs.txt; fail "no UUID descriptor"; }
step "namespace: $(sed -n 's/^nsze *: *//p' /tmp/id-ns.txt) blocks, $(grep '^uuid' /tmp/ns-descs.txt)"
nvme smart-log "/dev/$ctrl" >/tmp/smart.txt 2>&1 || fail "nvme smart-log: $(cat /tmp/smart.txt)"
nvme error-log "/dev/$ctrl" -e 4 >/tmp/errlog.txt 2>&1 || fail "nvme error-log: $(cat /tmp/errlog.txt)"
step "smart-log and error-log read"

step "pattern A: $mib MiB from /dev/urandom"
run "generating pattern A" "$dd" if=/dev/urandom of=/tmp/a bs=1M count=$mib
{ "$dd" if=/tmp/a bs=1M skip=$((mib / 2)) 2>/dev/null
  "$dd" if=/tmp/a bs=1M count=$((mib / 2)) 2>/dev/null; } >/tmp/b
write /tmp/a
step "wrote A (no digests)"
disconnect
connect -g -G
check /tmp/a "A, header and data digests, a new controller"
write /tmp/b
step "wrote B (header and data digests)"
disconnect
connect
check /tmp/b "B, no digests, a new controller"

# Namespace hot-add and hot-remove, seen by the connected host through the target's notice.
rpc() { pollux-rpc-call /tmp/tgt.sock "$@"; }
ns_of() {  # NSID: sets dev2 to the host's block device of namespace NSID, if it has one
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ -e "$s/$ctrl" ] || continue
    for d in "$s"/nvme*n*; do
      [ -e "$d/nsid" ] && [ "$(cat "$d/nsid")" = "$1" ] && [ -b "/dev/${d##*/}" ] &&
        { dev2=/dev/${d##*/}; return 0; }
    done
  done
  return 1
}
no_ns() { ! ns_of "$1"; }
run "bdev_malloc_create" rpc bdev_malloc_create '{"name": "Malloc1", "num_blocks": 8192, "block_size": 4096}'
nsid=$(rpc nvmf_subsystem_add_ns "{\"nqn\": \"$nqn\", \"namespace\": {\"bdev_name\": \"Malloc1\"}}") ||
  fail "nvmf_subsystem_add_ns"
[ "$nsid" = 2 ] || fail "nvmf_subsystem_add_ns answered '$nsid', not NSID 2"
wait_for 100 "namespace 2 not on the host 10 s after it was added (no notice, or no rescan)" ns_of 2
size2=$(blockdev --getsize64 "$dev2")
[ "$size2" = $((8192 * 4096)) ] || fail "$dev2 has $size2 bytes, namespace 2 $((8192 * 4096))"
step "namespace 2 hot-added by RPC: the host rescanned on the notice, $dev2 ($size2 bytes," \
  "$(cat "/sys/block/${dev2#/dev/}/queue/logical_block_size")-byte blocks)"
run "writing $dev2" "$dd" if=/tmp/a of="$dev2" bs=1M count=4 oflag=direct
run "reading $dev2" "$dd" if="$dev2" of=/tmp/r bs=1M count=4 iflag=direct
"$dd" if=/tmp/a of=/tmp/w bs=1M count=4 2>/dev/null
"$cmp" /tmp/w /tmp/r >/dev/null 2>&1 || fail "namespace 2: what was read back differs"
rm -f /tmp/w /tmp/r
step "namespace 2: 4 MiB written and read back equal"
run "bdev_malloc_delete" rpc bdev_malloc_delete '{"name": "Malloc1"}'
wait_for 100 "namespace 2 still on the host 10 s after its bdev was deleted" no_ns 2
ns_of 1 || fail "namespace 1 went with namespace 2"
step "Malloc1 deleted by RPC: namespace 2 removed on the host, namespace 1 stays"
dmesg | grep -iE "nvme0: (rescan|.*async event|.*namespace)" | tail -5 | sed 's/^/hil: kernel: /' || true
disconnect
sed 's/^/hil:   /' /tmp/tgt.log | grep -v "listening on" || true

kill -TERM $tgt
rc=0
wait $tgt || rc=$?
[ $rc = 0 ] || fail "pollux-tgt exited with status $rc after SIGTERM"
step "pollux-tgt ended (exit status 0)"
echo "hil: PASS"
