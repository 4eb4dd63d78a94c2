#!/bin/sh
# In the guest (Linux 6.12: Debian builds 6.1 without NVMe in-band authentication): DH-HMAC-CHAP
# between Pollux and the Linux kernel, both ways. Keys come from nvme-cli's gen-dhchap-key.
#   A. pollux-tgt (keys in 0600 files named by keyring_file_add_key; nvmf_set_config allows
#      null and ffdhe2048) and the kernel's host: nvme connect --dhchap-secret (the admin queue
#      and both I/O queues authenticate; the kernel logs the hash and group), 4 MiB written
#      with O_DIRECT; nvme connect --dhchap-secret --dhchap-ctrl-secret (the kernel logs the
#      controller authenticated), the 4 MiB read back equal; a wrong host key (pollux-tgt
#      refuses it and logs why, without the key), a wrong controller key (the kernel refuses
#      the controller), no key: each connect fails.
#   B. The kernel's nvmet (configfs: hosts/<nqn>/dhchap_key, dhchap_ctrl_key, dhchap_hash,
#      dhchap_dhgroup) and Pollux's host: pollux-perf --dhchap-key, and with
#      --dhchap-ctrlr-key, verified I/O; a wrong key refused by nvmet (AUTH_Failure1), a wrong
#      controller key refused by pollux-perf; pollux-bdevperf -w reset with bdev_nvme's
#      dhchap_key from the keyring: every reset connects and authenticates every queue again.
set -euo pipefail
echo
on_fail() {
  echo "hil: pollux-tgt's output:"
  sed 's/^/hil:   /' /tmp/tgt.log 2>/dev/null || true
  echo "hil: kernel log (nvme, last 25 lines):"
  dmesg | grep -E 'nvme' | tail -25 | sed 's/^/hil:   /'
}
. /hil/bin/hil_lib.sh
ip link set lo up || fail "ip link set lo up"
for m in crc32c_generic nvme_tcp; do
  [ -d "/sys/module/$m" ] || run "modprobe $m" modprobe "$m"
done
mkdir -p /tmp/keys /etc/nvme
chmod 0700 /tmp/keys
umask 077

# ------------------------------------------------------------- A: Pollux's target ---
nqn=nqn.2026-11.io.pollux:secure host=nqn.2026-11.io.pollux:linux-host
hostid=$(cat /proc/sys/kernel/random/uuid)
nvme gen-dhchap-key --hmac=1 --nqn=$host >/tmp/keys/host.key
nvme gen-dhchap-key --hmac=2 --nqn=$nqn >/tmp/keys/ctrl.key
nvme gen-dhchap-key --hmac=1 --nqn=$host >/tmp/keys/bad.key
hostkey=$(cat /tmp/keys/host.key) ctrlkey=$(cat /tmp/keys/ctrl.key) badkey=$(cat /tmp/keys/bad.key)
cat >/tmp/tgt.json <<JSON
{"subsystems": [
  {"subsystem": "keyring", "config": [
    {"method": "keyring_file_add_key", "params": {"name": "key0", "path": "/tmp/keys/host.key"}},
    {"method": "keyring_file_add_key", "params": {"name": "ckey0", "path": "/tmp/keys/ctrl.key"}}]},
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 32768, "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_set_config", "params": {"dhchap_dhgroups": ["null", "ffdhe2048"]}},
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "num_shared_buffers": 64}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "serial_number": "POLLUXHILAUTH"}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_host", "params": {"nqn": "$nqn", "host": "$host",
                                                    "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0"}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"}}}]}]}
JSON
step "A. pollux-tgt: $nqn admits $host by DH-HMAC-CHAP (keyring key0, ckey0)"
pollux-tgt -m 0x1 --json /tmp/tgt.json --rpc /tmp/tgt.sock >/tmp/tgt.log 2>&1 &
tgt=$!
tgt_ready() {
  kill -0 $tgt 2>/dev/null || fail "pollux-tgt exited"
  grep -q "pollux-tgt: ready" /tmp/tgt.log
}
wait_for 200 "pollux-tgt not ready after 20 s" tgt_ready

ctrl=
find_ctrl() {
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/subsysnqn" ] || continue
    if [ "$(cat "$c/subsysnqn")" = "$nqn" ] && [ "$(cat "$c/state")" = live ]; then
      ctrl=${c##*/}
      return 0
    fi
  done
  return 1
}
ns_dev() {
  for d in /sys/class/nvme/"$ctrl"/nvme*n1 /sys/class/nvme-subsystem/nvme-subsys*/nvme*n1; do
    [ -e "$d" ] && [ -b "/dev/${d##*/}" ] && { dev=/dev/${d##*/}; return 0; }
  done
  return 1
}
kconnect() {
  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $nqn --hostnqn=$host --hostid="$hostid" "$@"
}
dmesg -c >/dev/null
run "nvme connect --dhchap-secret" kconnect --dhchap-secret="$hostkey"
wait_for 50 "no live controller for $nqn" find_ctrl
wait_for 100 "no namespace on $ctrl" ns_dev
auth=$(dmesg | grep -E "$ctrl: qid 0: authenticated with hash" | tail -1 | sed 's/.*qid 0: //')
[ -n "$auth" ] || fail "the kernel did not log the admin queue's authentication"
step "nvme connect --dhchap-secret: $ctrl live, $dev; the kernel: $auth"
ioq=$(cat /sys/class/nvme/$ctrl/queue_count 2>/dev/null || echo "?")
$dd if=/dev/urandom of=/tmp/pattern bs=1M count=4 2>/dev/null
run "write 4 MiB" $dd if=/tmp/pattern of="$dev" bs=1M oflag=direct
run "nvme disconnect" nvme disconnect -n $nqn
dmesg -c >/dev/null
run "nvme connect --dhchap-ctrl-secret" kconnect --dhchap-secret="$hostkey" --dhchap-ctrl-secret="$ctrlkey"
wait_for 50 "no live controller for $nqn (bidirectional)" find_ctrl
wait_for 100 "no namespace on $ctrl" ns_dev
dmesg | grep -q "$ctrl: qid 0: controller authenticated" ||
  fail "the kernel did not log the controller authenticated"
run "read 4 MiB back" $dd if="$dev" of=/tmp/back bs=1M count=4 iflag=direct
run "compare" $cmp /tmp/pattern /tmp/back
step "nvme connect --dhchap-secret --dhchap-ctrl-secret: the controller authenticated too, 4 MiB read back equal"
run "nvme disconnect" nvme disconnect -n $nqn
pollux-rpc-call /tmp/tgt.sock nvmf_get_stats >/tmp/stats.json || fail "nvmf_get_stats"
grep -o '"authentications": *[0-9]*' /tmp/stats.json | sed 's/^/hil:   pollux-tgt /'

must_fail "nvme connect with a wrong host key" kconnect --dhchap-secret="$badkey"
tail -1 /tmp/run.log | sed 's/^/hil:   nvme connect: /'
grep -q "host $host on $nqn, queue 0: the host's response is wrong" /tmp/tgt.log ||
  fail "pollux-tgt did not log the wrong response"
must_fail "nvme connect with a wrong controller key" kconnect --dhchap-secret="$hostkey" \
  --dhchap-ctrl-secret="$badkey"
dmesg | grep -q "controller authentication failed" || fail "the kernel did not refuse the controller"
must_fail "nvme connect without a key" kconnect
for k in "$hostkey" "$ctrlkey" "$badkey"; do
  if grep -qF "$(echo "$k" | cut -c11-50)" /tmp/tgt.log; then fail "a key in pollux-tgt's log"; fi
done
step "refused: a wrong host key (by pollux-tgt, logged without the key), a wrong controller key (by the kernel), no key"
kill -TERM $tgt
wait $tgt || fail "pollux-tgt exited with status $? on SIGTERM"

# ----------------------------------------------------------- B: the kernel's target ---
vnqn=nqn.2026-11.io.pollux:nvmet phost=nqn.2026-11.io.pollux:pollux-host
export NVMET_NQN=$vnqn NVMET_PORT=4421 NVMET_SIZE_MB=32
nvmet_tcp.sh setup >/tmp/run.log 2>&1 || { sed 's/^/hil:   /' /tmp/run.log; fail "nvmet_tcp.sh setup"; }
cfs=/sys/kernel/config/nvmet
nvme gen-dhchap-key --hmac=3 --nqn=$phost >/tmp/keys/phost.key
nvme gen-dhchap-key --hmac=0 -l 48 --nqn=$vnqn >/tmp/keys/pctrl.key
nvme gen-dhchap-key --hmac=3 --nqn=$phost >/tmp/keys/pbad.key
pkey=$(cat /tmp/keys/phost.key) pckey=$(cat /tmp/keys/pctrl.key) pbad=$(cat /tmp/keys/pbad.key)
echo 0 >$cfs/subsystems/$vnqn/attr_allow_any_host
mkdir $cfs/hosts/$phost
echo "$pkey" >$cfs/hosts/$phost/dhchap_key
echo "$pckey" >$cfs/hosts/$phost/dhchap_ctrl_key
echo "hmac(sha384)" >$cfs/hosts/$phost/dhchap_hash
echo ffdhe2048 >$cfs/hosts/$phost/dhchap_dhgroup
ln -s $cfs/hosts/$phost $cfs/subsystems/$vnqn/allowed_hosts/$phost
step "B. nvmet: $vnqn admits $phost by DH-HMAC-CHAP (hmac(sha384), ffdhe2048)"
trid="trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:4421 subnqn:$vnqn"
perf() {
  pollux-perf -r "$trid" --hostnqn $phost -w randrw -M 50 --verify -q 8 -o 4096 -t 1 -c 0x1 "$@"
}
run "pollux-perf --dhchap-key" perf --dhchap-key /tmp/keys/phost.key
grep -q ", 0 failures" /tmp/run.log || { sed 's/^/hil:   /' /tmp/run.log; fail "verify"; }
step "pollux-perf --dhchap-key FILE: $(grep -o 'verify: .*' /tmp/run.log)"
run "pollux-perf --dhchap-ctrlr-key" perf --dhchap-key "$pkey" --dhchap-ctrlr-key "$pckey"
grep -q ", 0 failures" /tmp/run.log || { sed 's/^/hil:   /' /tmp/run.log; fail "verify"; }
step "pollux-perf --dhchap-key --dhchap-ctrlr-key: $(grep -o 'verify: .*' /tmp/run.log)"
dmesg -c >/dev/null
must_fail "pollux-perf with a wrong key" perf --dhchap-key "$pbad"
sed -n 's/.*(DH-HMAC-CHAP): /hil:   pollux-perf: /p' /tmp/run.log
# nvmet answers AUTH_Failure1 and at once ends the association (a fatal controller error): its
# teardown can close the connection before that answer leaves, so the host sees either.
grep -qE "AUTH_Failure1: authentication failed|receiving DH-HMAC-CHAP_Success1: the connection broke" \
  /tmp/run.log || { sed 's/^/hil:   /' /tmp/run.log; fail "pollux-perf: no reason for the refusal"; }
dmesg | grep -q "nvmet: ctrl [0-9]* qid 0 host response mismatch" ||
  fail "nvmet did not refuse the wrong key"
must_fail "pollux-perf with a wrong controller key" perf --dhchap-key "$pkey" --dhchap-ctrlr-key "$pbad"
sed -n 's/.*(DH-HMAC-CHAP): /hil:   pollux-perf: /p' /tmp/run.log
grep -q "does not hold the key given as dhchap_ctrlr_key" /tmp/run.log ||
  { sed 's/^/hil:   /' /tmp/run.log; fail "nvmet's answer to a wrong controller key accepted"; }
must_fail "pollux-perf without a key" perf
grep -q "requires in-band authentication" /tmp/run.log || fail "no reason without a key"
step "refused: a wrong key (by nvmet), a wrong controller key (by Pollux), no key"

cat >/tmp/bdev.json <<JSON
{"subsystems": [
  {"subsystem": "keyring", "config": [
    {"method": "keyring_file_add_key", "params": {"name": "pkey", "path": "/tmp/keys/phost.key"}},
    {"method": "keyring_file_add_key", "params": {"name": "pckey", "path": "/tmp/keys/pctrl.key"}}]},
  {"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "Nvme0", "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1",
              "trsvcid": "4421", "subnqn": "$vnqn", "hostnqn": "$phost",
              "dhchap_key": "pkey", "dhchap_ctrlr_key": "pckey"}}]}]}
JSON
dmesg -c >/dev/null
rc=0
pollux-bdevperf --json /tmp/bdev.json -w reset -o 65536 -q 8 -t 2 --reset-period 0.5 -m 0x1 \
  --summary /tmp/summary.json >/tmp/bdevperf.log 2>&1 || rc=$?
[ $rc = 0 ] || { sed 's/^/hil:   /' /tmp/bdevperf.log; fail "pollux-bdevperf -w reset (exit status $rc)"; }
grep -q '"verify_failures": 0' /tmp/summary.json || fail "pollux-bdevperf: verify failures"
if grep -qE '"errors": [1-9]' /tmp/summary.json; then fail "pollux-bdevperf: I/O errors"; fi
resets=$(grep -oE '"resets": [0-9]+' /tmp/summary.json | head -1)
case $resets in *': '[1-9]*) ;; *) fail "pollux-bdevperf -w reset: no reset done" ;; esac
# nvmet logs each association it makes, "... with DH-HMAC-CHAP" when the host authenticated.
assocs=$(dmesg | grep -c "for NQN $phost.* with DH-HMAC-CHAP" || true)
[ "$assocs" -gt "${resets#*: }" ] ||
  { dmesg | grep nvmet | tail -10 | sed 's/^/hil:   /'; fail "$assocs authenticated associations for $resets"; }
step "pollux-bdevperf -w reset (bdev_nvme, keyring keys): $resets, $assocs associations made with DH-HMAC-CHAP (the attach and every reset), 0 errors"
nvmet_tcp.sh teardown >/dev/null 2>&1 || true
echo "hil: PASS"
