#!/usr/bin/env bash
# CTest label `megatron`: Megatron Core's pipeline schedules, run stage by stage on the CPU with
# recording mocks by tools/megatron/pipeline_schedules.py over its grid, against parity's
# (pipeline_schedule_conformance). Needs the venv of ci/megatron-env; without it the test SKIPs
# (exit 77, CTest's SKIP_RETURN_CODE) and says why. It never creates the venv.
# Usage: pipeline_schedules_live.sh SOURCE_DIR CONFORMANCE_BINARY
set -euo pipefail
src=$1 conformance=$2
venv="${PARITY_CACHE:-/var/cache/parity}/megatron-venv"
if ! ls "$venv"/.parity-megatron-core-* >/dev/null 2>&1; then
  echo "SKIP: no Megatron Core environment at $venv (run ci/megatron-env to create it)"
  exit 77
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-pipeline-schedules-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" -W ignore "$src/tools/megatron/pipeline_schedules.py" "$work/megatron.json" \
  2>"$work/megatron.log" || { cat "$work/megatron.log"; exit 1; }
"$conformance" "$work/megatron.json"
