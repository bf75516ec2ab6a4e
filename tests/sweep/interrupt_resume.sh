#!/usr/bin/env bash
# interrupt_resume.sh PARITY MATRIX COMPARE: Ctrl-C (SIGINT) on a sweep half-way
# stops it with exit 130 and prints the command that continues it; that
# command, run as printed, finishes the sweep to the same results as an
# uninterrupted run, and its summary counts the interrupted invocation's time.
# No wall-clock bound: it polls the results file (CTest's TIMEOUT is the hang guard).
set -euo pipefail
parity="$1"; matrix="$2"; compare="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$parity" sweep "$matrix" --out "$work/whole" >/dev/null
total=$(python3 -c "import json;print(json.load(open('$work/whole/summary.json'))['total'])")
# Job control: a background job of a non-interactive shell ignores SIGINT
# (and parity keeps an ignored SIGINT ignored); with -m it gets its own group.
set -m
# A case takes about 0.1 s: on a loaded machine the sweep may finish before
# the signal lands; that is no finding, so try again (never more than 5 times).
for attempt in 1 2 3 4 5; do
  rm -rf "$work/s" "$work/s.err"
  "$parity" sweep "$matrix" --out "$work/s" --jobs 2 >"$work/s.out" 2>"$work/s.err" &
  pid=$!
  while (( $( (cat "$work/s/results.jsonl" 2>/dev/null || true) | wc -l) < 1 )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -INT "$pid" 2>/dev/null || true
  set +e
  wait "$pid"
  code=$?
  set -e
  lines=$( (cat "$work/s/results.jsonl" 2>/dev/null || true) | wc -l)
  echo "attempt $attempt: exit $code after $lines of $total case(s)"
  [[ $code == 0 || $code == 130 ]] || { echo "FAIL: an interrupted sweep exited $code"; cat "$work/s.err"; exit 1; }
  (( code == 130 && lines < total )) && break
done
(( code == 130 && lines < total )) || { echo "FAIL: never interrupted a sweep half-way"; exit 1; }
set +m
cat "$work/s.err"
[[ ! -e "$work/s/summary.json" ]] || { echo "FAIL: an interrupted sweep wrote its summary"; exit 1; }
expected="parity sweep $matrix --out $work/s --jobs 2 --resume"
grep -qF "parity sweep: interrupted (SIGINT); the finished cases are in $work/s/results.jsonl; to continue: $expected" "$work/s.err" \
  || { echo "FAIL: no resume command on stderr"; exit 1; }
# The command as printed (with this build's binary for `parity`).
resume=$(sed -n 's/.*; to continue: parity //p' "$work/s.err")
eval "\"\$parity\" $resume" | tee "$work/resume.log"
grep -q "already recorded" "$work/resume.log" || { echo "FAIL: resume ran everything again"; exit 1; }
python3 "$compare" "$work/whole" "$work/s"
python3 - "$work/s" <<'PY'
import json, sys
folder = sys.argv[1]
records = [json.loads(l) for l in open(folder + "/results.jsonl")]
invocations = {r["invocation"] for r in records}
assert len(invocations) == 2, "expected cases from both invocations: %s" % invocations
summary = json.load(open(folder + "/summary.json"))
earlier = max(r["invocation_seconds"] for r in records if r["invocation"] != records[-1]["invocation"])
assert summary["seconds"] >= earlier, (summary["seconds"], earlier)
print("interrupt_resume: seconds %.2f cover the interrupted invocation's %.2f" % (summary["seconds"], earlier))
PY
echo "interrupt_resume: ok"
