#!/usr/bin/env python3
"""ci/mutate's own test (CTest ci.mutate): classification, resuming, seeded samples, and the
mutated file restored on Ctrl-C, SIGTERM and (by the next run) SIGKILL.

A stand-in build (`true`) and test (a grep for the guarded comparison) replace ninja and
parity_tests, so no C++ is compiled. Exits 77 (CTest: skipped) with the reason when ci/mutate
has no universalmutator venv (tests never install it: .ci/run runs `ci/mutate --venv`).

Usage: test_mutate.py SOURCE_DIR
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(sys.argv[1])
# No test reaches the network: ci/mutate uses the venv .ci/run made (`ci/mutate --venv`), or
# this test SKIPs.
os.environ["PARITY_MUTATE_OFFLINE"] = "1"
MUTATE = os.path.join(ROOT, "ci", "mutate")
SAMPLE = """#include <cstdint>

// clamp_low: a comment ci/mutate must never mutate
int clamp_low(int x) {
  /* nor this
     block comment */
  if (x < 0) {
    return 0;
  }
  return x + 0;
}
"""
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message)


def run(args, **kwargs):
    return subprocess.run([MUTATE] + args, capture_output=True, text=True, **kwargs)


def records(path):
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_quietly(pid):
    if pid and alive(pid):
        os.kill(pid, signal.SIGKILL)


def slow_when_killing(source, pid_file):
    """A test command that passes at once where the guard stays, and otherwise (a mutant that
    would be killed) writes its pid to pid_file and sleeps: the moment to send a signal."""
    return (f"grep -q 'x < 0' {shlex.quote(source)} || "
            f"{{ echo $$ > {shlex.quote(pid_file)}.partial; "
            f"mv {shlex.quote(pid_file)}.partial {shlex.quote(pid_file)}; exec sleep 600; }}")


def wait_until_sleeping(child, source, pid_file):
    """Polls until the slow test command runs on a mutant: False if ci/mutate ended first."""
    while child.poll() is None:
        if os.path.exists(pid_file):
            return open(source).read() != SAMPLE
        time.sleep(0.05)
    return False


def main():
    with tempfile.TemporaryDirectory(prefix="parity-ci-mutate-") as tmp:
        source = os.path.join(tmp, "sample.cpp")
        with open(source, "w") as f:
            f.write(SAMPLE)
        build = os.path.join(tmp, "build")
        results = os.path.join(tmp, "results.jsonl")
        # The stand-in test: every line of guards.txt must still be in the file.
        guards = os.path.join(tmp, "guards.txt")
        with open(guards, "w") as f:
            f.write("x < 0\n")
        guard = (f"while read -r g; do grep -qF \"$g\" {shlex.quote(source)} || exit 1; "
                 f"done < {shlex.quote(guards)}")
        common = ["--build-dir", build, "--build-command", "true", "--results", results]

        first = run(common + ["--test-command", guard, source])
        if first.returncode != 0 and "cannot make its venv" in first.stderr:
            print("SKIPPED: ci/mutate has no universalmutator venv (make it once with "
                  "`ci/mutate --venv`, as .ci/run does):\n"
                  + first.stderr[-2000:])
            sys.exit(77)
        check(first.returncode == 0, f"a plain run exits 0, not {first.returncode}: "
              + first.stderr[-2000:])
        check(open(source).read() == SAMPLE, "the file is restored after a plain run")
        done = records(results)
        check(len(done) > 5, f"a plain run records every mutant ({len(done)} recorded)")
        for r in done:
            check(r["line"] in (4, 7, 8, 9, 10, 11),
                  f"only code lines are mutated, not line {r['line']}: {r['mutant']!r}")
            killed = r["line"] == 7 and "x < 0" not in r["mutant"]
            check(r["status"] == ("killed" if killed else "survived"),
                  f"line {r['line']} {r['mutant']!r} is {r['status']}")
            if r["status"] == "killed":
                check(r["test"] == "exit 1", f"the killing test is named: {r['test']!r}")
        killed = sum(r["status"] == "killed" for r in done)
        check(f"killed {killed}, survived {len(done) - killed}, equivalent 0, invalid 0"
              in first.stdout, "the summary line counts what the results file holds:\n"
              + first.stdout[-600:])
        score = f"{100 * killed / len(done):.0f}%" if done else "n/a"
        check(f"mutation score {source}: {score}" in first.stdout
              or f"mutation score {os.path.relpath(source, ROOT)}: {score}" in first.stdout,
              f"the score is killed / (killed + survived) = {score}")

        again = run(common + ["--test-command", guard, source])
        check(again.returncode == 0 and again.stdout.count("(earlier run)") == len(done)
              and len(records(results)) == len(done),
              "a rerun takes every result from the results file and tests nothing")

        # A new guard ("a test added for the survivors"): only the survivors are tested again.
        with open(guards, "a") as f:
            f.write("return x + 0;\n")
        retest = run(common + ["--test-command", guard, "--retest-survivors", source])
        latest = {r["key"]: r for r in records(results)}
        survivors = [r for r in done if r["status"] == "survived"]
        check(retest.returncode == 0 and retest.stdout.count("(earlier run)") == killed
              and len(records(results)) == len(done) + len(survivors),
              "--retest-survivors tests the survivors and only them")
        now_killed = [r for r in survivors if r["line"] == 10 and "return x + 0;" not in r["mutant"]]
        check(now_killed and all(latest[r["key"]]["status"] == "killed" for r in now_killed),
              f"survivors the new guard catches are killed now ({len(now_killed)})")

        listed = [run(common + ["--list", "--sample", "3", "--seed", str(seed), source]).stdout
                  for seed in (7, 7, 8)]
        check(listed[0] == listed[1] and listed[0].count("    + ") >= 3,
              "--list --sample 3 --seed 7 prints the same three mutants twice")
        check(listed[0] != listed[2], "another seed draws another sample")

        # Ctrl-C and SIGTERM while a mutant is under test: restored, exit 130, nothing left.
        for signum in (signal.SIGINT, signal.SIGTERM):
            pid_file = os.path.join(tmp, f"sleeper-{signum.name}.pid")
            sleeper = slow_when_killing(source, pid_file)
            child = subprocess.Popen([MUTATE] + common[:-1] + [os.path.join(tmp, "slow.jsonl"),
                                     "--test-command", sleeper, source],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            mutated = wait_until_sleeping(child, source, pid_file)
            check(mutated, f"a mutant is under test before {signum.name}")
            child.send_signal(signum)
            _, err = child.communicate()
            check(child.returncode == 130, f"{signum.name}: exit 130, not {child.returncode}")
            check(open(source).read() == SAMPLE, f"{signum.name}: the file is restored")
            check("every file restored" in err, f"{signum.name} says so: {err[-300:]}")
            check(not os.listdir(os.path.join(build, "mutate-backup")),
                  f"{signum.name}: no backup left behind")
            sleeper_pid = int(open(pid_file).read() or 0) if os.path.exists(pid_file) else 0
            check(sleeper_pid and not alive(sleeper_pid),
                  f"{signum.name}: the running test command is ended too")
            kill_quietly(sleeper_pid)

        # SIGKILL cannot be trapped: the next run puts the original back first.
        pid_file = os.path.join(tmp, "sleeper.pid")
        child = subprocess.Popen([MUTATE] + common + ["--test-command",
                                 slow_when_killing(source, pid_file), source],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_until_sleeping(child, source, pid_file):
            child.kill()
            child.wait()
            kill_quietly(int(open(pid_file).read() or 0))  # the orphaned test command
            check(open(source).read() != SAMPLE, "after SIGKILL the mutant is still there")
            recovered = run(common + ["--list", source])
            check(open(source).read() == SAMPLE, "the next run restores the file")
            check(f"restored {source}" in recovered.stderr,
                  "the next run says it restored it: " + recovered.stderr[-300:])
        else:
            check(False, "a mutant is under test before SIGKILL")

        bad = run(common + ["--sample", "0", source])
        check(bad.returncode == 2 and "--sample 0: must be at least 1" in bad.stderr,
              f"--sample 0 exits 2 naming the rule: {bad.returncode} {bad.stderr!r}")
        missing = run(common + [os.path.join(tmp, "none.cpp")])
        check(missing.returncode == 2 and "none.cpp: must be an existing C++ file"
              in missing.stderr, f"a missing FILE exits 2: {missing.stderr!r}")
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
