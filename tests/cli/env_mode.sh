#!/usr/bin/env bash
# env_mode.sh PARITY [ARGS...]: runs `PARITY selfcheck --launch env ARGS` as a
# 2-rank job the way torchrun from torch 2.x starts one: its agent serves the
# store on MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True. The agent is
# `parity __agent-store`, which binds port 0 (the kernel picks a free port: no
# race) and prints it. Passes iff both ranks exit 0 and rank 0 prints the table
# of both ranks.
set -uo pipefail
parity="$1"; shift
coproc AGENT { exec "$parity" __agent-store; }
agent_pid=$AGENT_PID
read -r -t 60 port <&"${AGENT[0]}" || { echo "the agent store printed no port"; exit 1; }
dir="$(mktemp -d)"
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 \
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
grep -q "torchrun agent's" "$dir/out.0" || { echo "rank 0 did not use the agent's store"; ok=1; }
rm -rf "$dir"
exit $ok
