#!/usr/bin/env python3
"""Writes the report page's test fixture (docs/sweep-report.md) from a real
`parity sweep --shrink`: the folder's matrix.json, results.jsonl, summary.json and
failures/ (the shrunk scenario files). Committed output: fixture/.

Usage: tests/sweep/make_fixture.py build/default/harness/cli/parity tests/sweep/fixture

Matrix: tp [1, 2, 3] x dtype [fp32, fp64] x inject [none, sqrt-before-sum, throw-rank=1]
on dp 2, one combination excluded: 11 cases run (4 pass, 4 sharded_reduction FAILs from
the injected code-path fault, shrunk; 3 rank failures from the injected throw), 6 are
invalid (tp 3 does not divide 4 heads), 1 excluded. Two of the metrics (a NaN and an Inf
count) are 0 in every case: the page folds them into one line.

The sweep runs in a temporary folder as `--out sweep-out`, so the repro commands read
`parity repro sweep-out/failures/...`; the host and the parity version are replaced by
fixed text so that regenerating changes only what the sweep measured.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

MATRIX = {
    "about": "tests/sweep/make_fixture.py: the report page's fixture (docs/sweep-report.md).",
    "axes": {
        "tp": [1, 2, 3],
        "dtype": ["fp32", "fp64"],
        "inject": [[], ["sqrt-before-sum"], ["throw-rank=1"]],
    },
    "base": {
        "dp": 2, "cp": 1, "sp": False, "graphs": "none", "recompute": "none", "timeout": 10,
        "metrics": ["layer-residual-contribution-l2", "global-output-logits-l2",
                    "layer-residual-accumulator-rms", "layer-residual-accumulator-nan-count",
                    "global-output-logits-inf-count"],
    },
    "exclude": [{"tp": 2, "dtype": "fp64", "inject": ["throw-rank=1"]}],
}
FILES = ["matrix.json", "results.jsonl", "summary.json"]


def main(parity, out):
    parity = os.path.abspath(parity)
    with tempfile.TemporaryDirectory() as tmp:
        matrix = os.path.join(tmp, "fixture-matrix.json")
        with open(matrix, "w") as f:
            json.dump(MATRIX, f, indent=1)
        run = subprocess.run([parity, "sweep", "fixture-matrix.json", "--out", "sweep-out",
                              "--shrink", "--shrink-steps", "6"], cwd=tmp, capture_output=True,
                             text=True)
        if run.returncode != 1:
            sys.exit(f"make_fixture: parity sweep exited {run.returncode}, expected 1:\n"
                     f"{run.stdout}{run.stderr}")
        folder = os.path.join(tmp, "sweep-out")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.join(out, "failures"))
        for name in FILES:
            shutil.copy(os.path.join(folder, name), os.path.join(out, name))
        for name in sorted(os.listdir(os.path.join(folder, "failures"))):
            shutil.copy(os.path.join(folder, "failures", name), os.path.join(out, "failures", name))
    results = os.path.join(out, "results.jsonl")
    records = [json.loads(line) for line in open(results) if line.strip()]
    with open(results, "w") as f:
        for r in records:
            r["host"] = "fixture-host"
            r["parity_version"] = "fixture"
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    outcomes = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    print(f"{out}: {len(records)} cases {outcomes}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
