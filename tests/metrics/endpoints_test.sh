#!/usr/bin/env bash
# Every long-running Pollux program serves its metrics with --metrics host:port: each is
# started on loopback (port 0), scraped while it works, and must export the families its
# part of the stack owns; pollux-top reads a live endpoint.
set -euo pipefail
bdevperf=$1 perf=$2 emu=$3 sim=$4 top=$5
dir=$(mktemp -d /tmp/pollux-endpoints.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1

endpoint() {  # log: waits for the "metrics ... http://host:port/metrics" line
  for _ in $(seq 300); do
    local ep; ep=$(grep -o 'http://[0-9.]*:[0-9]*/metrics' "$1" | head -1 || true)
    [ -n "$ep" ] && { echo "$ep"; return; }
    sleep 0.1
  done
  cat "$1"; echo "FAIL: no metrics endpoint in $1" >&2; exit 1
}

expect() {  # url name... : every family has a sample with a value > 0 (or just exists: name=)
  # Scrapes until every family is as expected, for up to 30 s: a program's first I/Os come
  # later on a loaded machine or under a sanitizer, and no fixed sleep fits every machine.
  local url=$1; shift
  python3 - "$url" "$@" <<'PY'
import sys, time, urllib.request, re
url, wanted = sys.argv[1], sys.argv[2:]
deadline = time.monotonic() + 30
while True:
    bad = []
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except OSError as e:
        text, bad = "", [f"scrape failed: {e}"]
    values = {}
    for line in text.splitlines():
        m = re.match(r'([a-z_:]+)(\{[^}]*\})? (\S+)', line)
        if m and not line.startswith("#"):
            values.setdefault(m.group(1), []).append(float(m.group(3)))
    for w in wanted if text else []:
        name, must_count = (w[:-1], False) if w.endswith("=") else (w, True)
        if name not in values:
            bad.append(f"{name}: not exported")
        elif must_count and not any(v > 0 for v in values[name]):
            bad.append(f"{name}: every sample is 0")
    if not bad or time.monotonic() > deadline:
        break
    time.sleep(0.2)
for b in bad:
    print("FAIL:", url, b)
print(f"{url}: {len(wanted) - len(bad)}/{len(wanted)} families as expected")
sys.exit(1 if bad else 0)
PY
}

# pollux-bdevperf: the event framework and the bdev layer.
# (It runs until the checks are done with it: long enough on any machine.)
"$bdevperf" --null N0:262144 -q 16 -o 4096 -w randrw -M 50 -t 120 --metrics 127.0.0.1:0 >"$dir/bdevperf.log" 2>&1 &
pids+=($!)
ep=$(endpoint "$dir/bdevperf.log")
expect "$ep" pollux_reactor_iterations_total pollux_poller_runs_total pollux_thread_messages_total \
  pollux_bdev_ops_total pollux_bdev_bytes_total pollux_bdev_latency_seconds_count \
  pollux_bdev_qos_limit_per_second=
"$top" --endpoint "${ep#http://}" --once --interval 300ms --view pollers >"$dir/top.txt"
grep -q "bdev_retry" "$dir/top.txt" || { cat "$dir/top.txt"; echo "FAIL: pollux-top shows no bdev poller"; exit 1; }
# The job's thread is pinned to its core (cpumask 0x1); --detail lists its pollers.
"$top" --endpoint "${ep#http://}" --once --iterations 1 --view threads --filter bdevperf0 --detail >"$dir/top.txt"
grep -Eq "^  CPUMASK +0x1$" "$dir/top.txt" && grep -q "^pollers of thread bdevperf0:" "$dir/top.txt" ||
  { cat "$dir/top.txt"; echo "FAIL: pollux-top shows no cpumask or pollers for bdevperf0"; exit 1; }
kill "${pids[-1]}"
wait "${pids[-1]}" || true

# pollux-emu (timed, NAND) serving pollux-perf (the NVMe driver's queue pairs).
sock=$dir/emu.sock
# --warn-lag-us 1: any lag at all is reported (the warning is there to be seen, once).
"$emu" --socket "$sock" --profile p3700 --metrics 127.0.0.1:0 --warn-lag-us 1 >"$dir/emu.log" 2>&1 &
pids+=($!)
emu_ep=$(endpoint "$dir/emu.log")
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ "$(stat -c %a "$sock")" = 600 ] || { echo "FAIL: vfio-user socket mode $(stat -c %a "$sock")"; exit 1; }
"$perf" -r "trtype:vfio-user traddr:$sock" -q 8 -o 4096 -w randrw -M 50 -t 6 -c 0x1 \
  --metrics 127.0.0.1:0 >"$dir/perf.log" 2>&1 &
pids+=($!)
perf_ep=$(endpoint "$dir/perf.log")
expect "$perf_ep" pollux_nvme_qpair_submitted_total pollux_nvme_qpair_completed_total \
  pollux_nvme_qpair_latency_seconds_count pollux_nvme_qpair_outstanding= pollux_poller_runs_total
expect "$emu_ep" pollux_emu_commands_total pollux_emu_nand_reads_total \
  pollux_emu_die_busy_seconds_total pollux_emu_channel_busy_seconds_total \
  pollux_emu_write_cache_capacity_bytes pollux_emu_write_cache_used_bytes= pollux_emu_simulated_seconds \
  pollux_emu_faults_injected_total= pollux_emu_realtime_lag_seconds= pollux_emu_realtime_max_lag_seconds
wait "${pids[-1]}"
[ "$(grep -c "pollux-emu: WARNING: the model fell .* behind the wall clock" "$dir/emu.log")" -eq 1 ] ||
  { cat "$dir/emu.log"; echo "FAIL: no single lag warning"; exit 1; }
# The host hears of it too (log page C0h): pollux-perf's figures are flagged as this machine's.
grep -q "pollux-perf: WARNING: vfio-user:.*the emulator's model fell up to .* us behind" "$dir/perf.log" ||
  { cat "$dir/perf.log"; echo "FAIL: pollux-perf did not carry the emulator's lag warning"; exit 1; }
# And bdevperf, its bdev_nvme controller on the same emulator (asked before it detaches).
cat >"$dir/emu.json" <<JSON
{"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_nvme_attach_controller",
  "params": {"name": "Nvme0", "trtype": "vfio-user", "traddr": "$sock"}}]}]}
JSON
"$bdevperf" --json "$dir/emu.json" -q 8 -o 4096 -w randread -t 1 -m 0x1 >"$dir/bdevperf-emu.log" 2>&1 ||
  { cat "$dir/bdevperf-emu.log"; echo "FAIL: pollux-bdevperf against the emulator"; exit 1; }
grep -q "pollux-bdevperf: WARNING: vfio-user:.*the emulator's model fell up to .* us behind" \
  "$dir/bdevperf-emu.log" && grep -q '"emulator_lag":{"vfio-user:' "$dir/bdevperf-emu.log" ||
  { cat "$dir/bdevperf-emu.log"; echo "FAIL: pollux-bdevperf did not carry the emulator's lag warning"; exit 1; }

# pollux-sim: the whole stack in virtual time; --linger keeps the final state up.
"$sim" --profile gen4-tlc --qd 16 --rw randrw --time-ms 20 --metrics 127.0.0.1:0 --linger 30 \
  >"$dir/sim.log" 2>&1 &
pids+=($!)
sim_ep=$(endpoint "$dir/sim.log")
for _ in $(seq 300); do grep -q "trace hash" "$dir/sim.log" && break; sleep 0.1; done
expect "$sim_ep" pollux_emu_simulated_seconds pollux_emu_die_busy_seconds_total \
  pollux_nvme_qpair_completed_total pollux_poller_runs_total pollux_emu_commands_total
echo PASS
