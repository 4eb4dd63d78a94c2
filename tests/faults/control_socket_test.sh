#!/usr/bin/env bash
# Fault commands over pollux-emu's control socket, against the unchanged pollux-perf:
# a media-error rule with a count fails exactly that many reads; malformed commands get an
# error naming the field and change nothing; stats report the hits.
set -euo pipefail
emu=$1
perf=$2
dir=$(mktemp -d /tmp/pollux-test.XXXXXX)
sock=$dir/emu.sock
ctl=$dir/ctl.sock
"$emu" --socket "$sock" --control "$ctl" --quiet &
emu_pid=$!
trap 'kill $emu_pid 2>/dev/null; wait $emu_pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && [ -S "$ctl" ] && break; sleep 0.05; done  # start-up
[ -S "$ctl" ] || { echo "pollux-emu did not create $ctl"; exit 1; }

send() {  # one JSON line in, the reply line out
  python3 - "$ctl" "$1" <<'PY'
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(os.fsencode(sys.argv[2]) + b"\n")  # the bytes as given, UTF-8 or not
buf = b""
while not buf.endswith(b"\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    buf += chunk
print(buf.decode(errors="replace").strip())
PY
}

r=$(send '{"cmd":"fault","action":"status","status":"unrecovered_read_error","opcode":2,"count":5}')
echo "$r"; echo "$r" | grep -q '"ok":true' || exit 1
r=$(send '{"cmd":"fault","action":"status","status":"no_such_status"}')
echo "$r"; echo "$r" | grep -q '"ok":false' && echo "$r" | grep -q 'status' || exit 1
r=$(send '{"cmd":"fault","action":"status","status":"write_fault","lbas":[1,2]}')
echo "$r"; echo "$r" | grep -q 'lbas: unknown field' || exit 1
r=$(send 'not json')
echo "$r"; echo "$r" | grep -q '"ok":false' || exit 1
# Bytes that are not UTF-8: an error reply, and the device lives on (it aborted on them).
r=$(send $'\xbd')
echo "$r"; echo "$r" | grep -q '"ok":false' || exit 1
r=$(send $'{"cmd":"fault","action":"\xbd"}')
echo "$r"; echo "$r" | grep -q '"ok":false' || exit 1
kill -0 $emu_pid || { echo "pollux-emu died"; exit 1; }

"$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 4096 -w randread --io-count 400 -t 20 \
  --json "$dir/perf.json" >"$dir/perf.log" 2>&1 || true
python3 - "$dir/perf.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
errors = d["total"]["errors"]  # one job per namespace: the rule matches both
assert errors == 5, f"expected exactly 5 injected read errors, got {errors}"
print(f"{sum(j['ios'] for j in d['devices'])} reads, {errors} failed as injected")
PY
r=$(send '{"cmd":"stats"}')
echo "$r"; echo "$r" | grep -q '"fault_hits":5' || exit 1

# Reads that succeed without moving data: --verify poisons each read buffer first, so they
# cannot pass on what the task's own write left there (before, all of them passed).
r=$(send '{"cmd":"fault","action":"drop_data","opcode":2,"count":7}')
echo "$r"; echo "$r" | grep -q '"ok":true' || exit 1
rc=0
"$perf" -r "trtype:vfio-user traddr:$sock" -q 4 -o 4096 -w randwrite --verify --io-count 400 \
  -t 20 -n 1 --seed 3 >"$dir/verify.log" 2>&1 || rc=$?
cat "$dir/verify.log" | tail -3
grep -qE "verify: [0-9]+ reads checked, 7 failures" "$dir/verify.log" ||
  { echo "the 7 data-less reads were not all caught (exit $rc)"; exit 1; }
grep -q "no data transferred" "$dir/verify.log" || { echo "not named as data-less"; exit 1; }
echo PASS
