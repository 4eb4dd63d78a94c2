#!/bin/sh
# In the guest: the baseline for NVMe/TCP interoperability — the Linux kernel's target
# (nvmet_tcp.sh: null_blk RAM namespace, 127.0.0.1:4420) and the kernel's own NVMe/TCP host
# through nvme-cli, before Pollux's host is measured against the same target:
#   - the target's ICResp on the wire (CPDA, digests granted, MAXH2CDATA: no log shows them);
#   - nvme discover lists the subsystem; nvme connect makes a namespace of the right size;
#   - what a host sees (Identify Controller: IOCCSZ/ICDOFF, MDTS, SGLs, subsystem NQN; the
#     queues; the kernel's log);
#   - the data: a random 64 MiB pattern A written over the whole namespace (the first 4 MiB
#     in 4 KiB writes, in-capsule; the rest in 1 MiB writes, R2T and H2CData), O_DIRECT;
#     disconnect; connect again with header and data digests, read everything back (O_DIRECT)
#     and compare, write pattern B (A with its halves swapped) over it; disconnect; connect
#     without digests, read back and compare with B. Each read comes over a new connection
#     and a new controller, from the target's RAM: not from the host's page cache. Then one
#     block changed on the target's null_blk behind nvmet's back: the host reads the change
#     and the comparison names its LBA (the check can fail, and does where it should);
#   - nvme disconnect, teardown (twice: it is idempotent, so is setup).
set -euo pipefail
echo  # ends the firmware's escape sequences' line: the first "hil:" line starts a line
nqn=nqn.2026-11.io.pollux:nvmet addr=127.0.0.1 port=4420 mib=64
export NVMET_NQN=$nqn NVMET_ADDR=$addr NVMET_PORT=$port NVMET_SIZE_MB=$mib
on_fail() {
  echo "hil: kernel log (nvme, last 20 lines):"
  dmesg | grep -E 'nvme|nvmet|null_blk' | tail -20 | sed 's/^/hil:   /'
}
. /hil/bin/hil_lib.sh
require_gnu_tools

step "target: nvmet_tcp.sh setup (twice: the second finds everything in place)"
nvmet_tcp.sh setup
nvmet_tcp.sh setup >/dev/null
inline=$(cat /sys/kernel/config/nvmet/ports/1/param_inline_data_size)
tdev=$(cat "/sys/kernel/config/nvmet/subsystems/$nqn/namespaces/1/device_path")
step "the target's ICResp, without and with digests asked for"
nvmet_tcp.sh icresp 0
nvmet_tcp.sh icresp 3

step "host: nvme_tcp, nvme-cli $(nvme version | head -1 | cut -d' ' -f3)"
[ -d /sys/module/nvme_tcp ] || run "modprobe nvme_tcp" modprobe nvme_tcp
mkdir -p /etc/nvme
uuid=$(cat /proc/sys/kernel/random/uuid)
echo "nqn.2014-08.org.nvmexpress:uuid:$uuid" >/etc/nvme/hostnqn
echo "$uuid" >/etc/nvme/hostid

run "nvme discover" nvme discover -t tcp -a "$addr" -s "$port"
cp /tmp/run.log /tmp/discover.txt
# The entry for our subsystem: "name: value" lines after a "=====Discovery Log Entry" line.
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

# connect [-g -G]: a controller of our subsystem (-g -G: with header and data digests); sets
# ctrl (nvmeN) and dev (/dev/nvmeNn1).
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
  # The namespace scan runs after connect returns: poll for the (multipath head) disk.
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
# check WANT_FILE WHAT: the whole namespace, read with O_DIRECT (into tmpfs: cmp on the block
# device or a pipe is 3 to 5 times slower under TCG), equals WANT_FILE; if not, the first
# byte and LBA that differ.
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
# write FILE: FILE over the whole namespace, O_DIRECT: 4 MiB in 4 KiB writes, then
# 1 MiB writes.
write() {
  run "4 KiB writes to $dev" "$dd" if="$1" of="$dev" bs=4096 count=1024 oflag=direct
  run "1 MiB writes to $dev" "$dd" if="$1" of="$dev" bs=1M skip=4 seek=4 oflag=direct
}

connect
size=$(blockdev --getsize64 "$dev")
[ "$size" = $((mib * 1048576)) ] || fail "$dev has $size bytes, the target's namespace $((mib * 1048576))"

# What the target tells a host.
nvme id-ctrl "/dev/$ctrl" >/tmp/id-ctrl.txt || fail "nvme id-ctrl /dev/$ctrl"
f() { sed -n "s/^$1 *: *//p" /tmp/id-ctrl.txt | sed 's/ *$//'; }
ioccsz=$(f ioccsz) mdts=$(f mdts) subnqn=$(f subnqn)
q=/sys/class/nvme/$ctrl
step "Identify Controller: subnqn $subnqn, model '$(f mn)', firmware $(f fr)," \
  "version $(f ver), cntlid $(f cntlid)"
step "Identify Controller: IOCCSZ $ioccsz (16-byte units: $((ioccsz * 16 - 64)) bytes of in-capsule" \
  "data), IORCSZ $(f iorcsz), ICDOFF $(f icdoff), MDTS $mdts$([ "$mdts" = 0 ] && echo ' (no limit)')," \
  "SGLS $(f sgls), MSDBD $(f msdbd), FCATT $(f fcatt), MAXCMD $(f maxcmd), KAS $(f kas), NN $(f nn)"
step "queues: $(($(cat "$q/queue_count") - 1)) I/O queue(s) of $(($(cat "$q/sqsize") + 1))" \
  "entries, KATO $(cat "$q/kato") s"
dmesg | grep -E 'nvme|nvmet' | sed 's/^/hil: kernel: /'
[ "$subnqn" = "$nqn" ] || fail "Identify's subnqn '$subnqn' is not $nqn"
[ $((ioccsz * 16 - 64)) = "$inline" ] ||
  fail "IOCCSZ $ioccsz does not match the port's param_inline_data_size $inline"

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
# The check can fail, and reads come from the target's store: one block changed behind the
# target's back (on its null_blk, $tdev) reads back changed, and is found at its LBA.
lba=77777
run "zeroing LBA $lba on the target's $tdev" \
  "$dd" if=/dev/zero of="$tdev" bs=512 seek=$lba count=1 oflag=direct
run "reading the MiB around LBA $lba" \
  "$dd" if="$dev" of=/tmp/r bs=1M skip=$((lba / 2048)) count=1 iflag=direct
"$dd" if=/tmp/b of=/tmp/w bs=1M skip=$((lba / 2048)) count=1 2>/dev/null
byte=$({ "$cmp" /tmp/w /tmp/r 2>&1 || true; } | sed -n 's/.*differ: [a-z]* \([0-9]*\).*/\1/p')
[ -n "$byte" ] || fail "LBA $lba was zeroed on the target, the host read it unchanged"
found=$(((lba / 2048) * 2048 + (byte - 1) / 512))
[ "$found" = $lba ] || fail "LBA $lba was zeroed on the target, the comparison points at LBA $found"
step "LBA $lba zeroed on the target: the host reads the change, the comparison finds LBA $found"
disconnect

nvmet_tcp.sh teardown
nvmet_tcp.sh teardown >/dev/null
for c in /sys/class/nvme/nvme*; do
  if [ -e "$c" ] && [ "$(cat "$c/subsysnqn")" = "$nqn" ]; then
    fail "${c##*/} still connected after teardown"
  fi
done
step "done"
echo "hil: PASS"
