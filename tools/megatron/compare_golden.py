#!/usr/bin/env python3
"""compare_golden.py: compares two golden.py output folders (a committed fixture and a live run).

Usage: python tools/megatron/compare_golden.py EXPECTED_DIR ACTUAL_DIR [--same-weights-bytes]

ACTUAL_DIR may also be a `parity run --steps 1 --dump` folder (logits, loss and grads files instead
of expected.safetensors; tests/megatron/checkpoint_live.sh compares parity's run on a checkpoint
with the fixture so).

Checks: the batches are identical; the weights hold the same keys and shapes (and, with
--same-weights-bytes, the same bytes); logits and loss within fp32 rel 1e-5 and every gradient
within rel 1e-4 (the conformance tolerances), each measured as max|a - b| / max|b| over the tensor.
Prints one line per tensor group with the largest error seen; exits 1 on a difference, 2 on bad
input. The traces are compared by `parity diff` (the C++ side), not here.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def load(folder, name):
    path = os.path.join(folder, name)
    try:
        return safetensors_io.load(path)[0]
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_golden.py: {path}: {e}", file=sys.stderr)
        sys.exit(2)


def load_outputs(folder):
    """expected.safetensors of a golden.py folder, or a parity dump's logits, loss and grads."""
    if not os.path.exists(os.path.join(folder, "expected.safetensors")) and os.path.exists(
            os.path.join(folder, "manifest.json")):
        out = {}
        for name in ("logits.safetensors", "loss.safetensors", "grads.safetensors"):
            out.update(load(folder, name))
        return out
    return load(folder, "expected.safetensors")


def rel_error(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def main():
    p = argparse.ArgumentParser()
    p.add_argument("expected")
    p.add_argument("actual")
    p.add_argument("--same-weights-bytes", action="store_true")
    a = p.parse_args()
    failures = []

    def same_keys(what, x, y):
        if sorted(x) != sorted(y):
            failures.append(f"{what}: keys differ: only expected {sorted(set(x) - set(y))}, "
                            f"only actual {sorted(set(y) - set(x))}")
            return False
        for k in x:
            if x[k].shape != y[k].shape or x[k].dtype != y[k].dtype:
                failures.append(f"{what}: {k}: {x[k].dtype} {list(x[k].shape)} vs "
                                f"{y[k].dtype} {list(y[k].shape)}")
                return False
        return True

    bx, by = load(a.expected, "batch.safetensors"), load(a.actual, "batch.safetensors")
    if same_keys("batch", bx, by):
        for k in bx:
            if not bx[k].equal(by[k]):
                failures.append(f"batch: {k} differs")
    print("batch: identical" if not failures else "batch: differs")

    wx, wy = load(a.expected, "weights.safetensors"), load(a.actual, "weights.safetensors")
    if same_keys("weights", wx, wy):
        differing = [k for k in wx if not wx[k].equal(wy[k])]
        print(f"weights: {len(wx)} tensors, {len(differing)} differ bitwise")
        if a.same_weights_bytes and differing:
            failures.append(f"weights: {differing[0]} differs (and {len(differing) - 1} more); "
                            "the seeded initialization did not reproduce")

    ex, ey = load(a.expected, "expected.safetensors"), load_outputs(a.actual)
    if same_keys("expected", ex, ey):
        groups = {"logits": (["logits"], 1e-5), "loss": (["loss"], 1e-5),
                  "grads": ([k for k in ex if k.startswith("grad.")], 1e-4)}
        for name, (keys, tol) in groups.items():
            worst, worst_key = 0.0, None
            for k in keys:
                e = rel_error(ey[k], ex[k])
                if worst_key is None or e > worst:
                    worst, worst_key = e, k
            print(f"{name}: {len(keys)} tensor(s), max rel {worst:.3g} ({worst_key}), limit {tol:g}")
            if worst > tol:
                failures.append(f"{name}: {worst_key}: rel {worst:.3g} > {tol:g}")
    for f in failures:
        print(f"DIFFERS: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
