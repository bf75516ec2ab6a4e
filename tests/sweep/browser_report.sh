#!/usr/bin/env bash
# The sweep report page in headless Chromium (label `browser`, docs/sweep-report.md).
# Renders two pages: the fixture's (a real `parity sweep --shrink` with failures) and
# a 64-case page laid out as scenarios/sweeps/cpu-64.json's matrix (16 grid columns).
# For each: a screenshot a reviewer can open (its path is printed), and the DOM
# Chromium built after a measuring script (added to a copy of the page; the page
# itself has none) recorded where each part is drawn. browser_checks.py then checks
# the order (verdict and failures above the grid above the plots), the folded
# all-zero metrics, the axis labels, the 0-based case numbers, the rank failures'
# line breaks, the grid's legend (excluded cells included), and that the 16-column
# grid wraps within a 1280-pixel window.
# Usage: browser_report.sh RENDERER FIXTURE_DIR CPU64_MATRIX OUT_DIR.
# Without chromium it fails: ci/setup installs it.
set -euo pipefail
renderer=$1
fixture=$2
matrix64=$3
out=$4
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v chromium >/dev/null; then
  echo "browser_report.sh: chromium is not installed (ci/setup installs Debian's chromium)" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/wide"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chrome=(timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run
  --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$profile")

# page NAME RESULTS SUMMARY: NAME.html, NAME.layout.html (laid out in a 1280 x 4000
# window) and NAME.png (the whole page, 1280 pixels wide).
page() {
  local name=$1 results=$2 summary=$3
  "$renderer" "$results" "$summary" "$out/$name.html" "parity sweep $name" >/dev/null
  python3 "$here/browser_checks.py" measuring-copy "$out/$name.html" "$out/$name.measure.html"
  "${chrome[@]}" --window-size=1280,4000 --dump-dom "file://$out/$name.measure.html" \
    >"$out/$name.layout.html" 2>"$out/$name.chromium.log" ||
    { cat "$out/$name.chromium.log" >&2; exit 1; }
  local height
  height=$(python3 "$here/browser_checks.py" page-height "$out/$name.layout.html")
  "${chrome[@]}" --window-size=1280,"$height" --screenshot="$out/$name.png" \
    "file://$out/$name.html" >>"$out/$name.chromium.log" 2>&1 ||
    { cat "$out/$name.chromium.log" >&2; exit 1; }
}

page report "$fixture/results.jsonl" "$fixture/summary.json"
python3 "$here/browser_checks.py" wide-folder "$matrix64" "$fixture/results.jsonl" "$out/wide"
page wide-grid "$out/wide/results.jsonl" "$out/wide/summary.json"

# Every check runs (each says what it found), then the test fails if any did.
status=0
# The screenshots' first screens: the fixture's shows the verdict and the failures'
# badges, the wide page's (one failure) the grid's pass and fail cells.
python3 "$here/browser_checks.py" png "$out/report.png" 800 c62828:verdict-and-FAIL-red \
  6a1b9a:rank-failure-purple || status=1
python3 "$here/browser_checks.py" png "$out/wide-grid.png" 1000 2e7d32:pass-green \
  c62828:fail-red || status=1
python3 "$here/browser_checks.py" report "$out/report.layout.html" "$fixture/results.jsonl" \
  "$fixture/summary.json" || status=1
python3 "$here/browser_checks.py" wide "$out/wide-grid.layout.html" || status=1
echo "browser_report.sh: screenshots for a reviewer: $out/report.png (the fixture's page)" \
  "and $out/wide-grid.png (a 16-column grid)"
echo "browser_report.sh: the page renders in $(chromium --version 2>/dev/null)"
exit $status
