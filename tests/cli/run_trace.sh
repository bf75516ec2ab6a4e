#!/usr/bin/env bash
# run_trace.sh PARITY "KIND=N ..." "MODE ..." ARGS...
# Runs `PARITY run ARGS... --launch MODE --trace FILE` once per MODE. Passes iff
# every run exits 0 and prints the per-step loss table, every trace holds
# exactly N lines of each KIND and nothing else, lines are ordered by (rank,
# seq), and all the traces are byte-identical (determinism; across launch modes
# too when MODES differ).
set -uo pipefail
parity="$1"; counts="$2"; modes="$3"; shift 3
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail=0
say() { echo "[run_trace] $*"; }
i=0
for mode in $modes; do
  i=$((i + 1))
  trace="$dir/trace$i.jsonl"
  output="$("$parity" run "$@" --launch "$mode" --trace "$trace" 2>&1)"
  code=$?
  printf '%s\n' "$output"
  if [[ "$code" != 0 ]]; then say "FAIL: run $i ($mode) exited $code"; fail=1; continue; fi
  if ! grep -Eq '^ +step +loss \(global mean\)' <<<"$output"; then say "FAIL: run $i: no loss table"; fail=1; fi
  if [[ ! -s "$trace" ]]; then say "FAIL: run $i wrote no trace"; fail=1; continue; fi
  total=0
  for kc in $counts; do
    kind="${kc%%=*}"; want="${kc#*=}"
    got=$(grep -c "\"kind\":\"$kind\"" "$trace")
    total=$((total + want))
    if [[ "$got" != "$want" ]]; then say "FAIL: run $i: $got lines of $kind, expected $want"; fail=1; fi
  done
  lines=$(wc -l < "$trace")
  if [[ "$lines" != "$total" ]]; then say "FAIL: run $i: $lines lines, expected $total"; fail=1; fi
  if ! grep -o '^{"rank":[0-9]*,"seq":[0-9]*' "$trace" | tr -c '0-9\n' ' ' |
       sort -c -n -k1,1 -k2,2 2>/dev/null; then
    say "FAIL: run $i: lines are not ordered by (rank, seq)"; fail=1
  fi
  if [[ $i -gt 1 ]] && ! cmp -s "$dir/trace1.jsonl" "$trace"; then
    say "FAIL: trace $i ($mode) differs from trace 1"; diff "$dir/trace1.jsonl" "$trace" | head -4; fail=1
  fi
done
[[ $fail == 0 ]] && say "ok: $i run(s), identical traces, $total lines each"
exit $fail
