#!/usr/bin/env python3
"""Writes a small sweep result folder (results.jsonl, summary.json) from real
`parity check --report` runs, in the schema `parity sweep` writes (docs/sweep.md),
for the report page's tests (docs/sweep-report.md). Committed output: fixture/.

Usage: tests/sweep/make_fixture.py build/default/harness/cli/parity tests/sweep/fixture

Matrix: tp [1, 2, 3] x dtype [fp32, fp64] x inject [none, sqrt-before-sum, throw-rank=1]
on dp 2: 12 cases run (passes, sharded_reduction FAILs from the injected code-path fault,
rank failures from the injected throw) and 6 are invalid (tp 3 does not divide 4 heads).
"""
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile

MATRIX = {
    "tp": [1, 2, 3],
    "dtype": ["fp32", "fp64"],
    "inject": [[], ["sqrt-before-sum"], ["throw-rank=1"]],
    "dp": [2],
}
AXES = ["tp", "dtype", "inject"]
FIXED = ["--dp", "2", "--cp", "1", "--sp=false", "--graphs", "none", "--recompute", "none",
         "--metrics", "layer-residual-contribution-l2,global-output-logits-l2,layer-residual-accumulator-rms",
         "--timeout", "10"]


def case_id(assignment):
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}"
                    for k, v in assignment.items())


def main(parity, out):
    os.makedirs(out, exist_ok=True)
    digest = hashlib.sha256(json.dumps(MATRIX, sort_keys=True).encode()).hexdigest()[:16]
    lines, invalid = [], []
    counts = {"passed": 0, "property_failed": 0, "rank_failure": 0}
    for index, values in enumerate(itertools.product(*(MATRIX[a] for a in AXES))):
        assignment = dict(zip(AXES, values))
        args = [parity, "check", "--tp", str(assignment["tp"]), "--dtype", assignment["dtype"]] + FIXED
        for fault in assignment["inject"]:
            args += ["--inject", fault]
        with tempfile.TemporaryDirectory() as tmp:
            report_path = os.path.join(tmp, "report.json")
            run = subprocess.run(args + ["--report", report_path], capture_output=True, text=True)
            report = json.load(open(report_path)) if os.path.exists(report_path) else None
        cid = case_id(assignment)
        if run.returncode == 2:
            invalid.append({"case": cid, "assignment": assignment,
                            "reason": run.stderr.strip().splitlines()[0]})
            continue
        outcome = {0: "passed", 1: "property_failed", 3: "rank_failure"}[run.returncode]
        counts[outcome] += 1
        name = f"case-{index:04d}"
        failing = outcome != "passed"
        if report is not None:
            report["scenario_source"] = "embedded default"
            report["scenario"]["report"] = "report.json"  # not the temporary folder's name
        lines.append({
            "schema": "parity-sweep-case", "version": 1, "matrix_digest": digest,
            "case": cid, "index": index, "assignment": assignment, "outcome": outcome,
            "seconds": round(report["wall_seconds"], 3) if report else 0.5,
            "host": "fixture-host", "backend": "reference", "parity_version": "0.1.0",
            "failure": run.stderr.strip() if outcome == "rank_failure" else "",
            "failure_file": f"failures/{name}.json" if failing else None,
            "repro": f"parity repro sweep-out/failures/{name}.json" if failing else None,
            "report": report,
        })
    summary = {
        "schema": "parity-sweep-summary", "version": 1, "matrix_digest": digest, "matrix": MATRIX,
        "axes": AXES, "total": len(lines) + len(invalid), "ran": len(lines),
        "passed": counts["passed"], "failed": counts["property_failed"],
        "rank_failures": counts["rank_failure"], "invalid": invalid, "excluded": 0,
        "seconds": round(sum(c["seconds"] for c in lines), 3),
        "slowest": [{"case": c["case"], "seconds": c["seconds"]}
                    for c in sorted(lines, key=lambda c: -c["seconds"])[:5]],
    }
    with open(os.path.join(out, "results.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"{out}: {len(lines)} cases ({counts}), {len(invalid)} invalid")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
