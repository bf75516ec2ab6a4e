#!/usr/bin/env bash
# progress_terminal.sh PARITY MATRIX: on a terminal (a pseudo-terminal here) a
# sweep's progress is one line rewritten in place ("\r", erase line); with
# stdout not a terminal (a CI log) there is no such line: one plain line per case.
set -euo pipefail
parity="$1"; matrix="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
python3 - "$parity" "$matrix" "$work" "$(dirname "${BASH_SOURCE[0]}")/../support" <<'PY'
import subprocess, sys
parity, matrix, work, support = sys.argv[1:]
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, support)
import terminal
args = [parity, "sweep", matrix, "--out", work + "/tty", "--shard", "3/4"]
# On a pseudo-terminal: stdout is a TTY.
code, tty = terminal.on_terminal(args)
assert code == 0, tty
assert "\r\x1b[K[2/2] 0 failed, elapsed " in tty, repr(tty)
assert ": passed " not in tty, "a line per case on a terminal: " + repr(tty)
# Not a terminal: no updating line, one line per case.
log = subprocess.run(args[:4] + [work + "/log"] + args[5:], stdout=subprocess.PIPE,
                     check=True).stdout.decode()
assert "\r" not in log and "\x1b" not in log, repr(log)
assert log.count(": passed ") == 2, log
print("progress_terminal: ok")
PY
