#!/usr/bin/env python3
"""save_checkpoint.py: real Megatron Core writes a golden fixture's weights as checkpoints.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/save_checkpoint.py FIXTURE_DIR OUTDIR [--tp 2] [--pp 1]

FIXTURE_DIR is a golden.py folder (scenario.json, weights.safetensors). On the CPU, in gloo worlds
with a file rendezvous (no port):
  1. a world of one builds the fixture's GPTModel (golden.build_model), loads weights.safetensors
     and saves it with Megatron Core's dist_checkpointing.save: OUTDIR/torch_dist_tp1/
     (torch_dist: .metadata + __N_M.distcp); and torch.save(model.state_dict()) as it is (an
     OrderedDict with `_extra_state` entries): OUTDIR/state_dict.pt;
  2. a world of TP x PP ranks builds the model at that layout (each pipeline stage with its own
     layers, pre_process / post_process as get_model sets them) and loads OUTDIR/torch_dist_tp1
     with dist_checkpointing.load (Megatron's own resharding); then every rank writes
       OUTDIR/legacy/iter_0000001/mp_rank_XX[_YYY]/model_optim_rng.pt  (Megatron-LM's legacy
         layout, --ckpt-format torch: "args", "checkpoint_version", "iteration", "model" =
         state_dict_for_save_checkpoint(), "rng_state", as megatron/training/checkpointing.py
         writes them; megatron.training is not in the venv, so this script lays the files out)
       OUTDIR/legacy/latest_checkpointed_iteration.txt
     and the ranks together save OUTDIR/torch_dist/ (dist_checkpointing.save at TP x PP).

tests/megatron/checkpoint_live.sh loads these with parity (the legacy folder directly, the
torch_dist ones through convert_torch_dist.py) and compares with the fixture's expected outputs.
"""
import argparse
import os
import random
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402

ITERATION = 1


def megatron_lm_args(s, tp, pp):
    """The argparse.Namespace fields of Megatron-LM's args that describe the model and layout."""
    return argparse.Namespace(
        num_layers=s["layers"], hidden_size=s["hidden"], ffn_hidden_size=s["ffn-hidden"],
        num_attention_heads=s["heads"], num_query_groups=s["num-query-groups"] or None,
        kv_channels=s["kv-channels"] or None, seq_length=s["seq"],
        max_position_embeddings=s["seq"], padded_vocab_size=s["vocab"],
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=None, expert_model_parallel_size=1,
        decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
        account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False,
        pipeline_model_parallel_layout=None, mtp_num_layers=None,
        untie_embeddings_and_output_weights=bool(s["untie"]),
        swiglu=s["activation"] == "swiglu",
        normalization="LayerNorm" if s["norm"] == "layernorm" else "RMSNorm",
        position_embedding_type="learned_absolute" if s["position-embedding"] == "learned"
        else "rope", params_dtype=torch.float32, ckpt_format="torch", seed=int(s["seed"]))


def install_checkpoint_shims():
    """dist_checkpointing on the CPU: no CUDA synchronization, and no psutil (not in the venv):
    its file writer's workers measure their memory with it for a debug log only. Tensor.cuda()
    stays on the CPU: under PP with tied embeddings the stages all-reduce the embedding copy."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    filesystem_async._process_memory = lambda: 0


def rng_state():
    from megatron.core import tensor_parallel
    return [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(),
             "rng_tracker_states": tensor_parallel.get_cuda_rng_tracker().get_states()}]


def rank_main(rank, world, tp, pp, rendezvous, s, fixture, outdir):
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    golden.install_cpu_shims()
    install_checkpoint_shims()
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world)
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    torch.manual_seed(int(s["seed"]))
    model = golden.build_model(s, tp, pp, pre_process=ps.is_pipeline_first_stage(),
                               post_process=ps.is_pipeline_last_stage()).float()
    if world == 1 and tp == 1:
        golden.load_weights(model, os.path.join(fixture, "weights.safetensors"))
        dist_checkpointing.save(model.sharded_state_dict(), os.path.join(outdir, "torch_dist_tp1"))
        torch.save(model.state_dict(), os.path.join(outdir, "state_dict.pt"))
    else:
        loaded = dist_checkpointing.load(model.sharded_state_dict(),
                                         os.path.join(outdir, "torch_dist_tp1"))
        model.load_state_dict(loaded)
        t, p = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
        folder = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
        path = os.path.join(outdir, "legacy", f"iter_{ITERATION:07d}", folder, "model_optim_rng.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"args": megatron_lm_args(s, tp, pp), "checkpoint_version": 3.0,
                    "iteration": ITERATION, "model": model.state_dict_for_save_checkpoint(),
                    "rng_state": rng_state(), "num_floating_point_operations_so_far": 0}, path)
        dist.barrier()
        if rank == 0:
            with open(os.path.join(outdir, "legacy", "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(ITERATION))
        dist_checkpointing.save(model.sharded_state_dict(), os.path.join(outdir, "torch_dist"))
    dist.barrier()
    dist.destroy_process_group()


def run_world(world, tp, pp, s, fixture, outdir):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(rank_main, args=(world, tp, pp, f"{tmp}/rendezvous", s, fixture, outdir),
                           nprocs=world, start_method="spawn", join=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fixture")
    p.add_argument("outdir")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=1)
    a = p.parse_args()
    _, s = golden.read_scenario(os.path.join(a.fixture, "scenario.json"))
    if s.get("moe-experts", 0) or s.get("mtp-layers", 0):
        golden.fail("save_checkpoint.py writes dense models without MTP only")
    if a.tp < 1 or a.pp < 1 or a.tp * a.pp < 2:
        golden.fail(f"--tp {a.tp} --pp {a.pp}: the layout must have at least 2 ranks")
    if s["layers"] % a.pp:
        golden.fail(f"--pp {a.pp}: must divide the fixture's {s['layers']} layers")
    for d in ("torch_dist_tp1", "torch_dist", "legacy"):
        os.makedirs(os.path.join(a.outdir, d), exist_ok=False)
    run_world(1, 1, 1, s, a.fixture, a.outdir)
    run_world(a.tp * a.pp, a.tp, a.pp, s, a.fixture, a.outdir)


if __name__ == "__main__":
    main()
