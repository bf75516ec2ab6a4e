#!/usr/bin/env python3
"""compare_sweeps.py A B: exit 0 iff sweep folders A and B hold the same results.

Each case is recorded once per folder. Per case (by id): the outcome, every property's status, reason and errors, and every
metric row of the report; ignored: seconds, host and other timing fields. The
summaries must agree on everything but seconds, slowest and shard.
"""
import json
import sys


def cases(folder):
    """Each case's record; a case recorded twice (a resume that ran it again) fails."""
    out = {}
    with open(folder + "/results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["case"] in out:
                sys.exit("compare_sweeps: %s records case %r twice" % (folder, r["case"]))
            out[r["case"]] = r
    return out


def essence(r):
    report = r.get("report") or {}
    return {
        "index": r["index"],
        "outcome": r["outcome"],
        "assignment": r["assignment"],
        "properties": [(p["name"], p["status"], p["reason"], p["max_abs"], p["max_rel"])
                       for p in report.get("properties", [])],
        "metrics": report.get("metrics", []),
    }


def summary(folder):
    with open(folder + "/summary.json") as f:
        s = json.load(f)
    for k in ("seconds", "slowest", "shard"):
        s.pop(k, None)
    return s


def main(a, b):
    ca, cb = cases(a), cases(b)
    ok = True
    if sorted(ca) != sorted(cb):
        print("case sets differ: only in A:", sorted(set(ca) - set(cb)), "only in B:",
              sorted(set(cb) - set(ca)))
        ok = False
    for case in sorted(set(ca) & set(cb)):
        if essence(ca[case]) != essence(cb[case]):
            print("case differs:", case)
            ok = False
    if summary(a) != summary(b):
        print("summaries differ:\n", json.dumps(summary(a)), "\n", json.dumps(summary(b)))
        ok = False
    print("compare_sweeps: %d case(s) compared: %s" % (len(ca), "same" if ok else "DIFFERENT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
