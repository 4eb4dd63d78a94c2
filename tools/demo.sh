#!/usr/bin/env bash
# The main job: the showcase scenario first — a drive pulled and re-inserted under verified
# random writes, in virtual time, report in ./pollux-report/report.html — then Pollux's
# emulated NVMe SSD (pollux-emu, a vfio-user server in its own process) driven by the polled
# user-space driver (pollux-perf), and the timed SSD model in virtual time.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(//emulator/device:pollux-emu //driver/nvme/perf:pollux-perf //scenarios/sim:pollux-sim
         //scenarios/runner:pollux-scenario)
bazel build -c opt "${targets[@]}" >/dev/null 2>&1 || bazel build -c opt "${targets[@]}"
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1
echo "== showcase: surprise removal and re-insertion under verified random writes (virtual time)"
"$bin/scenarios/runner/pollux-scenario" run scenarios/suite/hot-remove-reinsert.yaml \
  --report pollux-report
dir=$(mktemp -d /tmp/pollux-demo.XXXXXX)
sock=$dir/emu.sock
pin_emu=() pin_perf=()
if [ "$(nproc)" -ge 2 ]; then pin_emu=(taskset -c 1); fi
"${pin_emu[@]}" "$bin/emulator/device/pollux-emu" --socket "$sock" &
emu=$!
trap 'kill $emu 2>/dev/null; wait $emu 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

echo; echo "== verified random 4 KiB writes/reads, QD 32, both namespaces, 3 s"
"$bin/driver/nvme/perf/pollux-perf" -r "trtype:vfio-user traddr:$sock" -q 32 -o 4096 \
  -w randwrite --verify -t 3 -c 0x1 --json "$dir/verify.json"
echo; echo "== random 4 KiB reads, QD 128, namespace 1, 3 s"
"$bin/driver/nvme/perf/pollux-perf" -r "trtype:vfio-user traddr:$sock" -q 128 -o 4096 \
  -w randread -t 3 -c 0x1 -n 1

echo; echo "== the timed p3700 model in virtual time: one host core drives 8 drives at QD 128"
echo "   (the SPDK paper's Figure 4: 3.6 M IOPS; docs/FIDELITY.md)"
"$bin/scenarios/sim/pollux-sim" --profile p3700 --devices 8 --qd 128 --time-ms 20
