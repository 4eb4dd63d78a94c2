#!/bin/sh
# In the guest: the Linux kernel's NVMe-oF target (nvmet) over TCP, set up through configfs,
# for NVMe/TCP hosts to be tested against (the kernel's own through nvme-cli, Pollux's) — or
# over RDMA (NVMET_TRTYPE=rdma: nvmet-rdma on the soft-RoCE device rxe.sh set up).
#   nvmet_tcp.sh setup      load nvmet, nvmet-tcp, null_blk, crc32c; a RAM-backed namespace
#                           (null_blk, memory_backed=1: it stores what is written); the
#                           subsystem (allow_any_host) with it as namespace 1; a TCP port;
#                           the port listening. Idempotent: what is there already and as
#                           asked is kept; what is there but different is an error.
#   nvmet_tcp.sh teardown   removes all that (what is absent is skipped; the subsystem, while
#                           another port still serves it, stays); modules stay loaded.
#   nvmet_tcp.sh status     the configfs objects and the listening socket.
#   nvmet_tcp.sh icresp [DGST]
#                           sends an ICReq (DGST: 0-3, bit 0 header digest, bit 1 data digest;
#                           default 3) to the port and prints the target's ICResp: PFV, CPDA,
#                           the digests it grants, MAXH2CDATA (the kernel logs none of these).
# Settings (environment, defaults):
#   NVMET_NQN=nqn.2026-11.io.pollux:nvmet  NVMET_ADDR=127.0.0.1  NVMET_PORT=4420
#   NVMET_PORT_ID=1  NVMET_SIZE_MB=64  NVMET_BLOCK_SIZE=512
#   NVMET_INLINE_DATA_SIZE  (the port's in-capsule data size in bytes; unset: the transport's
#                            default, 4 pages for nvmet-tcp; the host sees it as IOCCSZ)
#   NVMET_TRTYPE=tcp        or rdma (the address must be the rxe device's: rxe.sh setup;
#                            "listening" is then an RDMA CM id in state LISTEN, `rdma resource`)
# No header/data digest setting on the target: Linux 6.1's nvmet-tcp grants what the host's
# ICReq asks (nvme connect -g / -G), which is why crc32c is loaded.
# Every line it prints starts with "hil: nvmet:"; a failure prints what configfs said, the
# object's attributes and the kernel's last messages, and exits 1.
set -euo pipefail

nqn=${NVMET_NQN:-nqn.2026-11.io.pollux:nvmet}
addr=${NVMET_ADDR:-127.0.0.1}
port=${NVMET_PORT:-4420}
port_id=${NVMET_PORT_ID:-1}
size_mb=${NVMET_SIZE_MB:-64}
bs=${NVMET_BLOCK_SIZE:-512}
inline=${NVMET_INLINE_DATA_SIZE:-}
trtype=${NVMET_TRTYPE:-tcp}
cfs=/sys/kernel/config
nullb=$cfs/nullb/pollux-nvmet
subsys=$cfs/nvmet/subsystems/$nqn
ns=$subsys/namespaces/1
portdir=$cfs/nvmet/ports/$port_id

say() { echo "hil: nvmet: $*"; }

# show DIR: every readable attribute of a configfs object, one "name=value" a line.
show() {
  [ -d "$1" ] || { say "  ($1 does not exist)"; return 0; }
  for f in "$1"/*; do
    [ -f "$f" ] && [ -r "$f" ] || continue
    say "  $(basename "$f")=$(head -c 200 "$f" 2>/dev/null | head -1 || true)"
  done
}

# die MESSAGE [DIR...]: the failure, the objects involved, the kernel's last words; exit 1.
die() {
  msg=$1
  shift
  say "FAILED: $msg"
  for d in "$@"; do say "$d:"; show "$d"; done
  say "kernel log (nvmet, null_blk, nvme: the last 15 lines):"
  dmesg | grep -E 'nvme|null_blk|configfs|rdma|rxe' | tail -15 | sed 's/^/hil: nvmet:   /' || true
  exit 1
}

# put FILE VALUE [DIR...]: the attribute holds VALUE afterwards; written only if it differs.
put() {
  cur=$(cat "$1" 2>/dev/null || true)
  [ "$cur" = "$2" ] && return 0
  # echo, not printf: busybox's printf stays silent when the write is refused.
  if ! err=$( (echo "$2" >"$1") 2>&1 ); then
    f=$1 v=$2
    shift 2
    die "configfs refused '$v' for $f (it holds '$cur'): ${err:-no message}" "$@"
  fi
}

# expect FILE VALUE DIR: for an object in use (its attributes are read-only then).
expect() {
  cur=$(cat "$1" 2>/dev/null || true)
  [ "$cur" = "$2" ] ||
    die "$1 is '$cur', not '$2', and cannot change while in use: nvmet_tcp.sh teardown first" "$3"
}

# wait_for (hil_lib.sh, packed with every guest), failing through die.
. /hil/bin/hil_lib.sh
wait_fail=die

# /proc/net/tcp: local address 0100007F:1144 (127.0.0.1:4420, hex, address little-endian),
# state 0A (LISTEN).
hexaddr() {
  IFS=. read -r a b c d <<EOF
$addr
EOF
  printf '%02X%02X%02X%02X:%04X' "$d" "$c" "$b" "$a" "$port"
}
listening() {
  if [ "$trtype" = rdma ]; then  # a listening RDMA CM id on the address (iproute2's rdma)
    rdma resource show cm_id 2>/dev/null | grep "state LISTEN" | grep -q "src-addr $addr:$port "
    return
  fi
  awk -v a="$(hexaddr)" '$2 == a && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp
}

nullb_dev() {  # sets dev: the null_blk's block device, once it is there
  for dev in "/dev/${nullb##*/}" "/dev/nullb$(cat "$nullb/index")"; do
    [ -b "$dev" ] && return 0
  done
  return 1
}

load() {
  for m in "$@"; do
    [ -d "/sys/module/$m" ] && continue
    out=$(modprobe "$m" 2>&1) || die "modprobe $m: ${out:-failed} (is it in tools/guest/modules.txt?)"
  done
}

setup() {
  # null_blk: no device of its own (nr_devices=0); ours comes from configfs.
  if [ ! -d /sys/module/null_blk ]; then
    out=$(modprobe null_blk nr_devices=0 2>&1) || die "modprobe null_blk: ${out:-failed}"
  fi
  case $trtype in
    tcp) load crc32c_generic configfs nvmet nvmet_tcp ;;
    rdma) load configfs nvmet nvmet_rdma ;;
    *) die "NVMET_TRTYPE '$trtype': tcp or rdma" ;;
  esac
  grep -q " $cfs configfs " /proc/mounts || mount -t configfs none "$cfs" ||
    die "mount configfs on $cfs"
  ip link set lo up || die "ip link set lo up"

  # The namespace's backing store: RAM, NVMET_SIZE_MB MiB (allocated as written).
  [ -d "$nullb" ] || mkdir "$nullb" || die "mkdir $nullb"
  if [ "$(cat "$nullb/power")" = 1 ]; then
    expect "$nullb/size" "$size_mb" "$nullb"
    expect "$nullb/blocksize" "$bs" "$nullb"
    expect "$nullb/memory_backed" 1 "$nullb"
  else
    put "$nullb/size" "$size_mb" "$nullb"
    put "$nullb/blocksize" "$bs" "$nullb"
    put "$nullb/memory_backed" 1 "$nullb"
    put "$nullb/power" 1 "$nullb"
  fi
  # Its disk is named after the configfs object (Linux 6.1), nullbINDEX on older kernels.
  wait_for 50 "no block device for $nullb (/dev/${nullb##*/} or nullb$(cat "$nullb/index"))" nullb_dev

  # The subsystem and its namespace 1.
  [ -d "$subsys" ] || mkdir "$subsys" || die "mkdir $subsys (is nvmet loaded?)"
  put "$subsys/attr_allow_any_host" 1 "$subsys"
  [ -d "$ns" ] || mkdir "$ns" || die "mkdir $ns" "$subsys"
  if [ "$(cat "$ns/enable")" = 1 ]; then
    expect "$ns/device_path" "$dev" "$ns"
  else
    put "$ns/device_path" "$dev" "$ns"
    put "$ns/enable" 1 "$ns"
  fi

  # The port; linking the subsystem to it enables it (nvmet-tcp starts listening).
  [ -d "$portdir" ] || mkdir "$portdir" || die "mkdir $portdir"
  if [ -n "$(ls "$portdir/subsystems")" ]; then  # enabled: attributes are read-only
    check=expect
  else
    check=put
  fi
  $check "$portdir/addr_trtype" "$trtype" "$portdir"
  $check "$portdir/addr_adrfam" ipv4 "$portdir"
  $check "$portdir/addr_traddr" "$addr" "$portdir"
  $check "$portdir/addr_trsvcid" "$port" "$portdir"
  [ -z "$inline" ] || $check "$portdir/param_inline_data_size" "$inline" "$portdir"
  if [ ! -L "$portdir/subsystems/$nqn" ]; then
    out=$(ln -s "$subsys" "$portdir/subsystems/$nqn" 2>&1) ||
      die "linking $nqn to port $port_id (enables it): ${out:-failed}" "$portdir"
  fi
  wait_for 50 "nothing listens on $addr:$port after the port was enabled" listening

  say "subsystem $nqn (allow_any_host), namespace 1 = $dev" \
    "($size_mb MiB, $bs-byte blocks, null_blk memory_backed)"
  say "port $port_id: $trtype ipv4 $addr:$port listening, in-capsule data up to" \
    "$(cat "$portdir/param_inline_data_size") bytes (param_inline_data_size)"
}

teardown() {
  if [ -L "$portdir/subsystems/$nqn" ]; then
    rm "$portdir/subsystems/$nqn" || die "unlinking $nqn from port $port_id" "$portdir"
  fi
  if [ -d "$portdir" ] && [ -z "$(ls "$portdir/subsystems")" ]; then
    rmdir "$portdir" || die "rmdir $portdir" "$portdir"
  fi
  if listening; then die "$addr:$port still listening after port $port_id was removed"; fi
  # The subsystem may still be served on another port (NVMET_PORT_ID): then it stays.
  others=$(cd "$cfs/nvmet/ports" 2>/dev/null && ls -d -- */subsystems/"$nqn" 2>/dev/null || true)
  if [ -n "$others" ]; then
    say "port $port_id removed; $nqn still served on port(s) $(echo "$others" | cut -d/ -f1 | tr '\n' ' ')- kept"
    return 0
  fi
  if [ -d "$ns" ]; then
    put "$ns/enable" 0 "$ns"
    rmdir "$ns" || die "rmdir $ns" "$ns"
  fi
  if [ -d "$subsys" ]; then
    rmdir "$subsys" || die "rmdir $subsys (still linked to a port?)" "$subsys"
  fi
  if [ -d "$nullb" ]; then
    put "$nullb/power" 0 "$nullb"
    rmdir "$nullb" || die "rmdir $nullb" "$nullb"
  fi
  say "torn down ($nqn, port $port_id, $nullb)"
}

status() {
  for d in "$nullb" "$subsys" "$ns" "$portdir"; do say "$d:"; show "$d"; done
  [ -d "$portdir/subsystems" ] && say "port $port_id serves: $(ls "$portdir/subsystems")"
  if listening; then say "$addr:$port: listening"; else say "$addr:$port: not listening"; fi
}

# icresp [DGST]: one ICReq (NVMe/TCP 3.6.2.2: 128 bytes; PDU type 0, HLEN 128, PLEN 128,
# PFV 0, HPDA 0, DGST, MAXR2T 0) on a new connection; the ICResp's fields. Our half of the
# connection stays open until the 128-byte answer is in (nvmet-tcp drops a queue whose peer
# closed, even one whose ICReq it has not answered yet); then the target closes its half too
# and nc ends.
icresp() {
  dgst=${1:-3}
  out=/tmp/nvmet-icresp.$$
  : >"$out"
  { printf '\000\000\200\000\200\000\000\000\000\000\000'; printf "\\$(printf %03o "$dgst")"
    head -c 116 /dev/zero
    i=0
    while [ "$(wc -c <"$out")" -lt 128 ] && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
  } | nc "$addr" "$port" >"$out" || die "nc $addr $port: no connection"
  [ "$(wc -c <"$out")" -ge 128 ] ||
    die "the target answered $(wc -c <"$out") bytes to an ICReq (DGST $dgst), not a 128-byte ICResp"
  b() { od -An -tu1 -j "$1" -N 1 "$out" | tr -d ' '; }
  [ "$(b 0)" = 1 ] || die "PDU type $(b 0) in answer to an ICReq (ICResp is 1)"
  pfv=$(od -An -tu2 -j 8 -N 2 "$out" | tr -d ' ')
  maxh2c=$(od -An -tu4 -j 12 -N 4 "$out" | tr -d ' ')
  g=$(b 11)
  say "ICResp to ICReq(DGST $dgst): PFV $pfv, CPDA $(b 10)," \
    "header digest $([ $((g & 1)) = 1 ] && echo on || echo off)," \
    "data digest $([ $((g & 2)) = 2 ] && echo on || echo off)," \
    "MAXH2CDATA $maxh2c bytes ($((maxh2c / 1024)) KiB)"
  rm -f "$out"
}

case ${1:-} in
  setup) setup ;;
  teardown) teardown ;;
  status) status ;;
  icresp) shift; icresp "$@" ;;
  *) echo "usage: nvmet_tcp.sh setup|teardown|status|icresp [DGST]" >&2; exit 2 ;;
esac
