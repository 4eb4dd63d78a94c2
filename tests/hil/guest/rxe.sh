#!/bin/sh
# In the guest: soft-RoCE (the kernel's rxe) for the NVMe/RDMA interop tests. The guest has no
# network card: rxe runs on a dummy netdev with a guest-local address, and every packet between
# two QPs of the one device loops back inside the guest's kernel (rxe's loopback path); nothing
# leaves the VM. (rxe on `lo` itself cannot resolve a route: rdma_resolve_route says ENODEV.)
#   rxe.sh setup    loads rdma_rxe (its ICRC needs crc32_generic), ib_uverbs and rdma_ucm
#                   (libibverbs' and librdmacm's devices), dummy; RXE_ADDR/24 on dummy0, up;
#                   `rdma link add rxe0 type rxe netdev dummy0`; waits for the port to be
#                   ACTIVE and for /dev/infiniband/{uverbs0,rdma_cm}. Idempotent.
#   rxe.sh status   the link, its GIDs, the CM ids (`rdma resource show cm_id`).
# Settings: RXE_ADDR (default 10.99.0.1), RXE_DEV (rxe0).
# Lines start with "hil: rxe:"; a failure says what and prints the kernel's last rxe lines.
set -eu

addr=${RXE_ADDR:-10.99.0.1}
dev=${RXE_DEV:-rxe0}
say() { echo "hil: rxe: $*"; }
die() {
  say "FAILED: $*"
  dmesg | grep -iE 'rxe|infiniband|rdma' | tail -10 | sed 's/^/hil: rxe:   /' || true
  exit 1
}

setup() {
  for m in crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy; do
    [ -d "/sys/module/$m" ] && continue
    out=$(modprobe "$m" 2>&1) || die "modprobe $m: ${out:-failed} (is it in tools/guest/modules.txt?)"
  done
  ip link set lo up
  [ -d /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || die "ip link add dummy0"
  ip addr show dev dummy0 | grep -q "inet $addr/" || ip addr add "$addr/24" dev dummy0 ||
    die "ip addr add $addr/24 dev dummy0"
  ip link set dummy0 up || die "ip link set dummy0 up"
  if [ ! -d "/sys/class/infiniband/$dev" ]; then
    out=$(rdma link add "$dev" type rxe netdev dummy0 2>&1) || die "rdma link add $dev: $out"
  fi
  i=0
  until [ "$(cat "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null)" = "4: ACTIVE" ] &&
    [ -c /dev/infiniband/rdma_cm ] && [ -n "$(ls /dev/infiniband/ | grep uverbs)" ]; do
    i=$((i + 1))
    [ $i -le 50 ] || die "$dev port 1 not ACTIVE (or no /dev/infiniband/rdma_cm, uverbs*) after 5 s"
    sleep 0.1
  done
  say "$dev on dummy0 ($addr), port 1 ACTIVE; /dev/infiniband: $(ls /dev/infiniband | tr '\n' ' ')"
}

status() {
  rdma link show 2>&1 | sed 's/^/hil: rxe:   /'
  for g in /sys/class/infiniband/"$dev"/ports/1/gids/[0-3]; do say "  gid ${g##*/}: $(cat "$g")"; done
  rdma resource show cm_id 2>&1 | sed 's/^/hil: rxe:   /'
}

case ${1:-} in
  setup) setup ;;
  status) status ;;
  *) echo "usage: rxe.sh setup|status" >&2; exit 2 ;;
esac
