#!/usr/bin/env bash
# Coverage-guided fuzzing of one tests/fuzz target with clang's libFuzzer, ASan and UBSan.
#   tools/fuzz.sh TARGET SECONDS [libFuzzer options...]     e.g. tools/fuzz.sh nvmf_tcp 600
# TARGET: a directory of tests/fuzz/corpus (tests/fuzz/README.md lists them). Builds in its own
# output base (~/.cache/pollux-fuzz: the toolchain is clang-14, tools/setup.sh installs it),
# starts from the target's seed corpus (new inputs go to $FUZZ_DIR/corpus, crashes to
# $FUZZ_DIR/), with the target's longest input from tests/fuzz/BUILD and its dictionary if it
# has one. libFuzzer's whole output goes to $FUZZ_DIR/fuzz.log (the targets under test print to
# stderr); the terminal gets its progress lines, any crash report, and its final statistics:
# executions, coverage, and the reproducer of a crash.
# FUZZ_FAST=1: for long runs that count executions — libFuzzer's classic schedule instead of
# the entropic one (-entropic=0) and ASan without allocation stacks (malloc_context_size=0):
# 1.1-1.6x the executions per second (docs/RELIABILITY.md); run a crash's reproducer without it
# for the full report.
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
# Code every harness runs through for every input goes uninstrumented for coverage
# (tests/fuzz/coverage_ignore.txt; Bazel does not see the file, so its hash is in the flags).
ignore="$root/tests/fuzz/coverage_ignore.txt"
ignore_flags=(--copt="-fsanitize-coverage-ignorelist=$ignore"
  --copt="-DPOLLUX_COVERAGE_IGNORE=$(sha256sum "$ignore" | cut -c1-16)")
bazel --output_base="$out_base" build --config=fuzz "${ignore_flags[@]}" --symlink_prefix=/ \
  "//tests/fuzz:${target}_fuzzer" >&2
bin=$(bazel --output_base="$out_base" info --config=fuzz "${ignore_flags[@]}" bazel-bin 2>/dev/null)/tests/fuzz/${target}_fuzzer
[ -x "$bin" ] || { echo "fuzz.sh: no binary for $target"; exit 1; }
# The longest input: FUZZ_TARGETS in tests/fuzz/BUILD ("name": (runs, max_len)).
max_len=$(sed -n "s/^ *\"$target\": *([0-9]*, *\([0-9]*\)).*/\1/p" tests/fuzz/BUILD)
opts=(-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" -max_len="${max_len:-4096}")
case $target in
  nvmf_config | jsonrpc) opts+=(-dict=tests/fuzz/json.dict) ;;
esac
export SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1
if [ "${FUZZ_FAST:-0}" = 1 ]; then
  opts+=(-entropic=0)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:malloc_context_size=0}
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz.sh: $target for $seconds s; corpus $dir/corpus (+ tests/fuzz/corpus/$target); log $dir/fuzz.log" >&2
set +e
"$bin" "${opts[@]}" "$@" "$dir/corpus" "tests/fuzz/corpus/$target" > "$dir/fuzz.log" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ]; then  # a crash (or a build of the target that failed to start): the report
  tail -n 100 "$dir/fuzz.log"
else  # libFuzzer's progress lines (not each new input) and its final statistics
  grep -aE '^#[0-9]+|^INFO:|^stat::|^Done' "$dir/fuzz.log" | grep -avE '^#[0-9]+.*(NEW|REDUCE)' |
    tail -n 40
fi
exit $rc
