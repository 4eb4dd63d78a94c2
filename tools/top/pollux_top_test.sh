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
expect_line "$out" '^REACTOR +CORE +BUSY% +BUSY +IDLE +ITER/S +ITERATIONS +THREADS +POLLERS$'
[ "$(sed -n 2p <<<"$out" | awk '{print $1, $2, $3}')" = "1 3 50.0" ] || fail "reactor order: $out"
[ "$(sed -n 3p <<<"$out" | awk '{print $1, $2, $3}')" = "0 0 25.0" ] || fail "reactor order: $out"
[ "$(sed -n 2p <<<"$out" | awk '{print $6}')" != "-" ] || fail "no iteration rate: $out"
# Per core: busy and idle time in the interval (0.5 s each on reactor 1), pollers (3 on 0).
[ "$(sed -n 2p <<<"$out" | awk '{print $4, $5, $9}')" = "500.0ms 500.0ms 0" ] || fail "core times: $out"
[ "$(sed -n 3p <<<"$out" | awk '{print $9}')" = "3" ] || fail "pollers per core: $out"

# One scrape: figures from the totals, rates shown as "-".
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --view threads)
expect_line "$out" '^app +0 +0 +0x9 +25\.0 +- +'

# Stdout not a terminal: --once is implied. Poller busy-run % is 50, share 25%.
out=$("$top" --endpoint "$endpoint" --interval 100ms --view pollers --sort runs 2>"$dir/err")
expect_line "$out" '^nvme_poll +app +0 +25\.0 +[0-9.]+k? +50\.0 '
grep -q "skipped 1 malformed line" "$dir/err" || fail "malformed line not reported"
# spdk_top's poller types and periods: active, timed (500 us), paused.
expect_line "$out" '^nvme_poll +app +0 .* active +- *$'
expect_line "$out" '^hotplug +app +0 .* timed +500us *$'
expect_line "$out" '^stats +app +0 .* paused +1s *$'

# Threads show their core and cpumask; --filter keeps rows with a matching name.
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --view threads)
expect_line "$out" '^THREAD +REACTOR +CORE +CPUMASK +BUSY%'
expect_line "$out" '^app +0 +0 +0x9 +25\.0 '
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --view pollers --filter hot)
[ "$(wc -l <<<"$out")" = 2 ] || fail "--filter hot: $out"
expect_line "$out" '^hotplug '
# --detail: each row's columns, then what runs there (reactor 0: thread app; app: 3 pollers).
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --filter 0 --detail)
expect_line "$out" '^reactors 0$'
expect_line "$out" '^  BUSY +[0-9.]+m?s$'
expect_line "$out" '^threads on reactor 0:$'
expect_line "$out" '^app +0 +0 +0x9 '
[ "$(grep -c '^reactors ' <<<"$out")" = 1 ] || fail "--filter 0 --detail: $out"
out=$("$top" --endpoint "$endpoint" --once --iterations 1 --view threads --detail)
expect_line "$out" '^pollers of thread app:$'
[ "$(grep -Ec '^(nvme_poll|hotplug|stats) +app ' <<<"$out")" = 3 ] || fail "thread detail: $out"

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
