#!/usr/bin/env python3
"""rank_layouts.py: what each rank holds under Megatron Core, over a grid of layouts, as JSON.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/rank_layouts.py OUT.json

For every world size of the grid it starts that many processes over Gloo on the CPU (a file
rendezvous: no port), and for every layout (tp, cp, dp, pp, ep, etp) of that size each process calls
Megatron's initialize_model_parallel and records, from Megatron's own functions:

  coordinates   its tp / cp / dp / pp / ep / expert-dp / expert-tp ranks (parallel_state)
  cp_positions  the sequence positions it holds: get_batch_on_this_cp_rank on a batch of positions
  sp_positions  the rows of those it holds under sequence parallelism:
                tensor_parallel.scatter_to_sequence_parallel_region
  samples       the sample indices of each of its microbatches over `steps` steps:
                MegatronPretrainingSampler (Megatron Bridge's copy of Megatron-LM's
                megatron/training sampler: Megatron-LM's training package is not on PyPI)
  params        (pp = 1) for each parameter of a GPTModel built at that layout (local spec, CPU
                initialization), its pieces from model.sharded_state_dict(): each ShardedTensor's
                global shape, global offset and local shape (after the prepended layer / expert
                axes, which are recorded apart); the swiglu fc1's ShardedTensorFactory is built
                into its two pieces (w, v). Routed experts are named by their global index (the
                expert axis' offset), as parity names them.
  local_experts (MoE) each MoE layer's local_expert_indices

tests/megatron/rank_layout_conformance.cpp builds parity's model for the same rank (no
collective: placeholder communicators) and compares every answer. The pipeline layer placement is
layer_offsets.py's (megatron.layer_offsets_live).

The model is built without sequence parallelism (the local spec's torch norms reject it) and with
context_parallel_size 1 in its config (the local spec's DotProductAttention rejects CP; the
process groups stay the layout's): no weight's slice depends on either. Where Megatron requires SP
(MoE with tp > 1) the config is made with it and the flag cleared before the model is built.
"""
import contextlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402  (the CPU shims)

SEQ = 32
MICRO_BATCH = 2
MICROBATCHES = 3
STEPS = 2

# Model variants (every one built at every layout with pp = 1 whose tp divides its widths).
VARIANTS = {
    # layernorm, gelu, learned positions, biases, untied, one query group per head
    "dense": dict(hidden=32, heads=8, groups=0, ffn=64, vocab=64, act="gelu", bias=True,
                  untie=True, qk_norm=False, rope=False, experts=0),
    # grouped-query attention (2 groups: fewer than tp 4 and 8), swiglu, rope, tied, no biases
    "gqa_swiglu": dict(hidden=32, heads=8, groups=2, ffn=64, vocab=64, act="swiglu", bias=False,
                       untie=False, qk_norm=True, rope=True, experts=0),
    # multi-query attention, swiglu with biases (the fc1 bias is gated too)
    "mqa_swiglu_bias": dict(hidden=32, heads=8, groups=1, ffn=64, vocab=64, act="swiglu",
                            bias=True, untie=True, qk_norm=False, rope=False, experts=0),
    # MoE: 8 routed experts (swiglu, no biases) and a shared expert, on every layer
    "moe": dict(hidden=32, heads=8, groups=4, ffn=64, vocab=64, act="swiglu", bias=False,
                untie=True, qk_norm=False, rope=True, experts=8, shared=32),
}


def layouts():
    """(tp, cp, dp, pp, ep, etp) by world size: ep divides cp * dp with etp = tp (parity's
    rule); and, on worlds of up to 4 ranks, every expert TP size other than tp whose expert layout
    etp x ep tiles the stage (Megatron's rule)."""
    grid = {}
    for tp in (1, 2, 4, 8):
        for cp in (1, 2, 4):
            for dp in (1, 2, 4):
                for pp in (1, 2):
                    world = tp * cp * dp * pp
                    if world < 2 or world > 8:
                        continue
                    others = [e for e in (1, 2, 4) if e != tp and world <= 4]
                    for ep in (1, 2, 4, 8):
                        for etp in [tp] + others:
                            if (cp * dp) % ep if etp == tp else (tp * cp * dp) % (etp * ep):
                                continue
                            grid.setdefault(world, []).append(
                                {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep, "etp": etp})
    return grid


def load_sampler():
    """MegatronPretrainingSampler from Megatron Bridge's file (its package imports far more)."""
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("megatron-bridge is not installed in this venv (run ci/megatron-env)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "samplers.py")
    module_spec = importlib.util.spec_from_file_location("megatron_bridge_samplers", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.MegatronPretrainingSampler


def megatron_config(v, layout):
    from megatron.core.transformer.transformer_config import TransformerConfig
    swiglu = v["act"] == "swiglu"
    moe = v["experts"] > 0
    config = TransformerConfig(
        num_layers=2, hidden_size=v["hidden"], num_attention_heads=v["heads"],
        num_query_groups=v["groups"] or None, qk_layernorm=v["qk_norm"],
        ffn_hidden_size=v["ffn"], hidden_dropout=0.0, attention_dropout=0.0,
        normalization="LayerNorm", gated_linear_unit=swiglu,
        activation_func=F.silu if swiglu else F.gelu, add_bias_linear=v["bias"],
        use_cpu_initialization=True, perform_initialization=True,
        gradient_accumulation_fusion=False, bias_activation_fusion=False,
        bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        apply_rope_fusion=False, params_dtype=torch.float32,
        tensor_model_parallel_size=layout["tp"],
        expert_model_parallel_size=layout["ep"],
        expert_tensor_parallel_size=layout["etp"],
        sequence_parallel=moe and layout["tp"] > 1,
        num_moe_experts=v["experts"] or None, moe_router_topk=2,
        moe_ffn_hidden_size=v["ffn"] if moe else None,
        moe_shared_expert_intermediate_size=v.get("shared") if moe else None,
        moe_token_dispatcher_type="allgather",
        moe_grouped_gemm=False,
    )
    config.sequence_parallel = False  # see the module docstring: no weight's slice depends on it
    return config


def fits(v, layout):
    tp = layout["tp"]
    groups = v["groups"] or v["heads"]
    if v["heads"] % tp or v["vocab"] % tp or v["ffn"] % tp or v.get("shared", 0) % tp:
        return False
    if groups >= tp and groups % tp:
        return False
    if not v["experts"]:
        return layout["ep"] == 1 and layout["etp"] == tp
    return v["experts"] % layout["ep"] == 0 and v["ffn"] % layout["etp"] == 0


def build_model(v, layout):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    config = megatron_config(v, layout)
    spec = get_gpt_layer_local_spec(num_experts=v["experts"] or None, moe_grouped_gemm=False,
                                    qk_layernorm=v["qk_norm"], normalization="LayerNorm")
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=v["vocab"],
                    max_sequence_length=SEQ, share_embeddings_and_output_weights=not v["untie"],
                    position_embedding_type="rope" if v["rope"] else "learned_absolute",
                    rotary_percent=1.0, parallel_output=True)


def pieces_of(value):
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory
    if isinstance(value, ShardedTensorFactory):
        built = value.build_fn(value.key, value.data, value.replica_id, value.flattened_range)
        built = list(built.values()) if isinstance(built, dict) else list(built)
        return built, tuple(value.data.shape)
    if isinstance(value, ShardedTensor):
        return [value], tuple(value.local_shape)
    return None, None  # _extra_state (ShardedObject)


def param_layout(model):
    """name -> {local_shape, pieces}; routed experts renamed to their global index."""
    out = {}
    for key, value in model.sharded_state_dict().items():
        pieces, local_shape = pieces_of(value)
        if pieces is None:
            continue
        entry = {"local_shape": list(local_shape), "pieces": []}
        prepended = None
        for p in pieces:
            n = p.prepend_axis_num
            assert p.flattened_range is None, key
            entry["pieces"].append({"global_shape": list(p.global_shape[n:]),
                                    "global_offset": list(p.global_offset[n:]),
                                    "local_shape": list(p.local_shape)})
            assert prepended in (None, list(p.global_offset[:n])), key
            prepended = list(p.global_offset[:n])
        # The pieces concatenate along dim 0 into the local tensor (the swiglu factory chunks it).
        assert sum(p["local_shape"][0] for p in entry["pieces"]) == local_shape[0], key
        name = key
        layer = re.match(r"decoder\.layers\.(\d+)\.", key)
        if layer:  # pp = 1: the layer axis' offset is the global layer number
            assert prepended and prepended[0] == int(layer.group(1)), (key, prepended)
        expert = re.search(r"\.local_experts\.(\d+)\.", key)
        if expert:
            name = key.replace(expert.group(0), f".local_experts.{prepended[-1]}.")
        entry["prepended"] = prepended
        out[name] = entry
    return out


def rank_record(layout, sampler_class):
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import scatter_to_sequence_parallel_region
    from megatron.core.utils import get_batch_on_this_cp_rank

    rec = {"coordinates": {
        "tp": ps.get_tensor_model_parallel_rank(), "cp": ps.get_context_parallel_rank(),
        "dp": ps.get_data_parallel_rank(), "pp": ps.get_pipeline_model_parallel_rank(),
        "ep": ps.get_expert_model_parallel_rank(), "edp": ps.get_expert_data_parallel_rank(),
        "etp": ps.get_expert_tensor_parallel_rank()}}
    positions = torch.arange(SEQ).view(1, SEQ)
    batch = get_batch_on_this_cp_rank({"tokens": positions.clone(), "labels": positions.clone(),
                                       "position_ids": positions.clone()})
    assert torch.equal(batch["tokens"], batch["labels"])
    rec["cp_positions"] = batch["tokens"][0].tolist()
    local = batch["tokens"].transpose(0, 1).contiguous()  # [s_local, b]: the activations' order
    rec["sp_positions"] = scatter_to_sequence_parallel_region(local)[:, 0].tolist()
    dp_size = ps.get_data_parallel_world_size()
    sampler = sampler_class(total_samples=STEPS * MICROBATCHES * MICRO_BATCH * dp_size,
                            consumed_samples=0, micro_batch_size=MICRO_BATCH,
                            data_parallel_rank=ps.get_data_parallel_rank(),
                            data_parallel_size=dp_size)
    rec["samples"] = [list(b) for b in sampler]
    if layout["pp"] == 1:
        rec["models"] = {}
        for name, v in VARIANTS.items():
            if not fits(v, layout):
                continue
            torch.manual_seed(0)
            model = build_model(v, layout)
            entry = {"params": param_layout(model)}
            if v["experts"]:
                entry["local_experts"] = [list(map(int, layer.mlp.local_expert_indices))
                                          for layer in model.decoder.layers]
            rec["models"][name] = entry
    return rec


def worker(rank, world, tmp, grid):
    warnings.simplefilter("ignore")
    golden.install_cpu_shims()
    from megatron.core import parallel_state as ps
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank,
                            world_size=world)
    sampler_class = load_sampler()
    records = []
    for layout in grid:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=layout["tp"], pipeline_model_parallel_size=layout["pp"],
            context_parallel_size=layout["cp"], expert_model_parallel_size=layout["ep"],
            expert_tensor_parallel_size=layout["etp"])
        try:
            records.append(rank_record(layout, sampler_class))
        except Exception:  # noqa: BLE001 - reported with the layout, the run fails
            records.append({"error": traceback.format_exc()})
        ps.destroy_model_parallel()
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)
    dist.destroy_process_group()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: rank_layouts.py OUT.json")
    load_sampler()  # fail before starting any world
    from megatron.core import __version__ as megatron_version
    cases = []
    for world, grid in sorted(layouts().items()):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(world, tmp, grid), nprocs=world, join=True)
            per_rank = []
            for r in range(world):
                with open(os.path.join(tmp, f"rank{r}.json")) as f:
                    per_rank.append(json.load(f))
        for i, layout in enumerate(grid):
            ranks = [per_rank[r][i] for r in range(world)]
            errors = [r.get("error") for r in ranks if "error" in r]
            if errors:
                sys.exit(f"rank_layouts.py: layout {layout}: Megatron failed:\n{errors[0]}")
            cases.append({"layout": layout, "ranks": ranks})
    result = {"megatron_core": megatron_version, "seq": SEQ, "micro_batch": MICRO_BATCH,
              "microbatches": MICROBATCHES, "steps": STEPS, "variants": VARIANTS, "cases": cases}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, separators=(",", ":"))
    models = sum(len(r.get("models", {})) for c in cases for r in c["ranks"])
    print(f"rank_layouts.py: {len(cases)} layouts, {models} rank models, Megatron Core "
          f"{megatron_version} -> {sys.argv[1]}")


if __name__ == "__main__":
    with contextlib.suppress(AttributeError):
        mp.set_start_method("spawn")
    main()
