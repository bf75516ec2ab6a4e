#!/usr/bin/env bash
# shards_merge.sh PARITY MATRIX COMPARE XSD: shards 1/2 and 2/2 merged give the
# same results and summary as one run; the merge's JUnit validates against the
# JUnit schema; merging folders of different matrices exits 2.
set -euo pipefail
parity="$1"; matrix="$2"; compare="$3"; xsd="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$parity" sweep "$matrix" --out "$work/whole" --jobs 2 --junit "$work/whole.xml" >/dev/null
"$parity" sweep "$matrix" --out "$work/s1" --shard 1/2 >/dev/null
"$parity" sweep "$matrix" --out "$work/s2" --shard 2/2 >/dev/null
"$parity" sweep --merge "$work/s1" "$work/s2" --out "$work/merged" --junit "$work/merged.xml"
python3 "$compare" "$work/whole" "$work/merged"
xmllint --noout --schema "$xsd" "$work/whole.xml" "$work/merged.xml"
# A merge missing a shard is incomplete: exit 1.
set +e
"$parity" sweep --merge "$work/s1" --out "$work/half" >/dev/null 2>&1
code=$?
set -e
[[ $code == 1 ]] || { echo "FAIL: a merge missing a shard exited $code, expected 1"; exit 1; }
# The same case twice: exit 2.
set +e
out=$("$parity" sweep --merge "$work/s1" "$work/whole" --out "$work/dup" 2>&1)
code=$?
set -e
echo "$out" | tail -1
[[ $code == 2 && "$out" == *"is in both"* ]] || { echo "FAIL: duplicate cases exited $code"; exit 1; }
echo "shards_merge: ok"
