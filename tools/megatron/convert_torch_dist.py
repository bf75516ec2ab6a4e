#!/usr/bin/env python3
"""convert_torch_dist.py: a Megatron Core distributed checkpoint (torch_dist) as one weights file.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/convert_torch_dist.py SCENARIO.json CHECKPOINT_DIR OUT.safetensors

CHECKPOINT_DIR is what `--ckpt-format torch_dist` writes (.metadata, __N_M.distcp, common.pt,
metadata.json): an iteration folder, or a checkpoint folder whose
latest_checkpointed_iteration.txt names one. SCENARIO.json is a parity scenario describing the
model (golden.py's keys: hidden, heads, layers, ffn-hidden, vocab, seq, norm, activation, ...).
The script builds that GPTModel with Megatron Core on the CPU at TP 1 x PP 1 in a gloo world of
one (as golden.py does), loads the checkpoint into it with Megatron Core's own
dist_checkpointing.load (which reshards from whatever layout saved it and stitches the stacked
layer and SwiGLU tensors back), and writes the unsharded state dict with Megatron's key names
(`_extra_state` dropped) as safetensors, which `parity --load-weights OUT.safetensors` reads at
any layout. Optimizer state and RNG state are not read. Exit 2 with one line on bad input.
"""
import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import safetensors_io  # noqa: E402


def iteration_folder(path):
    tracker = os.path.join(path, "latest_checkpointed_iteration.txt")
    if not os.path.isfile(tracker):
        return path
    with open(tracker) as f:
        text = f.read().strip()
    folder = os.path.join(path, "release" if text == "release" else f"iter_{int(text):07d}"
                          if text.isdigit() else "")
    if not text.isdigit() and text != "release":
        golden.fail(f"{tracker}: {text[:40]!r}: expected an iteration number or 'release'")
    return folder


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario")
    p.add_argument("checkpoint")
    p.add_argument("out")
    a = p.parse_args()
    _, s = golden.read_scenario(a.scenario)
    folder = iteration_folder(a.checkpoint)
    if not os.path.isfile(os.path.join(folder, ".metadata")):
        golden.fail(f"{folder}: no .metadata: not a torch_dist checkpoint folder")

    golden.install_cpu_shims()
    torch.cuda.synchronize = lambda *args, **kwargs: None  # dist_checkpointing's save and load
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    with tempfile.TemporaryDirectory() as tmp:
        golden.init_world(tmp)
        torch.manual_seed(int(s["seed"]))
        model = golden.build_model(s).float()
        try:
            loaded = dist_checkpointing.load(model.sharded_state_dict(), folder)
            model.load_state_dict(loaded)
        except Exception as e:  # Megatron's messages are long: the first line names the key
            golden.fail(f"{folder}: does not load into the scenario's model: "
                        f"{str(e).splitlines()[0][:400]}")
        weights = golden.weights_of(model)
        import megatron.core
        safetensors_io.save(weights, a.out, {"megatron_core": megatron.core.__version__,
                                             "converted_from": os.path.abspath(folder)})
        dist.destroy_process_group()
    print(f"convert_torch_dist.py: {len(weights)} tensors from {folder} -> {a.out}")


if __name__ == "__main__":
    main()
