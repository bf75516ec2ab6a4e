#!/usr/bin/env bash
# expect.sh [--also REGEX]... EXPECTED_CODE REGEX -- COMMAND...
# Runs COMMAND, prints its output, and passes iff it exits with EXPECTED_CODE
# and its combined stdout+stderr matches the extended REGEX (grep -E) and every
# --also REGEX. No wall-clock bound: CTest's TIMEOUT is the hang guard (a loaded
# 2-core machine must not fail a correct run).
set -uo pipefail
also=()
while [[ "${1:-}" == "--also" ]]; do also+=("$2"); shift 2; done
expected="$1"; regex="$2"; shift 2
[[ "${1:-}" == "--" ]] && shift
output="$("$@" 2>&1)"
code=$?
printf '%s\n' "$output"
echo "[expect] exit code $code (expected $expected)"
fail=0
if [[ "$code" != "$expected" ]]; then echo "[expect] FAIL: exit code $code, expected $expected"; fail=1; fi
for r in "$regex" "${also[@]}"; do
  if ! grep -Eq -- "$r" <<<"$output"; then echo "[expect] FAIL: output does not match: $r"; fail=1; fi
done
exit $fail
