#!/usr/bin/env bash
# injected_fault.sh PARITY MATRIX XSD: a sweep whose base injects a code-path
# fault exits 1, saves each failing case in failures/ (shrunk, expecting the
# FAILed property to PASS), and `parity repro` of a saved file reproduces the FAIL (exit 1, the property FAILED); its JUnit has
# a <failure> per failing case with the repro command, and validates; report.html
# shows the grid and both failures with their repro commands.
set -euo pipefail
parity="$1"; matrix="$2"; xsd="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
set +e
"$parity" sweep "$matrix" --out "$work/s" --junit "$work/s.xml" --shrink --shrink-steps 4
code=$?
set -e
[[ $code == 1 ]] || { echo "FAIL: the sweep exited $code, expected 1"; exit 1; }
failures=("$work"/s/failures/*.json)
echo "failure files: ${#failures[@]}"
(( ${#failures[@]} == 2 )) || { echo "FAIL: expected 2 failure files"; exit 1; }
grep -q '"shrunk": "by parity sweep --shrink: ' "${failures[0]}" || { echo "FAIL: not shrunk"; exit 1; }
grep -q '"sharded_reduction": "PASS"' "${failures[0]}" || { echo "FAIL: expect"; exit 1; }
set +e
out=$("$parity" repro "${failures[0]}" 2>&1)
code=$?
set -e
echo "$out" | tail -3
[[ $code == 1 && "$out" == *"sharded_reduction FAILED"* ]] || { echo "FAIL: repro exited $code"; exit 1; }
xmllint --noout --schema "$xsd" "$work/s.xml"
[[ $(grep -c '<failure message="sharded_reduction: ' "$work/s.xml") == 2 ]] || { echo "FAIL: JUnit failures"; exit 1; }
grep -q "parity repro $work/s/failures/" "$work/s.xml" || { echo "FAIL: no repro command in JUnit"; exit 1; }
# report.html: written by the sweep, with the grid, and both failures with their repro commands.
html="$work/s/report.html"
[[ -s "$html" ]] || { echo "FAIL: no report.html"; exit 1; }
grep -q '<section id="grid">' "$html" || { echo "FAIL: report.html has no grid"; exit 1; }
[[ $(grep -c '<article class="failure' "$html") == 2 ]] || { echo "FAIL: report.html failures"; exit 1; }
[[ $(grep -c "parity repro $work/s/failures/" "$html") -ge 2 ]] || { echo "FAIL: report.html repro"; exit 1; }
echo "injected_fault: ok"
