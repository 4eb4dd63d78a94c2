#!/usr/bin/env bash
# A scenario run with metrics on, another over NVMe/RDMA (the emulated NICs' per-port and per-QP
# metrics), and pollux-tgt serving pollux-perf over NVMe/TCP with metrics on, scraped by a real
# Prometheus server (Debian's, on loopback, with a temporary data
# directory); then every dashboard panel's PromQL is evaluated through Prometheus' HTTP API
# and must return data, and every metric a panel names must exist.
set -euo pipefail
scenario_bin=$1 check=$2 scenario=$3 tgt_bin=$4 perf_bin=$5 render=$6 rdma_scenario=$7
shift 7
dashboards=("$@")
command -v prometheus >/dev/null || { echo "prometheus is not installed (tools/setup.sh installs it)"; exit 1; }
dir=$(mktemp -d /tmp/pollux-prom.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1
"$scenario_bin" run "$scenario" --quiet --report "" --metrics 127.0.0.1:0 --linger 300s >"$dir/run.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "^metrics: " "$dir/run.log" && break; sleep 0.1; done  # start-up
target=$(sed -n 's|^metrics: http://\([^/]*\)/metrics|\1|p' "$dir/run.log")
[ -n "$target" ] || { cat "$dir/run.log"; echo "FAIL: the scenario printed no metrics endpoint"; exit 1; }
"$scenario_bin" run "$rdma_scenario" --quiet --report "" --metrics 127.0.0.1:0 --linger 300s >"$dir/rdma.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "^metrics: " "$dir/rdma.log" && break; sleep 0.1; done
rdma_target=$(sed -n 's|^metrics: http://\([^/]*\)/metrics|\1|p' "$dir/rdma.log")
[ -n "$rdma_target" ] || { cat "$dir/rdma.log"; echo "FAIL: the RDMA scenario printed no metrics endpoint"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The NVMe-oF target (a malloc namespace) under verified I/O for the NVMe-oF dashboard.
nvmf_port=$(free_port)
nqn=nqn.2026-11.io.pollux:metrics
cat >"$dir/tgt.json" <<JSON
{"subsystems": [
  {"subsystem": "bdev", "config": [{"method": "bdev_malloc_create",
    "params": {"name": "Malloc0", "num_blocks": 65536, "block_size": 512}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "$nqn", "allow_any_host": true}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$nqn", "namespace": {"bdev_name": "Malloc0"}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$nqn", "listen_address":
      {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$nvmf_port"}}}]}]}
JSON
"$tgt_bin" -m 0x1 --json "$dir/tgt.json" --rpc "" --metrics 127.0.0.1:0 >"$dir/tgt.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q "ready" "$dir/tgt.log" && break; sleep 0.1; done
tgt_target=$(sed -n 's|^pollux-tgt: metrics on http://\([^/]*\)/metrics|\1|p' "$dir/tgt.log")
[ -n "$tgt_target" ] || { cat "$dir/tgt.log"; echo "FAIL: pollux-tgt printed no metrics endpoint"; exit 1; }
"$perf_bin" -r "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:$nvmf_port subnqn:$nqn" \
  -q 8 -o 4096 -w randrw -M 50 --verify -t 300 -c 0x1 >"$dir/perf.log" 2>&1 &
pids+=($!)

port=$(free_port)
cat >"$dir/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: pollux
    static_configs: [{targets: ["$target", "$rdma_target", "$tgt_target"]}]
YML
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn >"$dir/prometheus.log" 2>&1 &
pids+=($!)
if ! python3 "$check" "http://127.0.0.1:$port" "${dashboards[@]}"; then
  echo "--- scenario"; cat "$dir/run.log"; echo "--- RDMA scenario"; tail -30 "$dir/rdma.log"
  echo "--- prometheus"; tail -20 "$dir/prometheus.log"
  echo "--- pollux-tgt"; tail -20 "$dir/tgt.log"; echo "--- pollux-perf"; tail -20 "$dir/perf.log"
  exit 1
fi
# The same dashboards without Grafana: every panel drawn from the same Prometheus, with data.
python3 "$render" --prometheus "http://127.0.0.1:$port" --out "$dir/pages" "${dashboards[@]}" \
  || { echo "FAIL: render_dashboards.py"; exit 1; }
python3 - "$dir/pages" "${dashboards[@]}" <<'PY' || exit 1
import json, os, sys
pages, files = sys.argv[1], sys.argv[2:]
summary = json.load(open(os.path.join(pages, "summary.json")))
assert len(summary) == len(files), (len(summary), files)
for name, d in summary.items():
    panels = json.load(open(next(f for f in files if json.load(open(f))["uid"] == name)))["panels"]
    assert len(d["panels"]) == len(panels), (name, len(d["panels"]))
    empty = [p["title"] for p in d["panels"] if p["series"] == 0 or p["error"]]
    assert not empty, f"{name}: panels without data: {empty}"
    page = open(os.path.join(pages, d["page"])).read()
    # Lines, lone points (a series with gaps around them: young data, late scrapes), bands,
    # stat values.
    drawn = sum(page.count(m) for m in ("<polyline", "<circle", "<rect", 'class="big"'))
    assert drawn >= len(panels), f"{name}: {drawn} marks for {len(panels)} panels"
print(f"ok: {len(summary)} dashboards rendered without Grafana, every panel with data")
PY
grep -q "PASSED" "$dir/run.log" || { cat "$dir/run.log"; echo "FAIL: the scenario failed"; exit 1; }
grep -q "PASSED" "$dir/rdma.log" || { cat "$dir/rdma.log"; echo "FAIL: the RDMA scenario failed"; exit 1; }
echo PASS
