#!/usr/bin/env bash
# Coverage-guided fuzzing of one tests/fuzz target with clang's libFuzzer, ASan and UBSan.
#   tools/fuzz.sh TARGET SECONDS [libFuzzer options...]     e.g. tools/fuzz.sh vfio_user_nvme 600
# TARGET: vfio_user_nvme | scenario_yaml (tests/fuzz/README.md). Builds in its own output base
# (~/.cache/pollux-fuzz: the toolchain is clang-14, tools/setup.sh installs it), starts from the
# target's seed corpus (new inputs go to $FUZZ_DIR/corpus, crashes to $FUZZ_DIR/), and prints
# libFuzzer's final statistics: executions, coverage, and any crash with its reproducer.
set -euo pipefail
target=${1:?usage: tools/fuzz.sh TARGET SECONDS [libFuzzer options]}
seconds=${2:?usage: tools/fuzz.sh TARGET SECONDS [libFuzzer options]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/tests/fuzz/corpus/$target" ] || { echo "fuzz.sh: no target '$target' (tests/fuzz/corpus/)"; exit 2; }
command -v clang-14 >/dev/null || { echo "fuzz.sh: no clang-14: run tools/setup.sh"; exit 2; }
out_base=${POLLUX_FUZZ_OUTPUT_BASE:-$HOME/.cache/pollux-fuzz}
dir=${FUZZ_DIR:-/tmp/pollux-fuzz/$target}
mkdir -p "$dir/corpus"
cd "$root"
bazel --output_base="$out_base" build --config=fuzz --symlink_prefix=/ \
  "//tests/fuzz:${target}_fuzzer" >&2
bin=$(bazel --output_base="$out_base" info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz/${target}_fuzzer
[ -x "$bin" ] || { echo "fuzz.sh: no binary for $target"; exit 1; }
export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz.sh: $target for $seconds s; corpus $dir/corpus (+ tests/fuzz/corpus/$target)" >&2
"$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" \
  -max_len=4096 "$@" "$dir/corpus" "tests/fuzz/corpus/$target"
