#!/usr/bin/env bash
# Builds the cached part of the QEMU guest the hardware-in-the-loop tests boot: a Debian
# kernel (fetched with `apt-get download`, never installed), the modules the tests need
# (NVMe, VFIO) and a busybox-static userland with the /init in this folder. Idempotent: an
# existing cache for the same kernel and the same inputs is kept.
#   tools/guest/build.sh [CACHE_DIR]         builds (if needed) and prints the guest's directory
#   tools/guest/build.sh --path [CACHE_DIR]  prints it only, and fails if it is not built
# CACHE_DIR: default POLLUX_GUEST_CACHE or /var/cache/pollux-guest. The guest lives in
# CACHE_DIR/<key>, the key a hash of this script, init and modules.txt: a guest built from
# other inputs (another module list) is never picked up, and worktrees with different lists
# each keep theirs (tests/hil/qemu_run.sh asks with --path; older layouts kept the guest in
# CACHE_DIR itself, untouched here).
# The tests add Pollux's binaries (with their shared libraries: Debian ships no static
# prometheus-cpp or fmt archives) and a run script with tools/guest/pack.sh.
# POLLUX_GUEST_KERNEL picks the kernel series: 6.1 (default: Debian 12's own kernel) or 6.12
# (Debian 12's linux-6.12 packages, "+deb12" in their names): Debian's 6.1 is built without
# NVMe in-band authentication (CONFIG_NVME_AUTH, CONFIG_NVME_TARGET_AUTH unset), 6.12 with
# both, so the DH-HMAC-CHAP interop test boots the 6.12 guest. Each series has its own key.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
path_only=0
[ "${1:-}" = --path ] && { path_only=1; shift; }
series=${POLLUX_GUEST_KERNEL:-6.1}
case $series in
  6.1) pattern='^linux-image-[0-9.]+-[0-9]+-amd64-unsigned$' salt= ;;
  6.12) pattern='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' salt=6.12 ;;
  *) echo "build.sh: POLLUX_GUEST_KERNEL=$series: 6.1 or 6.12" >&2; exit 1 ;;
esac
key=$( (cat "$here/init" "$here/modules.txt" "$0"; echo "$salt") | sha256sum | cut -c1-16)
cache=${1:-${POLLUX_GUEST_CACHE:-/var/cache/pollux-guest}}/$key
if [ $path_only = 1 ]; then
  echo "$cache"
  [ -f "$cache/STAMP" ] && [ -f "$cache/vmlinuz" ] ||
    { echo "build.sh: no guest built from these inputs (tools/guest at key $key) in $cache: run tools/setup.sh" >&2; exit 1; }
  exit 0
fi
mkdir -p "$cache"

newest_kernel() {
  apt-cache search --names-only "$pattern" | sort -V | tail -1 | cut -d' ' -f1
}
pkg=$(newest_kernel)
if [ -z "$pkg" ]; then  # apt's lists may never have been fetched on this machine
  apt-get update -q >/dev/null 2>&1 || true
  pkg=$(newest_kernel)
fi
[ -n "$pkg" ] || { echo "build.sh: no linux-image-*-amd64-unsigned package in apt's lists" >&2; exit 1; }
stamp="$pkg $key"
if [ -f "$cache/STAMP" ] && [ "$(cat "$cache/STAMP")" = "$stamp" ]; then
  echo "$cache"
  exit 0
fi
command -v busybox >/dev/null && busybox true 2>/dev/null ||
  { echo "build.sh: busybox-static is not installed (tools/setup.sh installs it)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Stale lists may name a kernel the mirror has dropped: fetch them again once and retry.
(cd "$work" && chmod 777 . && apt-get download "$pkg" >/dev/null 2>&1) ||
  { apt-get update -q >/dev/null 2>&1 || true; pkg=$(newest_kernel)
    (cd "$work" && apt-get download "$pkg" >/dev/null) ||
      { echo "build.sh: apt-get download $pkg failed" >&2; exit 1; }
    stamp="$pkg ${stamp#* }"; }
dpkg-deb -x "$work"/"$pkg"_*.deb "$work/pkg"
kver=$(ls "$work/pkg/lib/modules")
rm -rf "$cache/STAMP" "$cache/root" "$cache/vmlinuz"  # STAMP last written: a cut build is redone
cp "$work/pkg/boot/vmlinuz-$kver" "$cache/vmlinuz"

root=$cache/root
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,run,lib/modules/"$kver",hil}
cp "$(command -v busybox)" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
# The kernel's request_module() (crypto algorithms, nvmet transports) runs /sbin/modprobe.
ln -s ../bin/busybox "$root/sbin/modprobe"
cp "$here/init" "$root/init"
chmod +x "$root/init"
# The modules the tests load, with what they depend on (from each module's own depends=).
mods=$work/pkg/lib/modules/$kver
declare -A seen=()
order=load-order
add_module() {
  local name=$1 path deps
  [ -n "${seen[$name]:-}" ] && return
  seen[$name]=1
  path=$(find "$mods" -name "$name.ko*" -o -name "${name//_/-}.ko*" | head -1)
  [ -n "$path" ] || return 0  # built in
  # 6.12's modules are xz-compressed: unpacked here, so insmod and the parsing below see ELF.
  local ko=$root/lib/modules/$kver/$(basename "${path%.xz}")
  case $path in
    *.xz) busybox unxz -c "$path" >"$ko" ;;
    *) cp "$path" "$ko" ;;
  esac
  # The .modinfo section's "depends=a,b" string (no modinfo: it wants this kernel's depmod).
  deps=$( (tr '\0' '\n' <"$ko" | grep -a -m1 '^depends=' || true) | cut -d= -f2 | tr ',' ' ')
  for d in $deps; do add_module "$d"; done
  [ -z "$order" ] || basename "$ko" >>"$root/lib/modules/$kver/$order"
}
while read -r m; do
  [ -z "$m" ] || [ "${m:0:1}" = "#" ] && continue
  case $m in
    later\ *) order=later-order; add_module "${m#later }" ;;
    pack\ *) order=; add_module "${m#pack }" ;;
    *) order=load-order; add_module "$m" ;;
  esac
done <"$here/modules.txt"
# modules.dep (and aliases) for modprobe in the guest: a test loads "pack" modules by name.
busybox depmod -b "$root" "$kver"
echo "$stamp" >"$cache/STAMP"
echo "$cache"
