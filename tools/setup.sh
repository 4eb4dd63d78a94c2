#!/usr/bin/env bash
# Installs every Debian package Pollux needs. Idempotent: a fast no-op when all are present.
# Prints what it did. Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-platforms g++ python3 clang-format-14
  # test and benchmark
  libgtest-dev libgmock-dev libbenchmark-dev valgrind
  # simulation
  libsystemc-dev verilator
  # libraries
  prometheus-cpp-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libspdlog-dev libisal-dev liburing-dev
  # NVMe in-band authentication (DH-HMAC-CHAP): libcrypto, and the openssl tool its tests
  # compute known answers with
  libssl-dev openssl
  # observability: the real Prometheus server the metrics test scrapes with
  prometheus
  # hardware-in-the-loop: a QEMU guest with an emulated IOMMU and QEMU's NVMe controller
  qemu-system-x86 busybox-static nvme-cli
  # RDMA: libibverbs and librdmacm (real NICs; soft-RoCE in the HIL guest, whose rxe provider,
  # rdma tool and rping come from these too)
  rdma-core libibverbs-dev librdmacm-dev ibverbs-providers rdmacm-utils
  # reports seen as a reader sees them: headless screenshots (tools/report_screenshot.sh)
  chromium
  # coverage-guided fuzzing with libFuzzer (tools/fuzz.sh): clang and its fuzzer runtime
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The HIL tests' guest (a Debian kernel fetched with apt-get download, busybox): cached, so
# this is quick once built. Runs after the packages are in (it needs busybox-static).
guest() {
  local cache=${POLLUX_GUEST_CACHE:-/var/cache/pollux-guest}
  local run=""
  if ! { [ -w "$(dirname "$cache")" ] || [ -w "$cache" ]; }; then
    command -v sudo >/dev/null || { echo "setup: cannot write $cache (not root, no sudo): the HIL tests will say so" >&2; return 0; }
    run=sudo
  fi
  local built series
  # Two kernels: Debian 12's 6.1 for most tests, its 6.12 for NVMe in-band authentication
  # (Debian builds 6.1 without it; tools/guest/build.sh).
  for series in 6.1 6.12; do
    built=$($run env POLLUX_GUEST_KERNEL=$series "$(dirname "$0")/guest/build.sh" "$cache") ||
      { echo "setup: the HIL guest ($series) failed to build" >&2; exit 1; }
    echo "setup: HIL guest ($series) in $built"
  done
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  guest
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi

echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: installed ${missing[*]}"
guest
