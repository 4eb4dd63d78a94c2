#!/usr/bin/env bash
# A scenario report as a reader sees it: runs the scenario, then screenshots its report.html
# in headless Chromium at 1400 px wide (tools/setup.sh installs chromium).
#   bazel build //scenarios/runner:pollux-scenario
#   tools/report_screenshot.sh scenarios/suite/hot-remove-reinsert.yaml docs/images/report.png [HEIGHT]
set -euo pipefail
scenario=$1 png=$2 height=${3:-3200}
root=$(cd "$(dirname "$0")/.." && pwd)
runner=$root/bazel-bin/scenarios/runner/pollux-scenario
[ -x "$runner" ] || { echo "build first: bazel build //scenarios/runner:pollux-scenario"; exit 2; }
command -v chromium >/dev/null || { echo "no chromium: run tools/setup.sh"; exit 2; }
dir=$(mktemp -d /tmp/pollux-report.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# From the repository root, so that the report's replay command reads as one typed there.
(cd "$root" && ./bazel-bin/scenarios/runner/pollux-scenario run "$scenario" --report "$dir" --quiet \
  >/dev/null) || true  # a failed run has a report too
[ -f "$dir/report.html" ] || { echo "no report written"; exit 1; }
mkdir -p "$(dirname "$png")"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1400,"$height" --screenshot="$(realpath -m "$png")" "file://$dir/report.html" \
  >/dev/null 2>&1
[ -s "$png" ] || { echo "chromium wrote no screenshot"; exit 1; }
echo "$png"
