#!/usr/bin/env bash
# resume_after_sigkill.sh PARITY MATRIX COMPARE OTHER_MATRIX: a sweep killed with SIGKILL
# half-way (once half its cases are recorded) resumes (--resume) to the same results as an
# uninterrupted run. No wall-clock bound: it polls the results file (CTest's
# TIMEOUT is the hang guard). --resume with another matrix exits 2.
set -euo pipefail
parity="$1"; matrix="$2"; compare="$3"; other="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$parity" sweep "$matrix" --out "$work/whole" >/dev/null
total=$(python3 -c "import json;print(json.load(open('$work/whole/summary.json'))['total'])")
half=$(( (total + 1) / 2 ))
# Kill it half-way: once results.jsonl holds half the cases. A case takes about
# 0.1 s, so on a loaded machine the poll may see the sweep finish first: that is
# no finding, so try again in a fresh folder (never more than 5 times).
for attempt in 1 2 3 4 5; do
  rm -rf "$work/killed"
  "$parity" sweep "$matrix" --out "$work/killed" >"$work/killed.log" 2>&1 &
  pid=$!
  while (( $( (cat "$work/killed/results.jsonl" 2>/dev/null || true) | wc -l) < half )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  lines=$( (cat "$work/killed/results.jsonl" 2>/dev/null || true) | wc -l)
  echo "attempt $attempt: killed after $lines of $total line(s)"
  (( lines < total )) && break
done
if (( lines >= total || lines < 1 )); then echo "FAIL: never killed a sweep half-way"; exit 1; fi
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
