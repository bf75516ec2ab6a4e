#!/usr/bin/env bash
# CTest label `megatron`: checkpoints written by real Megatron Core load into parity at layouts
# other than the one that saved them and reproduce Megatron's loss and gradients.
# tools/megatron/save_checkpoint.py writes the committed fixture's weights as a legacy
# (--ckpt-format torch) checkpoint at TP 2 and at TP 2 x PP 2, and as torch_dist checkpoints at
# the same layouts, and its model.state_dict() alone (torch.save of the OrderedDict with
# `_extra_state` entries); parity loads these directly and the torch_dist ones through
# tools/megatron/convert_torch_dist.py, runs one step on the fixture's batch at TP 1, CP 2 and DP 2
# with --dump, and compare_golden.py requires the fixture's weights bit for bit and its logits,
# loss (rel 1e-5) and gradients (rel 1e-4). Needs the venv of ci/megatron-env; without it the test
# SKIPs (exit 77, CTest's SKIP_RETURN_CODE) and says why. It never creates the venv.
# Usage: checkpoint_live.sh SOURCE_DIR PARITY_BINARY VARIANT [full|legacy-tp2]
# legacy-tp2 (CI's second variant, to keep the label's time down): only the legacy checkpoint at
# TP 2, at the three layouts; full (the default) everything above.
set -euo pipefail
src=$1 parity=$2 variant=$3 scope=${4:-full}
layouts=("2 1" "2 2")
sources=(tp2pp1/legacy tp2pp2/legacy tp2pp1/converted.safetensors tp2pp2/converted.safetensors
  tp2pp1/state_dict.pt)
if [[ $scope == legacy-tp2 ]]; then
  layouts=("2 1")
  sources=(tp2pp1/legacy)
elif [[ $scope != full ]]; then
  echo "checkpoint_live.sh: scope $scope: must be full or legacy-tp2" >&2
  exit 2
fi
fixture="$src/tests/fixtures/megatron/$variant"
source "$(dirname "${BASH_SOURCE[0]}")/megatron_venv.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-checkpoint-XXXXXX")
trap 'rm -rf "$work"' EXIT
python=("$venv/bin/python" -W ignore)
tools="$src/tools/megatron"

for layout in "${layouts[@]}"; do
  read -r tp pp <<<"$layout"
  echo "== Megatron Core saves the $variant fixture at TP $tp x PP $pp"
  "${python[@]}" "$tools/save_checkpoint.py" "$fixture" "$work/tp${tp}pp${pp}" --tp "$tp" --pp "$pp" \
    >"$work/save.log" 2>&1 || { cat "$work/save.log"; exit 1; }
  "${python[@]}" "$tools/convert_torch_dist.py" "$fixture/scenario.json" \
    "$work/tp${tp}pp${pp}/torch_dist" "$work/tp${tp}pp${pp}/converted.safetensors" \
    >"$work/convert.log" 2>&1 || { cat "$work/convert.log"; exit 1; }
done

# The scenario's keys as parity flags; the fixture's global batch (dp x microbatches) is kept at
# every layout.
read -r -a model < <("${python[@]}" -c '
import json, sys
s = json.load(open(sys.argv[1]))
s.pop("dp"); s.pop("microbatches")
flags = []
for k, v in s.items():
    flags += [("--" if v else "--no-") + k] if isinstance(v, bool) else ["--" + k, str(v)]
print(" ".join(flags))' "$fixture/scenario.json")
global=$("${python[@]}" -c 'import json, sys; s = json.load(open(sys.argv[1]))
print(s["dp"] * s["microbatches"])' "$fixture/scenario.json")

echo "== parity names the converter for a torch_dist folder"
set +e
"$parity" run --steps 1 --load-weights "$work/tp2pp1/torch_dist" "${model[@]}" >"$work/dist.out" 2>&1
code=$?
set -e
if [[ $code -ne 2 ]] || ! grep -q "convert_torch_dist.py" "$work/dist.out"; then
  cat "$work/dist.out"
  echo "FAIL: exit $code; expected 2 and a line naming convert_torch_dist.py"
  exit 1
fi

for weights in "${sources[@]}"; do
  for layout in "--dp 1" "--cp 2" "--dp 2"; do
    read -r -a flags <<<"$layout"
    dp=1
    [[ ${flags[0]} == --dp ]] && dp=${flags[1]}
    echo "== parity loads $weights at $layout"
    rm -rf "$work/dump"
    "$parity" run --steps 1 --load-weights "$work/$weights" --load-batch "$fixture/batch.safetensors" \
      --dump "$work/dump" "${model[@]}" "${flags[@]}" --microbatches $((global / dp)) \
      >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
    "${python[@]}" "$tools/compare_golden.py" "$fixture" "$work/dump" --same-weights-bytes
  done
done
echo "checkpoint $variant: Megatron Core's legacy and torch_dist checkpoints at TP 2 and TP 2 x PP 2" \
  "and its raw state dict load at TP 1, CP 2 and DP 2 and match the fixture"
