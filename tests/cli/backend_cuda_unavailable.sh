#!/usr/bin/env bash
# backend_cuda_unavailable.sh PARITY: on a machine without a GPU, `parity check --backend cuda`
# exits 2 with exactly one line naming the key and why (no CUDA device, or a parity built
# without the CUDA backend) and writes nothing else. Skips (77) where a GPU is visible: there
# the backend runs (label gpu, ci/gpu-validate).
set -uo pipefail
parity=$1
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: a GPU is visible here; --backend cuda runs (ci/gpu-validate checks it)"
  exit 77
fi
out=$("$parity" check --backend cuda 2>&1)
code=$?
printf '%s\n' "$out"
[[ $code == 2 ]] || { echo "FAIL: exit code $code, expected 2"; exit 1; }
[[ $(printf '%s\n' "$out" | wc -l) == 1 ]] || { echo "FAIL: expected one line"; exit 1; }
grep -Eq '^--backend cuda: (no CUDA device is visible|not built into this parity)' <<<"$out" ||
  { echo "FAIL: the line does not name --backend cuda and why"; exit 1; }
echo "ok"
