#!/usr/bin/env bash
# The timed emulator's simulation speed, and whether two builds simulate the same runs.
#   tools/bench/sim_speed.sh [runs=5] [BEFORE AFTER]
# With two pollux-sim binaries (e.g. one copied out of bazel-bin before a change): each
# workload below runs on both, alternating, `runs` times; prints the simulated I/O per host
# second (median and best: on a shared VM one binary's runs spread ±20%) and whether both
# printed the same IOPS and trace hash (a speed change must not change a run). With none:
# the current build, once per workload. For a figure that does not move with the machine's
# load, count instructions: valgrind --tool=callgrind pollux-sim ARGS (docs/BENCHMARKS.md).
# SIM_CONFIG=lto: with none, the build with link-time optimisation (bazel --config=lto).
set -euo pipefail
runs=${1:-5}
cd "$(dirname "$0")/../.."
export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1
if [ $# -ge 3 ]; then
  bins=("$2" "$3")
else
  if [ -n "${SIM_CONFIG:-}" ]; then
    bazel build --config="$SIM_CONFIG" //scenarios/sim:pollux-sim >/dev/null 2>&1
    bins=("bazel-$SIM_CONFIG-bin/scenarios/sim/pollux-sim")
  else
    bazel build //scenarios/sim:pollux-sim >/dev/null 2>&1
    bins=(bazel-bin/scenarios/sim/pollux-sim)
  fi
  runs=1
fi
workloads=(
  "--profile p4800x --qd 128 --time-ms 1000"
  "--profile p3700 --qd 128 --time-ms 1000"
  "--profile gen4-tlc --qd 128 --time-ms 1000"
  "--profile p3700 --devices 8 --qd 128 --time-ms 100"
  "--profile null --qd 128 --time-ms 50"
  "--profile p4800x --qd 1 --time-ms 50"
  "--profile p4800x --qd 16 --rw randwrite --time-ms 100"
  "--profile p3700 --qd 32 --rw randrw --time-ms 100"
  "--profile gen4-tlc --qd 64 --bs 131072 --rw read --time-ms 100"
  "--profile p3700 --scale-blocks 256 --scale-pages 8 --precondition sequential --qd 32 --rw randwrite --time-ms 300 --warmup-ms 0"
  "--profile p4800x --qd 128 --fidelity rtl --time-ms 200"
  "--profile p3700 --devices 2 --transport rdma --qd 32 --time-ms 20"
)
one() {  # BIN ARGS... -> "ios_per_host_s iops trace_hash"
  local b=$1
  shift
  "$b" "$@" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(int(d["simulated_ios_per_host_s"]), d["total_iops"], d["trace_hash"])'
}
for w in "${workloads[@]}"; do
  declare -A speeds=() runs_of=()
  for ((i = 0; i < runs; i++)); do
    for b in "${bins[@]}"; do
      # shellcheck disable=SC2086
      read -r speed iops hash < <(one "$b" $w)
      speeds[$b]="${speeds[$b]:-} $speed"
      runs_of[$b]="$iops $hash"
    done
  done
  line="$w:"
  for b in "${bins[@]}"; do
    line+=$(python3 -c '
import statistics, sys
v = [int(x) for x in sys.argv[1].split()]
print("  %s median %.0f K best %.0f K" % (sys.argv[2], statistics.median(v) / 1e3, max(v) / 1e3))
' "${speeds[$b]}" "$(basename "$b")")
  done
  if [ ${#bins[@]} -eq 2 ]; then
    if [ "${runs_of[${bins[0]}]}" = "${runs_of[${bins[1]}]}" ]; then
      line+="  same run (${runs_of[${bins[0]}]})"
    else
      line+="  DIFFERENT RUNS: ${runs_of[${bins[0]}]} / ${runs_of[${bins[1]}]}"
    fi
  fi
  echo "$line"
  unset speeds runs_of
done
