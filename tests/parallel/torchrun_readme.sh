#!/usr/bin/env bash
# torchrun_readme.sh PARITY README [LIBTORCH_VERSION]: runs the README's torchrun line (the first
# line that starts with `torchrun `, $P = PARITY) under a torch >= 2 torchrun
# and passes iff it exits 0 and prints "run done: 4 rank(s)". torchrun comes
# from $PARITY_TORCH2_VENV/bin, else PATH. With none (or only torch 1.x, whose
# torchrun is broken on Debian), it prints why and exits 77: ctest reports SKIP.
set -uo pipefail
parity="$1"; readme="$2"; libtorch="${3:-}"
candidates=()
[[ -n "${PARITY_TORCH2_VENV:-}" ]] && candidates+=("$PARITY_TORCH2_VENV/bin/torchrun")
command -v torchrun >/dev/null && candidates+=("$(command -v torchrun)")
torchrun=""; why="no torchrun in \$PARITY_TORCH2_VENV/bin (${PARITY_TORCH2_VENV:-unset}) or on PATH"
for t in "${candidates[@]}"; do
  [[ -x "$t" ]] || continue
  # The interpreter torchrun runs under knows the torch version.
  python="$(head -1 "$t" | sed -n 's/^#! *//p' | awk '{print $1}')"
  version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  if [[ "${version%%.*}" =~ ^[0-9]+$ && "${version%%.*}" -ge 2 ]]; then torchrun="$t"; break; fi
  why="$t is torch ${version:-unknown}, not >= 2"
done
if [[ -z "$torchrun" ]]; then echo "SKIP: $why"; exit 77; fi
# torchrun's agent serves the store; parity's ranks connect to it as clients, which works only
# within one LibTorch major version (1.13's TCPStore client and 2.x's server do not speak the same
# protocol: the first group fails with "Broken pipe"). The torch2 preset runs this test.
if [[ -n "$libtorch" && "${libtorch%%.*}" != "${version%%.*}" ]]; then
  echo "SKIP: parity is built against LibTorch $libtorch, torchrun is torch $version (another major version: the store protocols differ; the torch2 preset runs this)"
  exit 77
fi
line="$(grep -m1 '^torchrun ' "$readme" | sed 's/  *#.*$//')"
[[ -n "$line" ]] || { echo "no torchrun line in $readme"; exit 1; }
cmd="${line/#torchrun /$torchrun }"
cmd="${cmd//\$P/$parity}"
echo "running: $cmd"
out="$(timeout 240 bash -c "$cmd" 2>&1)"; code=$?
echo "$out"
[[ $code == 0 ]] || { echo "exit $code"; exit 1; }
grep -q "run done: 4 rank(s)" <<<"$out" || { echo "no 'run done: 4 rank(s)' line"; exit 1; }
