#!/usr/bin/env bash
# Packs an initramfs for one test: the cached guest (build.sh) plus the given binaries with
# the shared libraries they need, and a run script.
#   tools/guest/pack.sh CACHE_DIR OUT.cpio RUN_SCRIPT BINARY...   (a bare name: from PATH)
# A BINARY written =/ABS/PATH is a file of this machine packed at the same path in the guest
# (with the libraries it needs in /hil/lib): what a library loads by path at run time, e.g.
# libibverbs' providers and their /etc/libibverbs.d entries.
set -euo pipefail
cache=$1 out=$2 run=$3
shift 3
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -a "$cache/root/." "$stage/"
mkdir -p "$stage/hil/bin" "$stage/hil/lib" "$stage/lib64"
cp "$run" "$stage/hil/run.sh"
chmod +x "$stage/hil/run.sh"
for b in "$@"; do
  if [ "${b:0:2}" = "=/" ]; then
    b=${b:1}
    [ -f "$b" ] || { echo "pack.sh: $b does not exist on this machine (tools/setup.sh installs it?)" >&2; exit 1; }
    mkdir -p "$stage$(dirname "$b")"
    cp -L "$b" "$stage$b"
  else
    # A bare name is a host tool (nvme-cli's nvme): found on PATH.
    [ -f "$b" ] || b=$(command -v "$b") || { echo "pack.sh: a binary to pack is not on PATH" >&2; exit 1; }
    cp "$b" "$stage/hil/bin/"
  fi
  # Shared libraries and the loader, where ldd finds them on this (the build) machine (none
  # for a script).
  (ldd "$b" 2>/dev/null || true) | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
    case "$lib" in
      */ld-linux-x86-64.so.2) cp -L "$lib" "$stage/lib64/" ;;
      *) cp -L "$lib" "$stage/hil/lib/" ;;
    esac
  done
done
(cd "$stage" && find . | busybox cpio -o -H newc 2>/dev/null) >"$out"
