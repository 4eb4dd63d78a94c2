#!/usr/bin/env bash
# The sanitizer stages of CI (.ci/run runs them after README's test command):
#   tools/sanitize.sh [asan|tsan|all] [LOGDIR]
# asan: ASan + UBSan (but its null and alignment checks: .bazelrc says why) + LeakSanitizer
#       over the unit, system and scenario tests (every package but the HIL guest tests, whose
#       binaries run inside QEMU, and the chaos seed sweep, which the plain build already runs;
#       tag a test `noasan` to leave it out).
# tsan: ThreadSanitizer over the packages whose code runs on several threads at once: the
#       environment (DMA registry, pools), the event framework (reactors, messages), the NVMe
#       driver (queue pairs, the admin path), metrics, and the driver against the emulator.
# Each stage builds the tests and what they run only (--build_tests_only: no benchmarks or
# programs no test uses). Each stage has its own output tree (--config=asan/tsan set a platform
# suffix) and its own convenience links (bazel-asan-*, bazel-tsan-*), so bazel-bin keeps
# pointing at the plain build. Writes LOGDIR/{asan,tsan}.log and prints each stage's wall time.
set -uo pipefail
cd "$(dirname "$0")/.."

which=${1:-all}
logdir=${2:-$(mktemp -d)}
mkdir -p "$logdir"

ASAN_TARGETS=(
  //common/... //spec/... //driver/... //emulator/... //fabric/... //scenarios/...
  //tests/... //tools/...
  -//tests/hil/...
  -//scenarios/suite:chaos_test
)
TSAN_TARGETS=(
  //driver/env/... //driver/event/... //driver/nvme/... //driver/metrics/...
  //tests/nvme/... //tests/vfio_user/...
)

rc=0
stage() {
  local name=$1
  shift
  local start=$(date +%s)
  echo "sanitize: $name: bazel test --config=$name ${*}"
  bazel test --config="$name" --keep_going --build_tests_only "$@" 2>&1 | tee "$logdir/$name.log"
  local r=${PIPESTATUS[0]}
  echo "sanitize: $name finished with rc=$r after $(( $(date +%s) - start )) s"
  [ "$r" -eq 0 ] || rc=1
}

case "$which" in
  asan) stage asan -- "${ASAN_TARGETS[@]}" ;;
  tsan) stage tsan -- "${TSAN_TARGETS[@]}" ;;
  all)
    stage asan -- "${ASAN_TARGETS[@]}"
    stage tsan -- "${TSAN_TARGETS[@]}"
    ;;
  *) echo "sanitize: expected asan, tsan or all, not '$which'" >&2; exit 2 ;;
esac
exit $rc
