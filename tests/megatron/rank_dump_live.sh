#!/usr/bin/env bash
# CTest label `megatron`: a committed fixture's weights and batch run by `parity run --dump` on a
# TP x DP layout and by real Megatron Core on a Gloo world of the same layout (CPU processes,
# tools/megatron/rank_run.py); every rank's step 0 observations must be Megatron's same rank's
# tensors (tools/megatron/compare_rank_dump.py). Needs the venv of ci/megatron-env; without it the
# test SKIPs (exit 77, CTest's SKIP_RETURN_CODE) and says why. It never creates the venv.
# Usage: rank_dump_live.sh SOURCE_DIR PARITY_BINARY VARIANT TP DP
set -euo pipefail
src=$1 parity=$2 variant=$3 tp=$4 dp=$5
fixture="$src/tests/fixtures/megatron/$variant"
source "$(dirname "${BASH_SOURCE[0]}")/megatron_venv.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/parity-rank-dump-XXXXXX")
trap 'rm -rf "$work"' EXIT
python=("$venv/bin/python" -W ignore)
# The fixture's scenario as flags, its global batch over this layout's dp.
mapfile -t flags < <("${python[@]}" - "$fixture/scenario.json" "$dp" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
dp = int(sys.argv[2])
rows = s.pop("dp") * s.pop("microbatches")
for k, v in s.items():
    if isinstance(v, bool):
        print(("--" if v else "--no-") + k)
    else:
        print("--" + k)
        print(v)
print("--dp")
print(dp)
print("--microbatches")
print(rows // dp)
PY
)
"$parity" run --steps 1 --lr 0 --tp "$tp" "${flags[@]}" \
  --load-weights "$fixture/weights.safetensors" --load-batch "$fixture/batch.safetensors" \
  --dump "$work/dump" >"$work/parity.log" 2>&1 || { cat "$work/parity.log"; exit 1; }
"${python[@]}" "$src/tools/megatron/rank_run.py" "$fixture/scenario.json" \
  "$fixture/weights.safetensors" "$fixture/batch.safetensors" "$work/megatron" --tp "$tp" --dp "$dp" \
  >"$work/megatron.log" 2>&1 || { cat "$work/megatron.log"; exit 1; }
"${python[@]}" "$src/tools/megatron/compare_rank_dump.py" "$work/dump" "$work/megatron"
