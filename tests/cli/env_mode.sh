#!/usr/bin/env bash
# env_mode.sh PARITY [ARGS...]: runs `PARITY selfcheck --launch env ARGS` as a
# 2-rank torchrun-style job on this machine and passes iff both ranks exit 0
# and rank 0 prints the table of both ranks. The port comes from
# `parity __free-port` (bind port 0, print it, close): another process could
# take it before rank 0's TCPStore binds it, so a bind failure is retried.
set -uo pipefail
parity="$1"; shift
for attempt in 1 2 3; do
  port="$("$parity" __free-port)" || exit 1
  dir="$(mktemp -d)"
  pids=()
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$parity" selfcheck --launch env --tp 2 --timeout 20 "$@" >"$dir/out.$rank" 2>&1 &
    pids+=($!)
  done
  codes=()
  for pid in "${pids[@]}"; do wait "$pid"; codes+=($?); done
  for rank in 0 1; do echo "--- rank $rank (exit ${codes[$rank]})"; cat "$dir/out.$rank"; done
  if grep -q "cannot bind TCPStore" "$dir/out.0"; then rm -rf "$dir"; echo "port $port taken; retrying"; continue; fi
  ok=0
  [[ "${codes[0]}" == 0 && "${codes[1]}" == 0 ]] || ok=1
  grep -Eq "self-check passed: 2 rank" "$dir/out.0" || ok=1
  grep -Eq "^ +1 +1 +0 +0 " "$dir/out.0" || ok=1
  rm -rf "$dir"
  exit $ok
done
exit 1
