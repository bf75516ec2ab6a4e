#!/usr/bin/env python3
"""rank_run.py: Megatron Core run on a Gloo world of tp x dp CPU processes; each rank's tensors.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/rank_run.py SCENARIO.json WEIGHTS BATCH OUTDIR --tp N --dp N

Every rank builds golden.py's model for its TP rank (initialize_model_parallel over a file
rendezvous: no port), loads its part of WEIGHTS (a golden.py / `parity run --dump`
weights.safetensors, unsharded) by the pieces of Megatron's own sharded_state_dict (global offset
and local shape of each ShardedTensor; the swiglu fc1's factory built into its gate and up halves),
reads the samples MegatronPretrainingSampler gives its DP rank from BATCH's rows, and runs the
forward of each of its microbatches with golden.py's observation hooks. It writes
OUTDIR/megatron.rank{r}.safetensors: for local microbatch m and site S (each layer's
residual_accumulator and residual_contribution, the output layer's logits, which stay split over
the vocabulary: parallel_output) the tensor "mb{m}.{S}" as this rank holds it, and
OUTDIR/megatron.rank{r}.json: the rank's coordinates and samples.

No sequence or context parallelism (the local spec's torch norms and attention reject them) and
no MoE; compare_rank_dump.py compares the files with a `parity run --dump` of the same layout.
"""
import argparse
import json
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import rank_layouts  # noqa: E402
import safetensors_io  # noqa: E402


def local_part(full, value):
    """This rank's part of the unsharded `full` by the ShardedTensor(s) of `value`."""
    pieces, _ = rank_layouts.pieces_of(value)
    parts = []
    for p in pieces:
        n = p.prepend_axis_num
        t = full
        assert list(full.shape) == list(p.global_shape[n:]), (p.key, full.shape, p.global_shape)
        for d, (offset, size) in enumerate(zip(p.global_offset[n:], p.local_shape)):
            t = t.narrow(d, offset, size)
        parts.append(t)
    return torch.cat(parts, 0)


def load_rank_weights(model, path):
    tensors, _ = safetensors_io.load(path)
    state = model.state_dict()
    loaded = 0
    for key, value in model.sharded_state_dict().items():
        pieces, _ = rank_layouts.pieces_of(value)
        if pieces is None:
            continue
        name = golden.file_name(key)
        if name not in tensors:
            raise SystemExit(f"rank_run.py: {path} has no {name}")
        with torch.no_grad():
            state[key].copy_(local_part(tensors[name], value))
        loaded += 1
    return loaded


def worker(rank, world, tmp, a, s):
    warnings.simplefilter("ignore")
    golden.install_cpu_shims()
    from megatron.core import parallel_state as ps
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank,
                            world_size=world)
    ps.initialize_model_parallel(tensor_model_parallel_size=a.tp)
    torch.manual_seed(int(s["seed"]))
    model = golden.build_model(s, tp=a.tp).float()
    loaded = load_rank_weights(model, a.weights)
    model.eval()
    batch, _ = safetensors_io.load(a.batch)
    tokens, labels = batch["tokens"], batch["labels"]
    mb = s["micro-batch"]
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    sampler = rank_layouts.load_sampler()(
        total_samples=tokens.shape[0], consumed_samples=0, micro_batch_size=mb,
        data_parallel_rank=dp_rank, data_parallel_size=dp_size)
    samples = [list(b) for b in sampler]
    recorder = golden.TraceRecorder()
    kept = {}
    record = recorder.record

    def keep(site, kind, tensor, tp_shard_dim, requires_grad):
        kept[f"mb{recorder.microbatch}.{site}"] = tensor.detach().clone().contiguous()
        record(site, kind, tensor, tp_shard_dim, requires_grad)
    recorder.record = keep
    golden.attach_hooks(model, recorder)
    positions = torch.arange(s["seq"], dtype=torch.int64).unsqueeze(0).expand(mb, -1)
    causal = torch.triu(torch.ones(1, 1, s["seq"], s["seq"], dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        for m, rows in enumerate(samples):
            recorder.microbatch = m
            model(tokens[rows], positions, causal, labels=labels[rows])
    safetensors_io.save(kept, os.path.join(a.outdir, f"megatron.rank{rank}.safetensors"),
                        {"rank": str(rank)})
    with open(os.path.join(a.outdir, f"megatron.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "tp": ps.get_tensor_model_parallel_rank(), "dp": dp_rank,
                   "samples": samples, "weights_loaded": loaded}, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("weights")
    parser.add_argument("batch")
    parser.add_argument("outdir")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dp", type=int, default=1)
    a = parser.parse_args()
    _, s = golden.read_scenario(a.scenario)
    if s.get("moe-experts", 0) or s.get("mtp-layers", 0):
        golden.fail("rank_run.py runs dense models without MTP only")
    rank_layouts.load_sampler()  # fail before starting the world
    os.makedirs(a.outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a.tp * a.dp, tmp, a, s), nprocs=a.tp * a.dp, join=True)
    print(f"rank_run.py: tp {a.tp} x dp {a.dp} -> {a.outdir}")


if __name__ == "__main__":
    main()
