#!/usr/bin/env bash
# tests/runtime/stress.sh [N] [BUILD_DIR]: the launcher and runtime tests N
# times in a row (default 30) under load, counting failures; each failed
# repetition's output is kept in $STRESS_LOGS (default /tmp/parity-stress).
#
# Load: two busy loops (one per core of the 2-core machine) for the whole run,
# beside whatever else runs. Each repetition runs, at the same time:
#  - parity_tests, every suite that launches ranks or exercises the runtime
#    (threads, processes and env ranks; Gloo collectives; the supervisor);
#  - the CLI tests that launch ranks (ctest -R, one at a time).
# Exit 0 iff every repetition passed. Not part of ci/test (about 2 minutes a
# repetition on the 2-core machine); docs/benchmarks.md ("Flakiness") has the
# results.
set -uo pipefail
n="${1:-30}"
build="${2:-build/default}"
logs="${STRESS_LOGS:-/tmp/parity-stress}"
mkdir -p "$logs"
filter='Launcher.*:LaunchMapping.*:ProcessesMode.*:RankWorker.*:GlooRuntime.*:*GlooCollectives.*'
filter+=':*GlooAllToAll*:Communicator.*:RankStatus.*:ProcessGroups.*:*Supervisor.*'
cli='^cli\.(selfcheck_|check_self_check_flag|crash_rank_|throw_rank_|hang_rank_|env_mode_2'
cli+='|env_world_mismatch|run_throw_rank|run_trace_processes|run_trace_single|run_long_compute)'

busy=()
for core in 1 2; do
  ( while :; do :; done ) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT

failed=0
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  "$build/tests/parity_tests" --gtest_filter="$filter" >"$logs/gtest.$i.log" 2>&1 &
  gtest=$!
  ctest --test-dir "$build" -R "$cli" --output-on-failure >"$logs/cli.$i.log" 2>&1
  cli_rc=$?
  wait "$gtest"
  gtest_rc=$?
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [[ $gtest_rc == 0 && $cli_rc == 0 ]]; then
    rm -f "$logs/gtest.$i.log" "$logs/cli.$i.log"
    echo "repetition $i: pass ($(($(date +%s) - start)) s, load $load)"
  else
    failed=$((failed + 1))
    echo "repetition $i: FAIL (gtest $gtest_rc, cli $cli_rc; logs in $logs/*.$i.log; load $load)"
    grep -E '^\[  FAILED  \]|Failed|\*\*\*' "$logs/gtest.$i.log" "$logs/cli.$i.log" | head -20
  fi
done
echo "$((n - failed))/$n repetitions passed"
[[ $failed == 0 ]]
