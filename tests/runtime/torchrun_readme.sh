#!/usr/bin/env bash
# torchrun_readme.sh PARITY README [LIBTORCH_VERSION]: runs the README's torchrun line (the first
# line that starts with `torchrun `, $P = PARITY) under a torch >= 2 torchrun
# and passes iff it exits 0 and prints "run done: 4 rank(s)". torchrun comes
# from $PARITY_TORCH2_VENV/bin (ci/test makes that venv), else PATH. With none
# (or only torch 1.x, whose torchrun is broken on Debian), it prints why and
# exits 77: ctest reports SKIP.
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
# Any LibTorch under any torch >= 2 torchrun. LibTorch >= 2.1 speaks the agent's TCPStore protocol
# and its ranks are the agent store's clients; an older one cannot (torch 2.1 changed the
# protocol), so its ranks meet in a FileStore of their own on this node (env_rank.h). The run's
# line names the store; the FileStore's directory must be gone afterwards.
echo "parity built against LibTorch ${libtorch:-unknown}; torchrun is torch $version ($torchrun)"
major=${libtorch%%.*}; minor=${libtorch#*.}; minor=${minor%%.*}
if [[ ! "$major" =~ ^[0-9]+$ || ! "$minor" =~ ^[0-9]+$ ]]; then
  echo "no LibTorch version given (third argument): $libtorch"; exit 1
fi
if (( major > 2 || (major == 2 && minor >= 1) )); then
  store="TCPStore [^ ]* (torchrun agent's"
else
  store="FileStore [^ ]*/parity-torchrun-[^ ]*/store (one node"
fi
line="$(grep -m1 '^torchrun ' "$readme" | sed 's/  *#.*$//')"
[[ -n "$line" ]] || { echo "no torchrun line in $readme"; exit 1; }
cmd="${line/#torchrun /$torchrun }"
cmd="${cmd//\$P/$parity}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "running: $cmd (TMPDIR=$tmp)"
out="$(TMPDIR="$tmp" timeout 240 bash -c "$cmd" 2>&1)"; code=$?
echo "$out"
[[ $code == 0 ]] || { echo "exit $code"; exit 1; }
grep -q "run done: 4 rank(s)" <<<"$out" || { echo "no 'run done: 4 rank(s)' line"; exit 1; }
grep -q "run done: 4 rank(s).*$store" <<<"$out" || { echo "the run did not name the store: $store"; exit 1; }
# (torchrun leaves its own torchelastic_* log directory there.)
left="$(ls -A "$tmp" | grep '^parity')"
[[ -z "$left" ]] || { echo "parity left behind in TMPDIR: $left"; exit 1; }
