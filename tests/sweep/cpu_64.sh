#!/usr/bin/env bash
# cpu_64.sh PARITY MATRIX DIR: the 64-case CPU matrix, --jobs 2, into a fresh
# DIR: exit 0 and every case ran (docs/benchmarks.md has its timing).
set -euo pipefail
rm -rf "$3"
bash "$(dirname "$0")/../cli/expect.sh" 0 "cases +64 \(64 ran, 0 not run\)" -- \
  "$1" sweep "$2" --out "$3" --jobs 2
