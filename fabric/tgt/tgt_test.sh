#!/usr/bin/env bash
# pollux-tgt end to end, as a user runs it: started from a JSON file on two reactors, Pollux's
# own host (pollux-perf --verify, with and without digests) against it over 127.0.0.1, every
# query of tools/pollux-rpc, a namespace hot-added and hot-removed by RPC, a host refused by a
# subsystem's host list, save_config restarting the same target, bad configurations refused
# with exit status 2 and a message that names the entry, SIGTERM ending with status 0.
set -euo pipefail
tgt=$1 perf=$2 rpc=$3 emu=$4
dir=${TEST_TMPDIR:-$(mktemp -d)}
run=$(mktemp -d /tmp/pollux-tgt-test.XXXXXX)  # UNIX socket paths must stay short
sock=$run/rpc.sock
pid= emu_pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  if [ -n "$emu_pid" ] && kill -0 "$emu_pid" 2>/dev/null; then kill -KILL "$emu_pid"; fi
  rm -rf "$run"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- target stderr"
  cat "$dir/tgt.err" 2>/dev/null || true
  exit 1
}
nqn1=nqn.2026-11.io.pollux:cnode1 nqn2=nqn.2026-11.io.pollux:cnode2
cat >"$dir/tgt.json" <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 131072, "block_size": 512}},
    {"method": "bdev_malloc_create", "params": {"name": "Malloc1", "num_blocks": 8192, "block_size": 4096}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "num_shared_buffers": 128}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn1", "allow_any_host": true,
                                                  "serial_number": "POLLUXTEST1", "kas": 2, "cqt_ms": 250}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn1", "namespace": {"bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn1",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"}}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn2"}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn2", "namespace": {"bdev_name": "Malloc1", "nsid": 7}}},
    {"method": "nvmf_subsystem_add_host", "params": {"nqn": "$nqn2", "host": "nqn.2026-11.io.pollux:only-me"}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn2",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"}}}]}]}
JSON

# start CONFIG [ARGS...]: pollux-tgt in the background, waiting for its "ready" line; sets pid
# and port.
start() {
  local cfg=$1
  shift
  # Emptied here, not by the background command's redirection: that happens in the child,
  # after this shell may already have read the previous target's "ready" line.
  : >"$dir/tgt.out"
  : >"$dir/tgt.err"
  "$tgt" -m 0x3 --json "$cfg" --rpc "$sock" "$@" >>"$dir/tgt.out" 2>>"$dir/tgt.err" &
  pid=$!
  for _ in $(seq 200); do
    grep -q "pollux-tgt: ready" "$dir/tgt.out" && break
    kill -0 "$pid" 2>/dev/null || fail "pollux-tgt exited before it was ready"
    sleep 0.05
  done
  grep -q "pollux-tgt: ready: 2 reactor(s)" "$dir/tgt.out" || fail "no ready line: $(cat "$dir/tgt.out")"
  port=$(sed -n 's/^nvmf\/tcp: listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$dir/tgt.err" | head -1)
  [ -n "$port" ] || fail "no listening line"
}
stop() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  [ $rc -eq 0 ] || fail "pollux-tgt exited with status $rc after SIGTERM"
}
r() { "$rpc" -s "$sock" "$@"; }
# json_check FILE PYTHON-EXPRESSION: the expression (over j, the file's JSON) must be true.
json_check() {
  python3 - "$1" "$2" <<'PY' || fail "check '$2' on $(head -c 600 "$1")"
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
trid() { echo "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:$port subnqn:$1${2:+ $2}"; }
# perf_verify SUBNQN ARGS...: pollux-perf --verify against the target, 0 failures.
perf_verify() {
  local nqn=$1
  shift
  timeout 60 "$perf" -r "$(trid "$nqn")" -w randrw -M 50 --verify -c 0x1 "$@" >"$dir/perf.out" 2>&1 ||
    { cat "$dir/perf.out"; fail "pollux-perf $*"; }
  grep -q "verify: [1-9][0-9]* reads checked, 0 failures" "$dir/perf.out" ||
    { cat "$dir/perf.out"; fail "pollux-perf $*: verify"; }
}

start "$dir/tgt.json" --metrics 127.0.0.1:0
echo "target on port $port"
perf_verify $nqn1 -q 16 -o 4096 -t 1                          # in-capsule writes
perf_verify $nqn1 -q 4 -o 131072 -t 1                         # R2T, 128 KiB
timeout 60 "$perf" -r "$(trid $nqn1 "hdgst:1 ddgst:1")" -w randrw -M 50 --verify -q 8 -o 65536 -t 1 \
  -c 0x1 >"$dir/perf.out" 2>&1 || { cat "$dir/perf.out"; fail "digests"; }
grep -q ", 0 failures" "$dir/perf.out" || fail "digests: verify"
echo "ok: verified I/O at 4 and 128 KiB, and with header and data digests"

# A host that is not on cnode2's list is refused at Connect.
rc=0
timeout 30 "$perf" -r "$(trid $nqn2)" -w read -t 0.2 >"$dir/perf.out" 2>&1 || rc=$?
[ $rc -ne 0 ] || fail "a host not allowed reached $nqn2"
grep -qi "connect" "$dir/perf.out" || { cat "$dir/perf.out"; fail "refusal does not mention Connect"; }
echo "ok: a host not on the list is refused"

# The RPC socket is the owner's only (docs/SECURITY.md).
[ "$(stat -c %a "$sock")" = 600 ] || fail "RPC socket mode $(stat -c %a "$sock"), not 600"
echo "ok: the RPC socket is 0600"

# Queries.
r nvmf_get_subsystems >"$dir/subs.json"
json_check "$dir/subs.json" "len(j) == 3 and j[0]['subtype'] == 'Discovery' and j[1]['namespaces'][0]['bdev_name'] == 'Malloc0' and j[2]['namespaces'][0]['nsid'] == 7 and j[2]['hosts'] == [{'nqn': 'nqn.2026-11.io.pollux:only-me'}] and (j[1]['kas'], j[1]['cqt_ms'], j[2]['kas'], j[2]['cqt_ms']) == (2, 250, 10, 0)"
r bdev_get_bdevs >"$dir/bdevs.json"
json_check "$dir/bdevs.json" "len(j) == 2 and all(b['claimed'] and b['claim_module'] == 'nvmf_tgt' for b in j)"
r bdev_get_iostat -b Malloc0 >"$dir/iostat.json"
json_check "$dir/iostat.json" "j['bdevs'][0]['num_write_ops'] > 0 and j['bdevs'][0]['num_read_ops'] > 0"
r nvmf_get_stats >"$dir/stats.json"
json_check "$dir/stats.json" "len(j['poll_groups']) == 2 and sum(g['completed_nvme_io'] for g in j['poll_groups']) > 0 and j['poll_groups'][0]['transports'][0]['trtype'] == 'TCP'"
r framework_get_reactors >"$dir/reactors.json"
json_check "$dir/reactors.json" "len(j['reactors']) == 2 and any(t['name'] == 'nvmf_pg1' for t in j['reactors'][1]['lw_threads'])"
r thread_get_pollers >"$dir/pollers.json"
json_check "$dir/pollers.json" "any(p['name'] == 'nvmf_tcp_poll_group' for t in j['threads'] for p in t['active_pollers'])"
r thread_get_stats >"$dir/tstats.json"
json_check "$dir/tstats.json" "any(t['name'] == 'nvmf_pg0' and t['active_pollers_count'] >= 1 for t in j['threads']) and [t['cpumask'] for t in j['threads'] if t['name'] == 'nvmf_pg1'] == ['0x2'] and [t['cpumask'] for t in j['threads'] if t['name'] == 'app_thread'] == ['0x3']"
echo "ok: nvmf_get_subsystems, bdev_get_bdevs, bdev_get_iostat, nvmf_get_stats, framework_get_reactors, thread_get_pollers, thread_get_stats"
url=$(sed -n 's/^pollux-tgt: metrics on \(http:.*\)$/\1/p' "$dir/tgt.out")
[ -n "$url" ] || fail "no metrics line"
python3 - "$url" <<'PY' || fail "metrics"
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
done = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("pollux_nvmf_completed_io_total{"))
conns = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("pollux_nvmf_tcp_connections_accepted_total{"))
assert done > 0 and conns >= 4, (done, conns)
assert "pollux_bdev_ops_total{" in text and "pollux_reactor_busy_seconds_total{" in text
assert 'pollux_thread_info{reactor="1",thread="nvmf_pg1",cpumask="0x2"} 1' in text, "thread cpumask"
assert 'pollux_process_info{program="pollux-tgt"} 1' in text, "program name"
start = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("process_start_time_seconds ")]
import time
assert len(start) == 1 and 0 <= time.time() - start[0] < 600, ("process start time", start)
print(f"ok: metrics: {done:.0f} NVM commands completed, {conns:.0f} connections accepted")
PY

# A namespace hot-added by RPC is seen by the next host; hot-removing its bdev removes it.
[ "$(r bdev_malloc_create -b Hot0 16 512)" = '"Hot0"' ] || fail "bdev_malloc_create"
[ "$(r nvmf_subsystem_add_ns $nqn1 Hot0)" = "2" ] || fail "nvmf_subsystem_add_ns did not answer NSID 2"
perf_verify $nqn1 -q 8 -o 4096 -t 0.5 -n 2
grep -q "2 namespace(s)" "$dir/perf.out" || { cat "$dir/perf.out"; fail "the host does not see namespace 2"; }
r bdev_malloc_delete Hot0 >/dev/null
r nvmf_get_subsystems $nqn1 >"$dir/subs.json"
json_check "$dir/subs.json" "[n['nsid'] for n in j[0]['namespaces']] == [1]"
echo "ok: namespace hot-added by RPC, removed with its bdev"

# RPC errors: a message, exit status 1; the target goes on.
rc=0
r nvmf_subsystem_add_ns nqn.2026-11.io.pollux:nope Malloc0 2>"$dir/rpc.err" || rc=$?
[ $rc -eq 1 ] && grep -q "no subsystem nqn.2026-11.io.pollux:nope" "$dir/rpc.err" || fail "rpc error: $(cat "$dir/rpc.err")"
rc=0
r call nvmf_create_subsystem '{"nqn": "nqn.2026-11.io.pollux:x", "bogus": 1}' 2>"$dir/rpc.err" || rc=$?
[ $rc -eq 1 ] && grep -q "'bogus': unknown parameter (code -32602)" "$dir/rpc.err" || fail "rpc error: $(cat "$dir/rpc.err")"
echo "ok: RPC errors"

# save_config starts the same target again.
r save_config >"$dir/saved.json"
stop
start "$dir/saved.json"
r save_config >"$dir/saved2.json"
cmp -s "$dir/saved.json" "$dir/saved2.json" || { diff "$dir/saved.json" "$dir/saved2.json"; fail "save_config round trip"; }
perf_verify $nqn1 -q 8 -o 8192 -t 0.5
stop
echo "ok: save_config round trip"

# An lvol as a namespace, made by RPC on a malloc bdev: verified I/O through it (a thin lvol:
# first writes allocate), a snapshot under the host's I/O; save_config names the store by
# bdev_lvol_load_lvstore (a restart loads it from its bdev) and none of the lvols.
start "$dir/tgt.json"
r bdev_malloc_create -b Lv0 128 512 >/dev/null || fail "bdev_malloc_create Lv0"  # room for a copy of each cluster
r bdev_lvol_create_lvstore Lv0 lvs0 -c 1048576 >/dev/null || fail "bdev_lvol_create_lvstore"
r bdev_lvol_create vol 32 -l lvs0 -t >/dev/null || fail "bdev_lvol_create"
nqn3=nqn.2026-11.io.pollux:lvol
r nvmf_create_subsystem $nqn3 -a >/dev/null || fail "nvmf_create_subsystem (lvol)"
[ "$(r nvmf_subsystem_add_ns $nqn3 lvs0/vol)" = "1" ] || fail "nvmf_subsystem_add_ns lvs0/vol"
r nvmf_subsystem_add_listener $nqn3 -t tcp -a 127.0.0.1 -s "$port" >/dev/null || fail "listener (lvol)"
perf_verify $nqn3 -q 16 -o 4096 -t 0.5
r bdev_lvol_snapshot lvs0/vol snap >/dev/null || fail "bdev_lvol_snapshot"
perf_verify $nqn3 -q 16 -o 4096 -t 0.5
r save_config >"$dir/lvol.json"
json_check "$dir/lvol.json" "[c for c in next(s for s in j['subsystems'] if s['subsystem'] == 'bdev')['config'] if c['method'].startswith('bdev_lvol')] == [{'method': 'bdev_lvol_load_lvstore', 'params': {'bdev_name': 'Lv0'}}]"
stop
echo "ok: an lvol namespace: verified I/O, a snapshot under it, save_config loads the store"

# NVMe namespaces under the target: bdev_nvme over vfio-user to pollux-emu (two namespaces,
# 512-byte and 4 KiB blocks). The in-capsule buffers and the pool's data buffers go to the
# device by DMA: they must be registered DMA memory, or the device's commands fail.
"$emu" --socket "$run/emu.sock" -q &
emu_pid=$!
for _ in $(seq 100); do [ -S "$run/emu.sock" ] && break; sleep 0.05; done
[ -S "$run/emu.sock" ] || fail "pollux-emu did not create its socket"
cat >"$dir/nvme.json" <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_nvme_attach_controller", "params": {"name": "Nvme0", "trtype": "vfio-user", "traddr": "$run/emu.sock"}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "num_shared_buffers": 64}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn1", "allow_any_host": true}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn1", "namespace": {"bdev_name": "Nvme0n1"}}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn1", "namespace": {"bdev_name": "Nvme0n2"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn1",
      "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"}}}]}]}
JSON
start "$dir/nvme.json"
perf_verify $nqn1 -q 16 -o 4096 -t 1      # in-capsule buffers to the device
perf_verify $nqn1 -q 4 -o 131072 -t 1     # pool buffers
grep -q "2 namespace(s)" "$dir/perf.out" || fail "not both of pollux-emu's namespaces"
stop
kill -TERM "$emu_pid"
wait "$emu_pid" 2>/dev/null || true
emu_pid=
echo "ok: bdev_nvme (vfio-user, pollux-emu) namespaces exported over TCP, verified"

# Bad configurations: exit status 2, the entry named, nothing left running.
refused() {  # $1 = what stderr must say, $2 = the nvmf config entries (JSON)
  cat >"$dir/bad.json" <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "M", "num_blocks": 1024, "block_size": 512}}]},
 {"subsystem": "nvmf", "config": [$2]}]}
JSON
  local rc=0
  timeout 20 "$tgt" --json "$dir/bad.json" --rpc "" >"$dir/bad.out" 2>"$dir/bad.err" || rc=$?
  [ $rc -eq 2 ] || fail "bad config ($1): exit status $rc, expected 2"
  grep -qF -- "$1" "$dir/bad.err" || fail "bad config: '$1' not in: $(cat "$dir/bad.err")"
}
refused "subsystems[1].config[0] (nvmf_bogus): unknown method" '{"method": "nvmf_bogus"}'
refused "config[1] (nvmf_subsystem_add_ns): bdev_name: no bdev named 'Nope'" \
  '{"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2026-11.io.pollux:a"}},
   {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2026-11.io.pollux:a", "namespace": {"bdev_name": "Nope"}}}'
refused "'trsvcid': a port number" \
  '{"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
   {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2026-11.io.pollux:a"}},
   {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2026-11.io.pollux:a",
     "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1", "trsvcid": "44x"}}}'
refused "nqn 'iqn.bad' does not start with 'nqn.'" \
  '{"method": "nvmf_create_subsystem", "params": {"nqn": "iqn.bad"}}'
refused "'dif_insert_or_strip': not supported" \
  '{"method": "nvmf_create_transport", "params": {"trtype": "TCP", "dif_insert_or_strip": true}}'
refused "no transport TCP (nvmf_create_transport first)" \
  '{"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2026-11.io.pollux:a"}},
   {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2026-11.io.pollux:a",
     "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1", "trsvcid": "4420"}}}'
rc=0
timeout 20 "$tgt" --json /nonexistent.json >/dev/null 2>"$dir/bad.err" || rc=$?
[ $rc -eq 2 ] && grep -q "cannot open '/nonexistent.json'" "$dir/bad.err" || fail "missing config file: $rc"
echo "ok: bad configurations refused"
echo "PASS"
