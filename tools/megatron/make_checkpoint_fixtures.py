#!/usr/bin/env python3
"""make_checkpoint_fixtures.py: Megatron-LM legacy checkpoints (--ckpt-format torch) for the unit tests.

Usage (any Python with torch and numpy, e.g. the venv of ci/megatron-env):
    python tools/megatron/make_checkpoint_fixtures.py WEIGHTS.safetensors OUTDIR

WEIGHTS.safetensors is a full, unsharded parity weights file (a `parity run --dump`'s
weights.safetensors; tests/fixtures/checkpoints/REGENERATE.md has the exact command). OUTDIR gets
the same weights as Megatron-LM's save_checkpoint lays them out, each rank file a torch.save of
what Megatron-LM puts there: "args" (an argparse.Namespace), "checkpoint_version", "iteration",
"model" or "model0"/"model1" (model.state_dict(): an OrderedDict with _metadata and `_extra_state`
entries, None or io.BytesIO), "optimizer" (nested dicts, tuples, ints, tensors), "rng_state"
(random.getstate(), numpy's state arrays, torch RNG byte tensors), "num_floating_point_operations_so_far"
(an int over 64 bits). The tensors are split as Megatron shards them over TP (column-parallel
rows, row-parallel columns, SwiGLU's fc1 as [gate_r; up_r], the rest replicated), and each
pipeline stage / model chunk names its decoder layers from 0 (legacy files are module-local):

  tp2_pp2_vpp2/   latest_checkpointed_iteration.txt -> iter_0000020/mp_rank_{00,01}_{000,001}/,
                  model0/model1 (layer placement 0|1|2|3 over (stage, chunk) (0,0) (1,0) (0,1) (1,1))
  pp2_uneven/     iter_0000005/ (no tracker): TP 1 x PP 2, layers 3 + 1
                  (args decoder_first_pipeline_num_layers = 3), embeddings tied: the last stage's
                  output_layer.weight is the embeddings' copy
  pp2_no_args/    pp2_uneven's files without "args" (the reader counts the layers)
  pp2_bad_args/   pp2_uneven's files whose args say an even split (2 + 2): contradicts the files
  tp1_release/    latest_checkpointed_iteration.txt "release" -> release/mp_rank_00/
  state_dict.pt   the full model.state_dict() alone (OrderedDict with `_extra_state`)
  batch.pt        a --load-batch file as torch.save: tokens, labels int64 [2, 8] (vocab 16)
  full.safetensors  the input weights (what every layout must load as)
"""
import argparse
import collections
import enum
import io
import os
import random
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

COLUMN = (".linear_qkv.", ".linear_fc1.", "output_layer.", "word_embeddings.")
ROW = (".linear_proj.weight", ".linear_fc2.weight")


class AttnBackend(enum.Enum):  # stands in for Megatron's enums in args
    auto = 5


def shard(name, t, rank, tp, swiglu):
    if any(p in name for p in ROW):
        return t.chunk(tp, dim=1)[rank].clone()
    if any(p in name for p in COLUMN):
        if swiglu and ".linear_fc1." in name:
            gate, up = t.chunk(2, dim=0)
            return torch.cat([gate.chunk(tp, 0)[rank], up.chunk(tp, 0)[rank]]).clone()
        return t.chunk(tp, dim=0)[rank].clone()
    return t.clone()


def layer_of(name):
    if not name.startswith("decoder.layers."):
        return None
    return int(name.split(".")[2])


def state_dict(items):
    """model.state_dict()'s shape: an OrderedDict with _metadata and `_extra_state` entries."""
    sd = collections.OrderedDict()
    for k, v in items:
        sd[k] = v
        if k.endswith("linear_proj.weight"):
            sd[k.replace(".weight", "._extra_state")] = None
    sd["output_layer._extra_state"] = io.BytesIO(b"te-fp8-meta")  # what TE layers keep there
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("decoder", {"version": 1})])
    return sd


def chunk(full, layers, first_local_layer, embedding, last):
    """The state dict of a chunk holding global layers [layers) (renumbered from 0)."""
    items = []
    if embedding:
        items += [(k, v) for k, v in full.items() if k.startswith("embedding.")]
    for k, v in full.items():
        n = layer_of(k)
        if n is not None and n in layers:
            parts = k.split(".")
            parts[2] = str(n - layers[0] + first_local_layer)
            items.append((".".join(parts), v))
    if last:
        items += [(k, v) for k, v in full.items()
                  if k.startswith("decoder.final_") or k.startswith("output_layer.")]
    return state_dict(items)


def args_for(tp, pp, vpp, layers, **extra):
    a = argparse.Namespace(
        num_layers=layers, hidden_size=8, num_attention_heads=2,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp, expert_model_parallel_size=1,
        decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
        account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False,
        pipeline_model_parallel_layout=None, mtp_num_layers=None, params_dtype=torch.float32,
        attention_backend=AttnBackend.auto, ckpt_format="torch", lr=1e-4, seed=1234,
        data_path=["a", "b"], no_save_optim=None)
    for k, v in extra.items():
        setattr(a, k, v)
    return a


def rank_state(models, args, iteration, tensors, full_rng=False):
    """A rank file's dict; the RNG states in full (random's and numpy's, the CPU generator's)
    with full_rng only, to keep the other fixtures small."""
    g = torch.Generator().manual_seed(iteration)
    some = next(iter(tensors))
    st = {"args": args, "checkpoint_version": 3.0, "iteration": iteration}
    st.update(models)
    st["optimizer"] = {
        "optimizer": {"state": {0: {"exp_avg": torch.randn(some.shape, generator=g),
                                    "exp_avg_sq": torch.rand(some.shape, generator=g),
                                    "step": torch.tensor(float(iteration))}},
                      "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8,
                                        "weight_decay": 0.01, "amsgrad": False,
                                        "params": [0]}]},
        "fp32_from_fp16_params": [[some.clone()]], "grad_scaler": None}
    st["opt_param_scheduler"] = {"max_lr": 1e-4, "num_steps": iteration * 8, "decay_style": "cosine"}
    random.seed(iteration)
    np.random.seed(iteration)
    # The CUDA generators' states are stand-ins (no CUDA here): byte tensors as Megatron's are.
    small = torch.arange(16, dtype=torch.uint8)
    st["rng_state"] = [{"random_rng_state": random.getstate() if full_rng else (3, (1, 2), None),
                        "np_rng_state": np.random.get_state() if full_rng else None,
                        "torch_rng_state": torch.get_rng_state() if full_rng else small,
                        "cuda_rng_state": small.clone(),
                        "rng_tracker_states": {"model-parallel-rng": small.clone()}}]
    st["num_floating_point_operations_so_far"] = 2 ** 70 + 3
    return st


def save(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("weights")
    p.add_argument("outdir")
    a = p.parse_args()
    full, _ = safetensors_io.load(a.weights)
    layers = 1 + max(n for n in map(layer_of, full) if n is not None)
    assert layers == 4, "the layouts below place 4 layers"
    fc1 = full["decoder.layers.0.mlp.linear_fc1.weight"]
    fc2 = full["decoder.layers.0.mlp.linear_fc2.weight"]
    swiglu = fc1.shape[0] == 2 * fc2.shape[1]
    # What this script writes is replaced; anything else in OUTDIR (REGENERATE.md) is kept.
    for name in ("tp2_pp2_vpp2", "pp2_uneven", "pp2_no_args", "pp2_bad_args", "tp1_release"):
        shutil.rmtree(os.path.join(a.outdir, name), ignore_errors=True)
    os.makedirs(a.outdir, exist_ok=True)
    safetensors_io.save(full, os.path.join(a.outdir, "full.safetensors"))
    torch.save(state_dict(list(full.items())), os.path.join(a.outdir, "state_dict.pt"))
    stream = torch.randint(0, 16, (2, 9), generator=torch.Generator().manual_seed(3))
    torch.save({"tokens": stream[:, :-1].clone(), "labels": stream[:, 1:].clone()},
               os.path.join(a.outdir, "batch.pt"))

    # TP 2 x PP 2 x VPP 2: (stage p, chunk v) holds layer v * 2 + p.
    out = os.path.join(a.outdir, "tp2_pp2_vpp2")
    for t in range(2):
        ranked = {k: shard(k, v, t, 2, swiglu) for k, v in full.items()}
        for pp_rank in range(2):
            models = {f"model{v}": chunk(ranked, [v * 2 + pp_rank], 0, embedding=(pp_rank, v) == (0, 0),
                                         last=(pp_rank, v) == (1, 1)) for v in range(2)}
            save(f"{out}/iter_0000020/mp_rank_{t:02d}_{pp_rank:03d}/model_optim_rng.pt",
                 rank_state(models, args_for(2, 2, 2, 4), 20, ranked.values(),
                            full_rng=(t, pp_rank) == (0, 0)))
    with open(f"{out}/latest_checkpointed_iteration.txt", "w") as f:
        f.write("20")

    # TP 1 x PP 2, layers 3 + 1, tied embeddings: the last stage's output layer is their copy.
    tied = {k: v for k, v in full.items() if k != "output_layer.weight"}
    for name, args in (("pp2_uneven", args_for(1, 2, None, 4, decoder_first_pipeline_num_layers=3)),
                       ("pp2_no_args", None), ("pp2_bad_args", args_for(1, 2, None, 4))):
        stages = [chunk(tied, [0, 1, 2], 0, embedding=True, last=False),
                  chunk(tied, [3], 0, embedding=False, last=True)]
        stages[1]["output_layer.weight"] = tied["embedding.word_embeddings.weight"].clone()
        for pp_rank, sd in enumerate(stages):
            st = rank_state({"model": sd}, args, 5, tied.values())
            if args is None:
                del st["args"]
            save(f"{a.outdir}/{name}/iter_0000005/mp_rank_00_{pp_rank:03d}/model_optim_rng.pt", st)

    # TP 1, a release checkpoint.
    out = os.path.join(a.outdir, "tp1_release")
    save(f"{out}/release/mp_rank_00/model_optim_rng.pt",
         rank_state({"model": state_dict(list(full.items()))}, args_for(1, 1, None, 4), 0,
                    full.values(), full_rng=True))
    with open(f"{out}/latest_checkpointed_iteration.txt", "w") as f:
        f.write("release\n")


if __name__ == "__main__":
    main()
