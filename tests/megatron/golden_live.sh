#!/usr/bin/env bash
# CTest label `megatron`: runs tools/megatron/golden.py live with real Megatron Core on a committed
# fixture's scenario and compares with the fixture. Needs the venv of ci/megatron-env; without it
# the test SKIPs (exit 77, CTest's SKIP_RETURN_CODE) and says why. It never creates the venv.
# Usage: golden_live.sh SOURCE_DIR PARITY_BINARY VARIANT
set -euo pipefail
src=$1 parity=$2 variant=$3
fixture="$src/tests/fixtures/megatron/$variant"
venv="${PARITY_CACHE:-/var/cache/parity}/megatron-venv"
if ! ls "$venv"/.parity-megatron-core-* >/dev/null 2>&1; then
  echo "SKIP: no Megatron Core environment at $venv (run ci/megatron-env to create it)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-golden-XXXXXX")
trap 'rm -rf "$work"' EXIT
golden=("$venv/bin/python" -W ignore "$src/tools/megatron/golden.py" "$fixture/scenario.json")
compare=("$venv/bin/python" -W ignore "$src/tools/megatron/compare_golden.py" "$fixture")

echo "== from the committed weights (--weights): the forward and backward must reproduce"
"${golden[@]}" "$work/loaded" --weights "$fixture/weights.safetensors" 2>"$work/loaded.log" ||
  { cat "$work/loaded.log"; exit 1; }
"${compare[@]}" "$work/loaded"
"$parity" diff "$fixture/trace.jsonl" "$work/loaded/trace.jsonl"

echo "== from the seed: Megatron's CPU initialization must reproduce the committed weights"
"${golden[@]}" "$work/seeded" 2>"$work/seeded.log" || { cat "$work/seeded.log"; exit 1; }
"${compare[@]}" "$work/seeded" --same-weights-bytes
"$parity" diff "$fixture/trace.jsonl" "$work/seeded/trace.jsonl"
echo "golden $variant: matches the committed fixture"
