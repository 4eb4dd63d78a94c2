#!/bin/sh
# In the guest: Pollux's NVMe/RDMA host (fabric/rdma on the libibverbs provider, connections by
# librdmacm) against the Linux kernel's NVMe/RDMA target, nvmet-rdma, over soft-RoCE (rxe.sh:
# rxe0 on a dummy netdev, 10.99.0.1; nothing leaves the guest). The target is configured through
# configfs (nvmet_tcp.sh with NVMET_TRTYPE=rdma: a 32 MiB null_blk RAM namespace, port
# 10.99.0.1:4420). Then, with POLLUX_RDMA_DEVICE unset (the host takes the machine's one
# libibverbs device):
#   - pollux-nvme-check (the spec-fixed commands; Linux 6.1's documented deviations known);
#   - pollux-perf --verify, random 50/50, 1 s each, at 4 KiB (in the command capsule: the
#     target's 4 KiB inline data), 64 KiB and 128 KiB (keyed SGL: the target RDMA READs the
#     host's buffer for writes, RDMA WRITEs into it for reads), queue depths 1 and 16;
#   - pollux-bdevperf with bdev_nvme attached by JSON (trtype RDMA): -w verify, and -w reset
#     (every queue torn down and connected again through rdma_cm every 0.5 s under verified I/O).
# rxe under TCG moves a few MB/s: the figures printed are not performance figures.
set -euo pipefail
: "${HIL_KNOWN:=--known identify-namespace-beyond-nn=Linux-6.1-nvmet-answers-an-NSID-above-NN-with-zeroed-data-and-success
 --known get-log-reserved-page=Linux-6.1-nvmet-answers-Invalid-Field-not-Invalid-Log-Page
 --known read-lba-out-of-range=Linux-6.1-nvmet-with-a-block-device-fails-it-as-Internal-Error-not-LBA-Out-of-Range
 --known write-crossing-the-end=Linux-6.1-nvmet-with-a-block-device-fails-it-as-Internal-Error-not-LBA-Out-of-Range}"
echo  # ends the firmware's escape sequences' line: the first "hil:" line starts a line
addr=10.99.0.1
nqn=nqn.2026-11.io.pollux:nvmet-rdma
trid="trtype:rdma adrfam:ipv4 traddr:$addr trsvcid:4420 subnqn:$nqn"
export RXE_ADDR=$addr NVMET_TRTYPE=rdma NVMET_NQN=$nqn NVMET_ADDR=$addr NVMET_PORT=4420
export NVMET_SIZE_MB=32
t0=$(cut -d' ' -f1 /proc/uptime)
step() { echo "hil: [$(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime) s] $*"; }
fail() {
  echo "hil: FAILED: $*"
  echo "hil: kernel log (nvmet, rdma, last 15 lines):"
  dmesg | grep -E 'nvmet|null_blk|rdma|rxe' | tail -15 | sed 's/^/hil:   /'
  rxe.sh status || true
  exit 1
}

rxe.sh setup
nvmet_tcp.sh setup
pollux-setup hugepages 32
step "target ready"

if [ "${HIL_CHECK:-1}" != 0 ]; then
  echo "hil: pollux-nvme-check -r '$trid'"
  rc=0
  # shellcheck disable=SC2086 # HIL_KNOWN is a list of arguments
  pollux-nvme-check -r "$trid" ${HIL_KNOWN:-} >/tmp/check.log 2>&1 || rc=$?
  sed 's/^/hil:   /' /tmp/check.log
  [ $rc = 0 ] || fail "pollux-nvme-check (exit status $rc)"
  step "pollux-nvme-check passed"
fi

for size in 4096 65536 131072; do
  for qd in 1 16; do
    rc=0
    pollux-perf -r "$trid" -q $qd -o $size -w randrw -M 50 --verify -t 1 -c 0x1 \
      >/tmp/perf.log 2>&1 || rc=$?
    step "pollux-perf --verify, $size-byte I/O, queue depth $qd"
    grep -E "^(Attached|Total|verify)|errors|first:" /tmp/perf.log | sed 's/^/hil:   /' || true
    [ $rc = 0 ] ||
      { sed 's/^/hil:   /' /tmp/perf.log; fail "pollux-perf (exit status $rc)"; }
    grep -qE "^verify: [1-9][0-9]* reads checked, 0 failures" /tmp/perf.log ||
      { sed 's/^/hil:   /' /tmp/perf.log; fail "pollux-perf: no reads checked, or verify failures"; }
  done
done

cat >/tmp/nvmet.json <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "Nvme0", "trtype": "RDMA", "adrfam": "IPv4", "traddr": "$addr",
              "trsvcid": "4420", "subnqn": "$nqn"}}]}]}
JSON
for job in "verify -o 4096 -q 16 -t 2" "verify -o 131072 -q 4 -t 2" "reset -o 65536 -q 16 -t 3 --reset-period 0.5"; do
  set -- $job
  rc=0
  w=$1
  shift
  pollux-bdevperf --json /tmp/nvmet.json -w "$w" "$@" -m 0x1 --summary /tmp/summary.json \
    >/tmp/bdevperf.log 2>&1 || rc=$?
  step "pollux-bdevperf -w $w $*"
  grep -E "^ *(Nvme0n1|Total)" /tmp/bdevperf.log | sed 's/^/hil:   /' || true
  [ $rc = 0 ] || { sed 's/^/hil:   /' /tmp/bdevperf.log; fail "pollux-bdevperf -w $w (exit status $rc)"; }
  grep -q '"verify_failures": 0' /tmp/summary.json || fail "pollux-bdevperf -w $w: verify failures"
  if grep -qE '"errors": [1-9]' /tmp/summary.json; then fail "pollux-bdevperf -w $w: I/O errors"; fi
  if [ "$w" = reset ] && ! grep -qE '"resets": [1-9]' /tmp/summary.json; then
    fail "pollux-bdevperf -w reset: no reset done"
  fi
done
dmesg | grep -E "nvmet: creating" | tail -3 | sed 's/^/hil: kernel: /' || true

nvmet_tcp.sh teardown
step "torn down"
echo "hil: PASS"
