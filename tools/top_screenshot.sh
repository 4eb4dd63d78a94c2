#!/usr/bin/env bash
# pollux-top as a reader sees it: its interactive screen, captured from a pseudo-terminal
# while pollux-bdevperf runs on two reactors, then drawn in headless Chromium.
#   bazel build //tools/top:pollux-top //driver/bdev/perf:pollux-bdevperf
#   tools/top_screenshot.sh docs/images/pollux-top.png
# Two frames side by side: the threads view with a row selected, and that row's detail.
set -euo pipefail
png=$1
root=$(cd "$(dirname "$0")/.." && pwd)
top=$root/bazel-bin/tools/top/pollux-top
bdevperf=$root/bazel-bin/driver/bdev/perf/pollux-bdevperf
for b in "$top" "$bdevperf"; do
  [ -x "$b" ] || { echo "build first: bazel build //tools/top:pollux-top //driver/bdev/perf:pollux-bdevperf"; exit 2; }
done
command -v chromium >/dev/null || { echo "no chromium: run tools/setup.sh"; exit 2; }
command -v script >/dev/null || { echo "no script(1): apt-get install bsdutils"; exit 2; }
dir=$(mktemp -d /tmp/pollux-top.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

"$bdevperf" -m 0x3 --null N0:262144 --null N1:262144 -q 32 -o 4096 -w randread -t 20 \
  --metrics 127.0.0.1:0 >"$dir/bdevperf.log" 2>&1 &
for _ in $(seq 100); do grep -q "metrics on" "$dir/bdevperf.log" 2>/dev/null && break; sleep 0.1; done
ep=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$dir/bdevperf.log" | head -1)
[ -n "$ep" ] || { cat "$dir/bdevperf.log"; echo "no metrics endpoint"; exit 1; }

# One frame per key press: the screen is redrawn after each. Keys: threads view, down once,
# then Enter for the detail. The pauses let a scrape land between presses.
capture() {  # $1 = keys, $2 = output
  (sleep 2.5; printf '%s' "$1"; sleep 1.5) |
    script -qfc "stty cols 104 rows 26; $top --endpoint $ep --interval 1s --iterations 4" "$2" \
      >/dev/null
}
capture 'tj' "$dir/list.raw"
capture $'tj\r' "$dir/detail.raw"

# The last frame of a capture: the text after the last cursor-home, escapes removed.
python3 - "$dir" <<'PY'
import html, re, sys
d = sys.argv[1]
def frame(name):
    raw = open(f"{d}/{name}.raw", encoding="utf-8", errors="replace").read()
    last = raw.rsplit("\x1b[H", 1)[-1]
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", last).replace("\r", "")
    last = "\n".join(l for l in last.split("\n") if not l.startswith("Script done"))
    return html.escape(last.rstrip("\n"))
with open(f"{d}/top.html", "w") as f:
    f.write("<html><body style='margin:0;background:#1e1e1e;display:flex;gap:16px;padding:16px'>")
    for name in ("list", "detail"):
        f.write("<pre style='color:#ddd;background:#000;padding:12px;margin:0;"
                f"font:13px/1.35 monospace;border:1px solid #555'>{frame(name)}</pre>")
    f.write("</body></html>")
PY
mkdir -p "$(dirname "$png")"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1500,440 --screenshot="$(realpath -m "$png")" "file://$dir/top.html" >/dev/null 2>&1
[ -s "$png" ] || { echo "chromium wrote no screenshot"; exit 1; }
echo "$png"
