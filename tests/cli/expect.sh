#!/usr/bin/env bash
# expect.sh [--max-seconds N] EXPECTED_CODE REGEX -- COMMAND...
# Runs COMMAND, prints its output, and passes iff it exits with EXPECTED_CODE,
# its combined stdout+stderr matches the extended REGEX (grep -E), and (when
# given) it took at most N seconds.
set -uo pipefail
max_seconds=""
if [[ "${1:-}" == "--max-seconds" ]]; then max_seconds="$2"; shift 2; fi
expected="$1"; regex="$2"; shift 2
[[ "${1:-}" == "--" ]] && shift
start=$(date +%s.%N)
output="$("$@" 2>&1)"
code=$?
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
printf '%s\n' "$output"
echo "[expect] exit code $code (expected $expected), ${elapsed} s"
fail=0
if [[ "$code" != "$expected" ]]; then echo "[expect] FAIL: exit code $code, expected $expected"; fail=1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "[expect] FAIL: output does not match: $regex"; fail=1; fi
if [[ -n "$max_seconds" ]] && awk -v e="$elapsed" -v m="$max_seconds" 'BEGIN { exit !(e > m) }'; then
  echo "[expect] FAIL: took ${elapsed} s, more than $max_seconds s"; fail=1
fi
exit $fail
