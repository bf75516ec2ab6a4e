#!/usr/bin/env bash
# CTest label `megatron`: a tools/megatron script computes Megatron Core's answers live over its
# grid (layer_offsets.py: the pipeline layer placement; pipeline_schedules.py: the schedules run
# stage by stage with recording mocks; rank_layouts.py: what each rank holds, on Gloo worlds of
# CPU processes), and parity's conformance executable compares them
# (pipeline_layout_conformance, pipeline_schedule_conformance, rank_layout_conformance). Needs the venv of
# ci/megatron-env; without it the test SKIPs (exit 77, CTest's SKIP_RETURN_CODE) and says why.
# It never creates the venv.
# Usage: tool_live.sh SOURCE_DIR TOOL.py CONFORMANCE_BINARY
set -euo pipefail
src=$1 tool=$2 conformance=$3
source "$(dirname "${BASH_SOURCE[0]}")/megatron_venv.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-${tool%.py}-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" -W ignore "$src/tools/megatron/$tool" "$work/megatron.json" \
  2>"$work/megatron.log" || { cat "$work/megatron.log"; exit 1; }
"$conformance" "$work/megatron.json"
