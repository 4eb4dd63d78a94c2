#!/usr/bin/env bash
# Installs every Debian package Pollux needs. Idempotent: a fast no-op when all are present.
# Prints what it did. Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-platforms g++ python3
  # test and benchmark
  libgtest-dev libgmock-dev libbenchmark-dev valgrind
  # simulation
  libsystemc-dev verilator
  # libraries
  prometheus-cpp-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libspdlog-dev libisal-dev liburing-dev
  # observability: the real Prometheus server the metrics test scrapes with
  prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
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
