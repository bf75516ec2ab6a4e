#!/usr/bin/env bash
# CTest label `megatron`: runs tools/megatron/golden.py live with real Megatron Core on a committed
# fixture's scenario and compares with the fixture. Needs the venv of ci/megatron-env; without it
# the test SKIPs (exit 77, CTest's SKIP_RETURN_CODE) and says why. It never creates the venv.
# Usage: golden_live.sh SOURCE_DIR PARITY_BINARY VARIANT
set -euo pipefail
src=$1 parity=$2 variant=$3
fixture="$src/tests/fixtures/megatron/$variant"
source "$(dirname "${BASH_SOURCE[0]}")/megatron_venv.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-golden-XXXXXX")
trap 'rm -rf "$work"' EXIT
golden=("$venv/bin/python" -W ignore "$src/tools/megatron/golden.py" "$fixture/scenario.json")
compare=("$venv/bin/python" -W ignore "$src/tools/megatron/compare_golden.py" "$fixture")

echo "== from the committed weights (--weights): the forward and backward must reproduce"
"${golden[@]}" "$work/loaded" --weights "$fixture/weights.safetensors" 2>"$work/loaded.log" ||
  { cat "$work/loaded.log"; exit 1; }
"${compare[@]}" "$work/loaded"
"$parity" diff "$fixture/trace.jsonl" "$work/loaded/trace.jsonl"

if [[ $variant != default ]]; then
  # The seeded reproduction checks Megatron's CPU initialization and golden.py's seeding, which
  # every variant shares: the default variant runs it (a Megatron run costs about 8 s of CI).
  echo "golden $variant: matches the committed fixture"
  exit 0
fi
echo "== from the seed: Megatron's CPU initialization must reproduce the committed weights"
"${golden[@]}" "$work/seeded" 2>"$work/seeded.log" || { cat "$work/seeded.log"; exit 1; }
"${compare[@]}" "$work/seeded" --same-weights-bytes
"$parity" diff "$fixture/trace.jsonl" "$work/seeded/trace.jsonl"
# The perturbed-weight check tests parity diff, not the variant: the default variant runs it.
echo "== one weight perturbed: parity diff names the first site it changes"
# Layer 1's fc2 weight changes layer 1's contribution first; layer 0 and layer 1's
# accumulator (= layer 0's output) stay as they were.
PYTHONPATH="$src/tools/megatron" "$venv/bin/python" -c '
import sys, safetensors_io as s
w, _ = s.load(sys.argv[1])
w["decoder.layers.1.mlp.linear_fc2.weight"][0, 0] += 0.05
s.save(w, sys.argv[2])' "$fixture/weights.safetensors" "$work/perturbed.safetensors"
"${golden[@]}" "$work/perturbed" --weights "$work/perturbed.safetensors" 2>"$work/perturbed.log" ||
  { cat "$work/perturbed.log"; exit 1; }
set +e
"$parity" diff "$fixture/trace.jsonl" "$work/perturbed/trace.jsonl" >"$work/diff.out"
code=$?
set -e
cat "$work/diff.out"
expected="traces differ: decoder.layers.1.residual_contribution (rank 0, step 0, microbatch 0, phase eager): "
if [[ $code -ne 1 ]] || ! grep -qF "$expected" "$work/diff.out"; then
  echo "FAIL: parity diff exited $code; expected 1 and a line starting '$expected'"
  exit 1
fi
echo "golden $variant: matches the committed fixture; a perturbed weight is found"
