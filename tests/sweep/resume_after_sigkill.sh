#!/usr/bin/env bash
# resume_after_sigkill.sh PARITY MATRIX COMPARE OTHER_MATRIX: a sweep killed with SIGKILL
# after its first results line resumes (--resume) to the same results as an
# uninterrupted run. No wall-clock bound: it polls the results file (CTest's
# TIMEOUT is the hang guard). --resume with another matrix exits 2.
set -euo pipefail
parity="$1"; matrix="$2"; compare="$3"; other="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$parity" sweep "$matrix" --out "$work/whole" >/dev/null
"$parity" sweep "$matrix" --out "$work/killed" >"$work/killed.log" 2>&1 &
pid=$!
while [[ ! -s "$work/killed/results.jsonl" ]]; do
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: the sweep ended before its first line"; exit 1; }
  sleep 0.05
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
lines=$(wc -l <"$work/killed/results.jsonl")
total=$(python3 -c "import json;print(json.load(open('$work/whole/summary.json'))['total'])")
echo "killed after $lines of $total line(s)"
if (( lines >= total )); then echo "FAIL: the sweep finished before it was killed"; exit 1; fi
[[ ! -e "$work/killed/summary.json" ]] || { echo "FAIL: a killed sweep wrote its summary"; exit 1; }
"$parity" sweep "$matrix" --out "$work/killed" --resume | tee "$work/resume.log"
grep -q "already recorded" "$work/resume.log" || { echo "FAIL: resume ran everything again"; exit 1; }
python3 "$compare" "$work/whole" "$work/killed"
set +e
out=$("$parity" sweep "$other" --out "$work/killed" --resume 2>&1)
code=$?
set -e
echo "$out" | tail -1
[[ $code == 2 && "$out" == *"differs from"* ]] || { echo "FAIL: resume with another matrix exited $code"; exit 1; }
