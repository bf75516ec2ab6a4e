#!/usr/bin/env bash
# env_mode.sh PARITY LIBTORCH_VERSION [ARGS...]: runs `PARITY selfcheck --launch env ARGS` as a
# 2-rank job the way torchrun from torch 2.x starts one on one node: its agent serves the
# store on MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True. The agent is
# `parity __agent-store`, which binds port 0 (the kernel picks a free port: no
# race) and prints it. Passes iff both ranks exit 0, rank 0 prints the table
# of both ranks and names the store this LibTorch must use: the agent's from
# LibTorch 2.1 on, else a FileStore of the node's ranks, whose directory is gone after.
set -uo pipefail
parity="$1"; libtorch="$2"; shift 2
major=${libtorch%%.*}; minor=${libtorch#*.}; minor=${minor%%.*}
if [[ ! "$major" =~ ^[0-9]+$ || ! "$minor" =~ ^[0-9]+$ ]]; then
  echo "no LibTorch version given (second argument): $libtorch"; exit 1
fi
if (( major > 2 || (major == 2 && minor >= 1) )); then
  store="torchrun agent's"
else
  store="FileStore [^ ]*/parity-torchrun-[^ ]*-env-mode-test-p[0-9]*-a0/store (one node"
fi
coproc AGENT { exec "$parity" __agent-store; }
agent_pid=$AGENT_PID
read -r -t 60 port <&"${AGENT[0]}" || { echo "the agent store printed no port"; exit 1; }
dir="$(mktemp -d)"
mkdir "$dir/tmp"
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_RUN_ID=env-mode-test \
    TMPDIR="$dir/tmp" \
    "$parity" selfcheck --launch env --tp 2 --timeout 20 "$@" >"$dir/out.$rank" 2>&1 &
  pids+=($!)
done
codes=()
for pid in "${pids[@]}"; do wait "$pid"; codes+=($?); done
eval "exec ${AGENT[1]}>&-"  # end of its input: the agent exits
wait "$agent_pid"
for rank in 0 1; do echo "--- rank $rank (exit ${codes[$rank]})"; cat "$dir/out.$rank"; done
ok=0
[[ "${codes[0]}" == 0 && "${codes[1]}" == 0 ]] || ok=1
grep -Eq "self-check passed: 2 rank" "$dir/out.0" || ok=1
grep -Eq "^ +1 +1 +0 +0 " "$dir/out.0" || ok=1
grep -q "$store" "$dir/out.0" || { echo "rank 0 did not name the store: $store"; ok=1; }
[[ -z "$(ls -A "$dir/tmp")" ]] || { echo "left behind in TMPDIR: $(ls -A "$dir/tmp")"; ok=1; }
rm -rf "$dir"
exit $ok
