#!/usr/bin/env bash
# cpu_64.sh PARITY MATRIX DIR: the README's two sweep lines (cli.readme_lines leaves them
# here): the 64-case CPU matrix, --jobs 2, with a JUnit file, into a fresh DIR: exit 0 and
# every case ran; then the same matrix against it as a baseline: exit 0, nothing moved
# (docs/benchmarks.md has the timing).
set -euo pipefail
rm -rf "$3"
mkdir -p "$3"
expect="$(dirname "$0")/../cli/expect.sh"
bash "$expect" 0 "cases +64 \(64 ran, 0 not run\)" -- \
  "$1" sweep "$2" --out "$3/sweep" --jobs 2 --junit "$3/sweep.xml"
test -s "$3/sweep.xml"
bash "$expect" 0 "cases +64 \(64 ran, 0 not run\)" -- \
  "$1" sweep "$2" --out "$3/next" --baseline "$3/sweep"
