#!/usr/bin/env bash
# The sweep report page in headless Chromium (label `browser`, docs/sweep-report.md):
# renders the fixture's page, takes a screenshot (a PNG that shows the grid's
# pass and fail colours) and dumps the DOM Chromium built (the grid's cells, one
# SVG plot per metric, each failure with its reasons and repro command).
# Usage: browser_report.sh RENDERER FIXTURE_DIR. Without chromium it fails: ci/setup installs it.
set -euo pipefail
renderer=$1
fixture=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v chromium >/dev/null; then
  echo "browser_report.sh: chromium is not installed (ci/setup installs Debian's chromium)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
page=$work/report.html
"$renderer" "$fixture/results.jsonl" "$fixture/summary.json" "$page" "parity sweep fixture"

chrome=(timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run
  --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$work/profile")
"${chrome[@]}" --window-size=1400,1400 --screenshot="$work/shot.png" "file://$page" \
  >"$work/chromium-shot.log" 2>&1 || { cat "$work/chromium-shot.log" >&2; exit 1; }
"${chrome[@]}" --dump-dom "file://$page" >"$work/dom.html" 2>"$work/chromium-dom.log" ||
  { cat "$work/chromium-dom.log" >&2; exit 1; }
python3 "$here/browser_checks.py" png "$work/shot.png"
python3 "$here/browser_checks.py" dom "$work/dom.html" "$fixture/results.jsonl"
echo "browser_report.sh: the page renders in $(chromium --version)"
