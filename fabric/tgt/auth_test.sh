#!/usr/bin/env bash
# pollux-tgt with NVMe in-band authentication (DH-HMAC-CHAP) as a user sets it up: keys made by
# nvme-cli's gen-dhchap-key, kept in 0600 files named by SPDK's keyring_file_add_key, a
# subsystem host with dhchap_key and dhchap_ctrlr_key, nvmf_set_config's digests and DH
# groups; pollux-perf --dhchap-key FILE --dhchap-ctrlr-key SECRET does verified I/O; a wrong
# host key, a wrong controller key, no key, and a key file others may read are refused with the
# reason, and the target's log names the failure but holds no key; nvmf_get_subsystems and
# keyring_get_keys show names only; a host added by RPC with an inline secret; save_config
# starts the same target again.
set -euo pipefail
tgt=$1 perf=$2 rpc=$3
dir=${TEST_TMPDIR:-$(mktemp -d)}
run=$(mktemp -d /tmp/pollux-tgt-auth.XXXXXX)
sock=$run/rpc.sock
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$run"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- target stderr"
  cat "$dir/tgt.err" 2>/dev/null || true
  exit 1
}
command -v nvme >/dev/null || fail "nvme-cli is not installed (tools/setup.sh installs it)"
nqn=nqn.2026-11.io.pollux:secure host=nqn.2026-11.io.pollux:host-a host2=nqn.2026-11.io.pollux:host-b
umask 077
nvme gen-dhchap-key --hmac=1 --nqn=$host >"$run/host.key"
nvme gen-dhchap-key --hmac=3 --nqn=$nqn >"$run/ctrl.key"
nvme gen-dhchap-key --hmac=0 -l 48 --nqn=$host2 >"$run/other.key"
host_key=$(cat "$run/host.key") ctrl_key=$(cat "$run/ctrl.key") other_key=$(cat "$run/other.key")
# The base64 of each key: none may appear in any log or output below.
secrets=("${host_key:10:40}" "${ctrl_key:10:40}" "${other_key:10:40}")

cat >"$dir/tgt.json" <<JSON
{"subsystems": [
  {"subsystem": "keyring", "config": [
    {"method": "keyring_file_add_key", "params": {"name": "key0", "path": "$run/host.key"}},
    {"method": "keyring_file_add_key", "params": {"name": "ckey0", "path": "$run/ctrl.key"}}]},
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 65536, "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_set_config", "params": {"dhchap_digests": ["sha256", "sha384", "sha512"],
                                             "dhchap_dhgroups": ["null", "ffdhe2048"]}},
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "num_shared_buffers": 64}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn"}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_host", "params": {"nqn": "$nqn", "host": "$host",
                                                    "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0"}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"}}}]}]}
JSON

start() {
  : >"$dir/tgt.out"
  : >"$dir/tgt.err"
  "$tgt" -m 0x3 --json "$1" --rpc "$sock" >>"$dir/tgt.out" 2>>"$dir/tgt.err" &
  pid=$!
  for _ in $(seq 200); do
    grep -q "pollux-tgt: ready" "$dir/tgt.out" && break
    kill -0 "$pid" 2>/dev/null || fail "pollux-tgt exited before it was ready"
    sleep 0.05
  done
  port=$(sed -n 's/^nvmf\/tcp: listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$dir/tgt.err" | head -1)
  [ -n "$port" ] || fail "no listening line"
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || fail "pollux-tgt exited with status $? after SIGTERM"
  pid=
}
r() { "$rpc" -s "$sock" "$@"; }
json_check() {
  python3 - "$1" "$2" <<'PY' || fail "check '$2' on $(head -c 600 "$1")"
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
trid="trtype:tcp adrfam:ipv4 traddr:127.0.0.1 subnqn:$nqn"
# perf HOSTNQN ARGS...: pollux-perf --verify for 0.5 s; its output in perf.out, its status returned.
perf() {
  local hn=$1
  shift
  local rc=0
  timeout 60 "$perf" -r "$trid trsvcid:$port" --hostnqn "$hn" -w randrw -M 50 --verify -q 8 \
    -o 4096 -t 0.5 -c 0x1 "$@" >"$dir/perf.out" 2>&1 || rc=$?
  return $rc
}
ok_perf() {
  perf "$@" || { cat "$dir/perf.out"; fail "pollux-perf $*"; }
  grep -q "verify: [1-9][0-9]* reads checked, 0 failures" "$dir/perf.out" ||
    { cat "$dir/perf.out"; fail "pollux-perf $*: verify"; }
}
# refused STATUS TEXT ARGS...: pollux-perf exits with STATUS and says TEXT.
refused() {
  local want=$1 text=$2
  shift 2
  local rc=0
  perf "$@" || rc=$?
  [ $rc -eq "$want" ] || { cat "$dir/perf.out"; fail "pollux-perf $* exited $rc, not $want"; }
  grep -qF -- "$text" "$dir/perf.out" || { cat "$dir/perf.out"; fail "no '$text' from pollux-perf $*"; }
}

start "$dir/tgt.json"
echo "target on port $port"
ok_perf $host --dhchap-key "$run/host.key" --dhchap-ctrlr-key "$ctrl_key"
ok_perf $host --dhchap-key "$host_key" --dhchap-digests sha384 --dhchap-dhgroups ffdhe2048
echo "ok: verified I/O authenticated both ways (key file and inline secret), and with SHA-384 + ffdhe2048"

refused 1 "AUTH_Failure1: authentication failed" $host --dhchap-key "$other_key"
grep -q "host $host on $nqn, queue 0: the host's response is wrong" "$dir/tgt.err" ||
  fail "the target did not log the wrong response"
refused 1 "does not hold the key given as dhchap_ctrlr_key" $host --dhchap-key "$host_key" \
  --dhchap-ctrlr-key "$other_key"
refused 1 "requires in-band authentication" $host
cp "$run/host.key" "$run/open.key"
chmod 0644 "$run/open.key"
refused 2 "has mode 0644" $host --dhchap-key "$run/open.key"
refused 2 "DH-HMAC-CHAP secret" $host --dhchap-key "DHHC-1:01:bm90IGEga2V5:"
echo "ok: a wrong host key, a wrong controller key, no key, an open key file, a bad secret refused"

r nvmf_get_subsystems >"$dir/subs.json"
json_check "$dir/subs.json" "j[1]['hosts'] == [{'nqn': '$host', 'dhchap_key': 'key0', 'dhchap_ctrlr_key': 'ckey0'}]"
r keyring_get_keys >"$dir/keys.json"
json_check "$dir/keys.json" "sorted(k['name'] for k in j) == ['ckey0', 'key0'] and all(k['path'].startswith('$run/') for k in j)"
r nvmf_get_stats >"$dir/stats.json"
json_check "$dir/stats.json" "sum(g['authentications'] for g in j['poll_groups']) >= 4 and sum(g['authentication_failures'] for g in j['poll_groups']) >= 2"
# A second host, its secret given inline by RPC (Pollux takes both; SPDK only names).
r nvmf_subsystem_add_host $nqn $host2 --dhchap-key "$other_key" >/dev/null || fail "add_host inline"
ok_perf $host2 --dhchap-key "$other_key"
r nvmf_get_subsystems $nqn >"$dir/subs.json"
json_check "$dir/subs.json" "{'nqn': '$host2', 'dhchap_key': '(given inline)'} in j[0]['hosts']"
rc=0
r nvmf_subsystem_add_host $nqn nqn.2026-11.io.pollux:h3 --dhchap-key nokey 2>"$dir/rpc.err" || rc=$?
[ $rc -eq 1 ] && grep -q "no keyring key named 'nokey'" "$dir/rpc.err" || fail "unknown key: $(cat "$dir/rpc.err")"
echo "ok: names, never keys, in nvmf_get_subsystems and keyring_get_keys; a host added with an inline secret"

r save_config >"$dir/saved.json"
json_check "$dir/saved.json" "j['subsystems'][0]['subsystem'] == 'keyring' and len(j['subsystems'][0]['config']) == 2"
stop
start "$dir/saved.json"
ok_perf $host --dhchap-key "$run/host.key" --dhchap-ctrlr-key "$ctrl_key"
ok_perf $host2 --dhchap-key "$other_key"
echo "ok: save_config starts the same target, keys and all"
stop

for s in "${secrets[@]}"; do
  if grep -qF -- "$s" "$dir/tgt.err" "$dir/tgt.out" "$dir/perf.out" "$dir/subs.json" "$dir/keys.json"; then
    fail "a key appears in a log or an answer"
  fi
done
echo "ok: no key in the logs"
echo "PASS"
