#!/usr/bin/env bash
# mutants_one_seed.sh PARITY: parity mutants prints one seed (its own; not
# rapidcheck's "Using configuration: seed=...") and, per fault, the same
# seconds in its progress line as in its table.
set -uo pipefail
parity="$1"
fault=sp-residual-mislabel
out="$("$parity" mutants --fault $fault --cases 25 --shrink-steps 1 2>&1)"
code=$?
printf '%s\n' "$out"
fail=0
[[ $code == 0 ]] || { echo "FAIL: exit code $code"; fail=1; }
if grep -q "Using configuration" <<<"$out"; then echo "FAIL: rapidcheck's seed printed"; fail=1; fi
seeds="$(grep -Eo 'seed[= ][0-9]+' <<<"$out" | sort -u)"
[[ "$seeds" == "seed 20261203" ]] || { echo "FAIL: seeds: $seeds"; fail=1; }
progress="$(sed -En "s/^  $fault: caught at check [0-9]+, ([0-9.]+) s .*/\1/p" <<<"$out")"
table="$(awk -v f=$fault '$1 == f && $2 == "yes" { print $4 }' <<<"$out")"
echo "progress line: ${progress:-none}, table: ${table:-none}"
[[ -n "$progress" && "$progress" == "$table" ]] || { echo "FAIL: two times"; fail=1; }
exit $fail
