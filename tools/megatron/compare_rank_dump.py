#!/usr/bin/env python3
"""compare_rank_dump.py: each rank's observations of a `parity run --dump` against rank_run.py's.

Usage:
    python tools/megatron/compare_rank_dump.py DUMP MEGATRON_DIR

For every global rank r (whose microbatches rank_run.py read from the rows Megatron's sampler gives
its DP rank), every step 0 record of r's trace at a site rank_run.py observed (residual_accumulator,
residual_contribution, output_logits) must hold, in observations.rank{r}.safetensors, the tensor
Megatron's rank r holds for the same local microbatch and site (same shape; max |a - b| within
1e-5 of max |b|). Both sides must have observed the same (microbatch, site) pairs. As a control
that ranks are told apart, where two ranks' tensors of a pair differ on Megatron's side, parity's
rank r must not equal Megatron's other rank. Exit 0 all equal, 1 not, 2 bad input.
"""
import glob
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

SITES = ("residual_accumulator", "residual_contribution", "output_logits")
TOLERANCE = 1e-5


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def parity_rank(dump, rank):
    """(microbatch, site) -> tensor, from the trace and the rank's observations file."""
    values, _ = safetensors_io.load(os.path.join(dump, f"observations.rank{rank}.safetensors"))
    out = {}
    with open(os.path.join(dump, "trace.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["rank"] != rank or r["step"] != 0 or r["kind"] not in SITES:
                continue
            key = f"seq{r['seq']:05d}.{r['site']}"
            if key not in values:
                sys.exit(f"compare_rank_dump.py: {dump}: rank {rank} kept no values of {key}")
            out[(r["microbatch"], r["site"])] = values[key]
    return out


def megatron_rank(folder, rank):
    values, _ = safetensors_io.load(os.path.join(folder, f"megatron.rank{rank}.safetensors"))
    out = {}
    for key, t in values.items():
        mb, site = key.split(".", 1)
        out[(int(mb[2:]), site)] = t
    with open(os.path.join(folder, f"megatron.rank{rank}.json")) as f:
        return out, json.load(f)


def main():
    if len(sys.argv) != 3:
        print("usage: compare_rank_dump.py DUMP MEGATRON_DIR", file=sys.stderr)
        sys.exit(2)
    dump, folder = sys.argv[1:]
    ranks = len(glob.glob(os.path.join(folder, "megatron.rank*.safetensors")))
    if ranks == 0 or len(glob.glob(os.path.join(dump, "observations.rank*.safetensors"))) != ranks:
        print(f"compare_rank_dump.py: {dump} and {folder} hold different numbers of ranks",
              file=sys.stderr)
        sys.exit(2)
    failures, compared, controls = [], 0, 0
    megatron = [megatron_rank(folder, r) for r in range(ranks)]
    for r in range(ranks):
        theirs, info = megatron[r]
        mine = parity_rank(dump, r)
        if set(mine) != set(theirs):
            failures.append(f"rank {r}: parity observed {sorted(set(mine) - set(theirs))[:4]} "
                            f"that Megatron did not, Megatron {sorted(set(theirs) - set(mine))[:4]}")
        for key in sorted(set(mine) & set(theirs)):
            a, b = mine[key], theirs[key]
            where = f"rank {r} (tp {info['tp']}, dp {info['dp']}) microbatch {key[0]} {key[1]}"
            if a.shape != b.shape:
                failures.append(f"{where}: parity {list(a.shape)}, Megatron {list(b.shape)}")
                continue
            e = rel(a, b)
            if e > TOLERANCE:
                failures.append(f"{where}: max rel difference {e:.3g}")
            compared += 1
            for other in range(ranks):
                o = megatron[other][0].get(key)
                if other != r and o is not None and o.shape == b.shape and rel(o, b) > 1e-3:
                    controls += 1
                    if rel(a, o) <= TOLERANCE:
                        failures.append(f"{where}: parity's rank {r} equals Megatron's rank {other}")
        if len(info["samples"]) == 0:
            failures.append(f"rank {r}: Megatron's sampler gave it no microbatch")
    for f in failures[:30]:
        print("FAIL", f)
    print(f"per-rank dump vs Megatron Core on Gloo: {ranks} ranks, {compared} tensors compared, "
          f"{controls} cross-rank controls; {len(failures)} differences")
    if compared == 0:
        sys.exit(1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
