#!/usr/bin/env bash
# pollux-top end to end against canned metrics: --once tables with and without rates, every
# view, the pipe default, a refused connection, a 404, and bad options.
set -euo pipefail
top=$1
server=$2
dir=${TEST_TMPDIR:-$(mktemp -d)}

python3 "$server" "$dir/port" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
endpoint=127.0.0.1:$(cat "$dir/port")

fail() { echo "FAIL: $*"; exit 1; }
expect_line() {  # $1 = output, $2 = extended regex one line must match
  grep -Eq -- "$2" <<<"$1" || fail "no line matches '$2' in:"$'\n'"$1"
}

# Two scrapes: rates present. Reactor 1 is busier (50%) than reactor 0 (25%), so it comes first.
out=$("$top" --endpoint "$endpoint" --once --interval 100ms)
expect_line "$out" '^REACTOR +CORE +BUSY% +ITER/S'
[ "$(sed -n 2p <<<"$out" | awk '{print $1, $2, $3}')" = "1 3 50.0" ] || fail "reactor order: $out"
[ "$(sed -n 3p <<<"$out" | awk '{print $1, $2, $3}')" = "0 0 25.0" ] || fail "reactor order: $out"
[ "$(sed -n 2p <<<"$out" | awk '{print $4}')" != "-" ] || fail "no iteration rate: $out"

# One scrape: figures from the totals, rates shown as "-".
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --view threads)
expect_line "$out" '^app +0 +25\.0 +- +'

# Stdout not a terminal: --once is implied. Poller busy-run % is 50, share 25%.
out=$("$top" --endpoint "$endpoint" --interval 100ms --view pollers --sort runs 2>"$dir/err")
expect_line "$out" '^nvme_poll +app +0 +25\.0 +[0-9.]+k? +50\.0 '
grep -q "skipped 1 malformed line" "$dir/err" || fail "malformed line not reported"
# spdk_top's poller types and periods: active, timed (500 us), paused.
expect_line "$out" '^nvme_poll +app +0 .* active +- *$'
expect_line "$out" '^hotplug +app +0 .* timed +500us *$'
expect_line "$out" '^stats +app +0 .* paused +1s *$'

# A closed port: exit 1 and say why.
closed=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1]); s.close()')
if "$top" --endpoint "127.0.0.1:$closed" --once 2>"$dir/err"; then fail "closed port accepted"; fi
grep -q "Connection refused" "$dir/err" || fail "refusal not explained: $(cat "$dir/err")"

# A wrong path: the status is named.
if "$top" --endpoint "$endpoint/nothing" --once 2>"$dir/err"; then fail "404 accepted"; fi
grep -q "404" "$dir/err" || fail "404 not named: $(cat "$dir/err")"

# An endpoint without event-framework metrics: exit 1 and say what is missing (it printed
# empty tables).
if "$top" --endpoint "$endpoint/other" --once 2>"$dir/err"; then fail "no framework metrics accepted"; fi
grep -q "no event-framework metrics at this endpoint" "$dir/err" || fail "no hint: $(cat "$dir/err")"

# Bad options are refused before any scrape.
if "$top" --view threads --sort iterations 2>"$dir/err"; then fail "bad --sort accepted"; fi
grep -q "busy, messages, name" "$dir/err" || fail "valid columns not listed: $(cat "$dir/err")"
if "$top" --interval 5x 2>/dev/null; then fail "bad --interval accepted"; fi
if "$top" --endpoint nohost 2>/dev/null; then fail "bad --endpoint accepted"; fi
echo PASS
