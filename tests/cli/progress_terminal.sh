#!/usr/bin/env bash
# progress_terminal.sh PARITY: on a terminal (a pseudo-terminal here) parity run
# and parity check show a progress line, rewritten in place ("\r", erase line)
# and erased before the final output; the rest of the output is what a log
# gets. With stdout not a terminal there is no such line at all.
set -euo pipefail
parity="$1"
python3 - "$parity" "$(dirname "${BASH_SOURCE[0]}")/../support" <<'PY'
import re, subprocess, sys
parity = sys.argv[1]
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[2])
import terminal
ERASE = "\r\x1b[K"

def on_terminal(args):
    code, text = terminal.on_terminal([parity] + args)
    text = text.replace("\r\n", "\n")  # the terminal's own line ends
    assert code == 0, text
    return text

def in_a_log(args):
    log = subprocess.run([parity] + args, stdout=subprocess.PIPE, check=True).stdout.decode()
    assert "\r" not in log and "\x1b" not in log, repr(log)
    return log

def without_line(text, prefix):
    # Every drawing of the line is ERASE + text up to the next ERASE or newline;
    # lines written above it start with ERASE too. Drop both kinds of ERASE and
    # the drawn text: what is left is the log's output.
    text = re.sub(re.escape(ERASE) + re.escape(prefix) + r"[^\r\n]*", "", text)
    return text.replace(ERASE, "")

def shape(text):
    # Timings differ from run to run: compare the lines with numbers of seconds masked.
    return re.sub(r"\d+\.\d+", "#", text)

# parity run: the line counts steps; the rows print above it as the steps end.
run = ["run", "--steps", "3"]
tty = on_terminal(run)
assert ERASE + "run: 0/3 steps, elapsed " in tty, repr(tty)
after = tty.rsplit(ERASE, 1)[1]  # the last erase: the line's, before the final output
assert not after.startswith("run: ") and "run done: 1 rank(s), 3 step(s)" in after, repr(tty)
log = in_a_log(run)
assert shape(without_line(tty, "run: ")) == shape(log), repr(tty) + "\n" + log
rows = [l for l in log.splitlines() if re.match(r"^ +\d+  ", l)]
assert [int(l.split()[0]) for l in rows] == [0, 1, 2], log

# parity check: the line names the run and its steps, then the property stage.
check = ["check", "--tp", "2", "--dp", "2", "--dtype", "fp64", "--graphs", "none",
         "--recompute", "none", "--metrics", "global-output-logits-l2"]
tty = on_terminal(check)
assert ERASE + "check: run (a) 1/4, 0/2 steps, elapsed " in tty, repr(tty)
assert ERASE + "check: run (a2) 4/4, " in tty, repr(tty)
assert ERASE + "check: 4/4 runs done, evaluating the properties, elapsed " in tty, repr(tty)
after = tty.rsplit(ERASE, 1)[1]
assert not after.startswith("check: ") and "check passed" in after, repr(tty)
log = in_a_log(check)
assert shape(without_line(tty, "check: ")) == shape(log), repr(tty) + "\n" + log
assert "check passed" in log, log
print("progress_terminal: ok")
PY
