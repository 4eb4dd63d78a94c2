#!/usr/bin/env bash
# NVMe/RDMA across processes, as a user runs it: pollux-rnic serves two emulated NICs, pollux-tgt
# takes the first (nvmf_create_transport trtype RDMA, rdma_device) and pollux-perf the second
# (POLLUX_RDMA_DEVICE); verified random I/O in the capsule (4 KiB writes) and by keyed SGL
# (128 KiB: RDMA READ and WRITE), the target's counters saying which, pollux-rnic's Prometheus
# metrics counting the traffic, its control socket taking fault commands (1 % of packets lost
# under verified I/O), SIGTERM ending with 0.
set -euo pipefail
tgt=$1 perf=$2 rpc=$3 rnic=$4 ctl=$5
dir=${TEST_TMPDIR:-$(mktemp -d)}
run=$(mktemp -d /tmp/pollux-rdma-test.XXXXXX)  # UNIX socket paths must stay short
pid= rnic_pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  if [ -n "$rnic_pid" ] && kill -0 "$rnic_pid" 2>/dev/null; then kill -KILL "$rnic_pid"; fi
  rm -rf "$run"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- target stderr"
  cat "$dir/tgt.err" 2>/dev/null || true
  exit 1
}
nqn=nqn.2026-11.io.pollux:rdma1

"$rnic" --dir "$run" --nics 2 -q --metrics 127.0.0.1:0 --control "$run/control.sock" \
  >"$dir/rnic.out" 2>&1 &
rnic_pid=$!
for _ in $(seq 200); do
  [ -S "$run/rnic0.sock" ] && [ -S "$run/rnic1.sock" ] && break
  kill -0 "$rnic_pid" 2>/dev/null || fail "pollux-rnic exited"
  sleep 0.05
done
[ -S "$run/rnic1.sock" ] || fail "pollux-rnic made no sockets"

cat >"$dir/tgt.json" <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 65536, "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "RDMA", "num_shared_buffers": 64,
                                                   "rdma_device": "vfio-user:$run/rnic0.sock"}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "allow_any_host": true}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn",
      "listen_address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"}}}]}]}
JSON
"$tgt" -m 0x1 --json "$dir/tgt.json" --rpc "$run/rpc.sock" >"$dir/tgt.out" 2>"$dir/tgt.err" &
pid=$!
for _ in $(seq 400); do
  grep -q "pollux-tgt: ready" "$dir/tgt.out" && break
  kill -0 "$pid" 2>/dev/null || fail "pollux-tgt exited before it was ready"
  sleep 0.05
done
port=$(sed -n 's/^nvmf\/rdma: listening on 127.0.0.1:\([0-9]*\) (stream CM)$/\1/p' "$dir/tgt.err" | head -1)
[ -n "$port" ] || fail "no listening line"
echo "target's CM on port $port"

perf_verify() {
  POLLUX_RDMA_DEVICE="vfio-user:$run/rnic1.sock" timeout 120 "$perf" \
    -r "trtype:rdma adrfam:ipv4 traddr:127.0.0.1 trsvcid:$port subnqn:$nqn" \
    -w randrw -M 50 --verify -c 0x1 "$@" >"$dir/perf.out" 2>&1 ||
    { cat "$dir/perf.out"; fail "pollux-perf $*"; }
  grep -q "verify: [1-9][0-9]* reads checked, 0 failures" "$dir/perf.out" ||
    { cat "$dir/perf.out"; fail "pollux-perf $*: verify"; }
}
perf_verify -q 8 -o 4096 -t 1    # writes in the capsule, reads by RDMA WRITE
perf_verify -q 4 -o 131072 -t 1  # keyed both ways: RDMA READ, RDMA WRITE
echo "ok: verified I/O at 4 and 128 KiB"

"$rpc" -s "$run/rpc.sock" nvmf_get_stats >"$dir/stats.json"
python3 - "$dir/stats.json" <<'PY' || fail "stats: $(cat "$dir/stats.json")"
import json, sys
j = json.load(open(sys.argv[1]))
t = [t for g in j["poll_groups"] for t in g["transports"] if t["trtype"] == "RDMA"]
s = lambda k: sum(x[k] for x in t)
print("target: in_capsule", s("in_capsule"), "rdma_reads", s("rdma_reads"),
      "rdma_writes", s("rdma_writes"), "error_completions", s("error_completions"))
sys.exit(0 if s("in_capsule") > 0 and s("rdma_reads") > 0 and s("rdma_writes") > 0
         and s("error_completions") == 0 else 1)
PY
echo "ok: the target counted in-capsule data, RDMA READs and WRITEs, no error completion"

metrics_url=$(sed -n 's/^pollux-rnic: metrics on \(http:[^ ]*\)$/\1/p' "$dir/rnic.out" | head -1)
[ -n "$metrics_url" ] || fail "pollux-rnic printed no metrics address: $(cat "$dir/rnic.out")"
python3 - "$metrics_url" <<'PY' || fail "pollux-rnic's metrics"
import re, sys, time, urllib.request
def value(text, name, labels):
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None
deadline = time.time() + 5
while True:  # published every 100 ms: the last counts may take one more turn
    text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
    tx = [value(text, "pollux_rnic_tx_bytes_total", {"nic": f"rnic{i}"}) for i in (0, 1)]
    # (The hosts have gone: their QPs, and so the per-QP series, with them.)
    qps = value(text, "pollux_rnic_qps", {"nic": "rnic1", "state": "reset"})
    if all(t and t > 128 * 1024 for t in tx) and qps is not None:
        break
    if time.time() > deadline:
        print(text[:3000]); sys.exit(1)
    time.sleep(0.2)
print("rnic0 sent", tx[0], "bytes, rnic1", tx[1])
PY
echo "ok: pollux-rnic's metrics counted both NICs' traffic"

# Fault commands: 1 % of the packets lost under verified I/O (the NICs resend what was lost),
# a link flap and a bad command taken or refused, stats answered.
control() { "$ctl" "$run/control.sock" "$@"; }
rc=0
control '{"cmd":"stats"}' '{"cmd":"link_down","nic":1,"duration_us":1}' '{"cmd":"lose","rate":1}' \
  '{"cmd":"loss","rate":0.01}' >"$dir/control.out" || rc=$?
[ $rc -eq 1 ] || fail "pollux-ctl: status $rc with a refused command: $(cat "$dir/control.out")"
grep -q '"nics"' "$dir/control.out" || fail "stats: $(cat "$dir/control.out")"
grep -q "cmd: 'lose' is not one of" "$dir/control.out" || fail "a bad command: $(cat "$dir/control.out")"
perf_verify -q 8 -o 4096 -t 1
out=$(control '{"cmd":"loss","rate":0}' '{"cmd":"stats"}') || fail "control socket: $out"
tail -n 1 <<<"$out" >"$dir/stats2.out"
python3 - "$dir/stats2.out" <<'PY' || fail "no retransmission under loss: $(cat "$dir/stats2.out")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
print("under 1 % loss:", [n["retransmitted_packets"] for n in j["nics"]], "retransmitted")
sys.exit(0 if j["ok"] and sum(n["retransmitted_packets"] for n in j["nics"]) > 0 else 1)
PY
echo "ok: pollux-rnic's control socket: verified I/O through 1 % loss, a bad command refused"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || fail "pollux-tgt exited with status $rc after SIGTERM"
echo "ok: SIGTERM, status 0"
