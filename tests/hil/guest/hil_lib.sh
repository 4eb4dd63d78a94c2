# Sourced by guest scripts (hil_test packs it into /hil/bin): the helpers they share. A script
# defines on_fail — what to show when it fails (its programs' logs, the kernel's) — and then
# sources this file: `. /hil/bin/hil_lib.sh`.
t0=$(cut -d' ' -f1 /proc/uptime)

# step TEXT...: a progress line, with the seconds since the script began.
step() { echo "hil: [$(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime) s] $*"; }

# fail TEXT...: says why, shows what on_fail shows, and ends the script with status 1.
fail() {
  echo "hil: FAILED: $*"
  if type on_fail >/dev/null 2>&1; then on_fail; fi
  exit 1
}

# run WHAT COMMAND...: COMMAND's output in /tmp/run.log; shown, with WHAT, if it fails.
run() {
  what=$1
  shift
  rc=0
  "$@" >/tmp/run.log 2>&1 || rc=$?
  [ $rc = 0 ] || { sed 's/^/hil:   /' /tmp/run.log; fail "$what (exit status $rc)"; }
}

# must_fail WHAT COMMAND...: COMMAND fails; its output in /tmp/run.log.
must_fail() {
  what=$1
  shift
  if "$@" >/tmp/run.log 2>&1; then
    sed 's/^/hil:   /' /tmp/run.log
    fail "$what succeeded"
  fi
}

# wait_for TENTHS MESSAGE COMMAND...: polls COMMAND every 0.1 s, at most TENTHS times, then
# fails with MESSAGE — through the function named by wait_fail if the script sets one.
wait_for() {
  n=$1 msg=$2
  shift 2
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -le "$n" ] || "${wait_fail:-fail}" "$msg"
    sleep 0.1
  done
}

# GNU dd and cmp, packed from the host (hil_test's host_tools) and called by their path
# (busybox's sh runs its own applets before anything on PATH): busybox's dd falls back to
# buffered I/O without a word when an O_DIRECT transfer is refused (its buffers are not
# aligned for it), so its "iflag=direct" reads can come from the page cache; busybox's cmp
# is 5 times slower under TCG. require_gnu_tools checks they are GNU's.
dd=/hil/bin/dd cmp=/hil/bin/cmp
require_gnu_tools() {
  for tool in $dd $cmp; do
    case $("$tool" --version 2>&1 || true) in
      *"Free Software Foundation"*) ;;
      *) fail "$tool is not GNU's: pack it (hil_test's host_tools)" ;;
    esac
  done
}
