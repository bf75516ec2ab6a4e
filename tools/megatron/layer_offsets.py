#!/usr/bin/env python3
"""layer_offsets.py: Megatron Core's pipeline layer placement over a grid, as JSON.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/layer_offsets.py OUT.json

For every configuration of the grid (num_layers, pp, vpp, num_layers_in_first/last_pipeline_stage,
account_for_embedding/loss_in_pipeline_split, pipeline_model_parallel_layout, mtp_num_layers) it
builds Megatron's TransformerConfig and, for every (pp_rank, vp_stage), calls Megatron's own
get_transformer_layer_offset, get_num_layers_to_build, get_mtp_layer_offset,
get_mtp_num_layers_to_build, is_pipeline_first/last_stage, and builds the chunk's
MultiTokenPredictionBlock to read the layer numbers Megatron gives the MTP layers and their
transformer layers (the numbers the MoE router of an MTP depth logs under). It also records
PipelineParallelLayerLayout.parse_str_to_list for a list of layout strings. A configuration
Megatron rejects (an exception from TransformerConfig or from one of those functions) is recorded
with the error. tests/megatron/pipeline_layout_conformance.cpp compares parity with the output.

No torch.distributed: parallel_state's pipeline rank and sizes are set directly (as Megatron's own
unit tests mock them); the MTP block's process groups are placeholders (it reads none of them) and
transformer_layer.get_pg_rank answers the pipeline rank being evaluated (without an initialized
torch.distributed it would answer 0). The MTP block is built from IdentityOp / stub submodules:
only its layer numbering runs.
"""
import json
import random
import sys
import types
import warnings

import torch

from megatron.core import __version__ as megatron_version
from megatron.core import parallel_state
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer import multi_token_prediction as mtp
from megatron.core.transformer import transformer_layer
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig

PLACEHOLDER_GROUPS = types.SimpleNamespace(cp=None, tp=None, pp=None)


class Stub(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()


class MlpStub(torch.nn.Module):
    """Records the layer number TransformerLayer hands its MLP (an MoE layer's router's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.layer_number = None

    def set_layer_number(self, layer_number):
        self.layer_number = layer_number


MTP_LAYER_SPEC = ModuleSpec(
    module=mtp.MultiTokenPredictionLayer,
    submodules=mtp.MultiTokenPredictionLayerSubmodules(
        enorm=Stub, hnorm=Stub, eh_proj=Stub, layer_norm=Stub,
        transformer_layer=ModuleSpec(
            module=transformer_layer.TransformerLayer,
            submodules=transformer_layer.TransformerLayerSubmodules(
                self_attention=ModuleSpec(module=IdentityOp,
                                          params={"attn_mask_type": AttnMaskType.causal}),
                mlp=MlpStub))))


def megatron_config(case):
    pp = case["pp"]
    return TransformerConfig(
        num_layers=case["layers"], hidden_size=8, num_attention_heads=1,
        pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32 if pp > 1 else None,
        virtual_pipeline_model_parallel_size=case["vpp"] if case["vpp"] > 1 else None,
        num_layers_in_first_pipeline_stage=case["pp-first-layers"],
        num_layers_in_last_pipeline_stage=case["pp-last-layers"],
        account_for_embedding_in_pipeline_split=case["pp-account-embedding"],
        account_for_loss_in_pipeline_split=case["pp-account-loss"],
        pipeline_model_parallel_layout=case["pp-layout"] or None,
        mtp_num_layers=case["mtp-layers"] or None)


def mtp_numbers(config, vp_stage, pp_rank, count):
    if count <= 0:
        return [], []
    transformer_layer.get_pg_rank = lambda group: pp_rank
    block = mtp.MultiTokenPredictionBlock(
        config, mtp.MultiTokenPredictionBlockSubmodules(layer_specs=[MTP_LAYER_SPEC] * count),
        vp_stage=vp_stage, pg_collection=PLACEHOLDER_GROUPS)
    depth = [layer.layer_number for layer in block.layers]
    inner = [layer.transformer_layer.layer_number for layer in block.layers]
    assert inner == [layer.transformer_layer.mlp.layer_number for layer in block.layers]
    return depth, inner


def evaluate(case):
    try:
        config = megatron_config(case)
        vpp = config.virtual_pipeline_model_parallel_size
        parallel_state.set_pipeline_model_parallel_world_size(case["pp"])
        parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp)
        chunks = []
        for pp_rank in range(case["pp"]):
            parallel_state.set_pipeline_model_parallel_rank(pp_rank)
            for v in range(vpp or 1):
                vp_stage = v if vpp is not None else None
                mtp_count = mtp.get_mtp_num_layers_to_build(config, vp_stage=vp_stage,
                                                            pp_rank=pp_rank)
                depth, inner = mtp_numbers(config, vp_stage, pp_rank, mtp_count)
                chunks.append({
                    "pp_rank": pp_rank, "vp_stage": v,
                    "offset": transformer_layer.get_transformer_layer_offset(
                        config, vp_stage=vp_stage, pp_rank=pp_rank),
                    "count": get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank),
                    "pre_process": parallel_state.is_pipeline_first_stage(
                        ignore_virtual=False, vp_stage=vp_stage),
                    "post_process": parallel_state.is_pipeline_last_stage(
                        ignore_virtual=False, vp_stage=vp_stage),
                    "mtp_offset": mtp.get_mtp_layer_offset(config, vp_stage=vp_stage),
                    "mtp_count": mtp_count,
                    "mtp_layer_numbers": depth,
                    "mtp_transformer_layer_numbers": inner,
                })
        return {"accepted": True, "vpp": vpp or 1, "chunks": chunks,
                "mtp_ranks": sorted(mtp.get_mtp_ranks(list(range(case["pp"])), config)),
                "mtp_standalone": bool(config.mtp_standalone)}
    except Exception as e:  # noqa: BLE001 - any exception is Megatron's rejection
        return {"accepted": False, "error": f"{type(e).__name__}: {e}"}


def case(layers, pp, vpp=1, first=None, last=None, embedding=False, loss=False, layout="", mtp=0):
    return {"layers": layers, "pp": pp, "vpp": vpp, "pp-first-layers": first,
            "pp-last-layers": last, "pp-account-embedding": embedding, "pp-account-loss": loss,
            "pp-layout": layout, "mtp-layers": mtp}


def split_grid():
    """Even, uneven and account-for splits, MTP on the last stage."""
    sides = [None, 1, 2, 3, 4, 6, 8]
    for layers in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16]:
        for pp in [1, 2, 3, 4]:
            for vpp in [1, 2, 3, 4]:
                for embedding in [False, True]:
                    for loss in [False, True]:
                        for mtp_layers in ([0, 2] if not (embedding or loss) else [0]):
                            yield case(layers, pp, vpp, embedding=embedding, loss=loss,
                                       mtp=mtp_layers)
                for first in sides:
                    for last in sides:
                        if first is not None or last is not None:
                            yield case(layers, pp, vpp, first, last, mtp=1 if layers == 4 else 0)
    # The conflicts TransformerConfig rejects.
    yield case(4, 2, first=2, embedding=True)
    yield case(4, 2, last=2, loss=True)
    yield case(4, 2, first=2, layout="Ett|ttL")
    yield case(4, 2, embedding=True, layout="Ett|ttL")
    yield case(4, 2, loss=True, layout="Ett|ttL")


HAND_LAYOUTS = [
    # (layout, pp): the docstring's examples, repetitions, parentheses, commas, MTP, empty stages
    ("Et*3|t*3|t*2L", 3), ("Et|(tt|)*2L", 2), ("Et|(tt|)*2L", 3), ("E|(tt|)*2,(t|)*4,mL", 4),
    ("Ettt|(tt|)*29,m|L", 4), ("Ettt|(tt|)*29,m|L", 8), ("Et|tL", 1), ("EttL", 1),
    ("Ett|ttL", 2), ("E|ttL", 2), ("Ett|L", 2), ("E|tt|tt|L", 2), ("E|tt|tt|L", 4),
    ("Et|t|t|tmL", 2), ("Et|t|t|tmmL", 2), ("Et|t|t|t|m|L", 3), ("Et|t|t|tm|L", 3),
    ("Etm|t|t|tL", 2), ("Et|tm|t|tL", 2), ("Et|tm|tL", 3), ("Et|t|tm|L", 4), ("Et|m|t|L", 2),
    ("Etm|m|t|tL", 2), ("(Et|tL)*1", 2), ("Et*2,|t*2,L", 2), ("E,t,t|t,t,L", 2),
    ("|Et|tL", 3), ("Et|tL|", 3), ("E||ttL", 3), ("tE|tL", 2), ("Et|Lt", 2), ("EEt|tL", 2),
    ("Et|tLL", 2), ("E|L", 2), ("Et|tL", 4), ("Et|(t|)*2tL", 2), ("(Et|tL|)*1", 3),
    ("Et*0|t*2L", 2), ("Et*10|t*2L", 2), ("E(t)*3|tL", 2), ("E((t)*2|)*2tL", 2), ("Et*2*2|L", 2),
    ("Et|t x|L", 3), ("Et|tX|L", 3), ("", 1), ("|", 1), ("Et|tL*", 2), ("Et|t)*2L", 2),
]


def random_layout(rng):
    """A layout of random chunks, mostly valid; the placement of E, L and m sometimes wrong."""
    pp, vpp = rng.randint(1, 4), rng.randint(1, 3)
    chunks = [[] for _ in range(pp * vpp)]
    layers = rng.randint(1, 10)
    order = sorted(rng.randrange(pp * vpp) for _ in range(layers))
    for c in order:
        chunks[c].append("t")
    mtp_layers = rng.choice([0, 0, 1, 2])
    mtp_chunk = len(chunks) - 1 if rng.random() < 0.6 else rng.randrange(len(chunks))
    chunks[mtp_chunk].extend("m" * mtp_layers)
    chunks[0 if rng.random() < 0.9 else rng.randrange(len(chunks))].insert(0, "E")
    chunks[-1 if rng.random() < 0.9 else rng.randrange(len(chunks))].append("L")
    text = []
    for c in chunks:
        s, i = "", 0
        while i < len(c):
            j = i
            while j < len(c) and c[j] == c[i]:
                j += 1
            run = j - i
            s += f"{c[i]}*{run}" if run > 1 and rng.random() < 0.5 else c[i] * run
            if rng.random() < 0.2:
                s += ","
            i = j
        text.append(s)
    layout = "|".join(text)
    vpp_given = rng.choice([1, 1, vpp, vpp + 1])
    return case(layers + rng.choice([0, 0, 0, 0, 1]), pp, vpp_given, layout=layout,
                mtp=mtp_layers if rng.random() < 0.9 else mtp_layers + 1)


def layout_grid():
    for layout, pp in HAND_LAYOUTS:
        try:
            stages = PipelineParallelLayerLayout.parse_str_to_list(layout)
        except Exception:  # noqa: BLE001 - a bad character: the config rejects it too
            stages = [[]]
        flat = [x.name for row in stages for x in row]
        layers, mtp_layers = flat.count("decoder"), flat.count("mtp")
        vpp = max(1, len(stages) // pp)
        for vpp_given in sorted({1, vpp, vpp + 1}):
            yield case(layers, pp, vpp_given, layout=layout, mtp=mtp_layers)
        yield case(layers + 1, pp, layout=layout, mtp=mtp_layers)
        if mtp_layers:
            yield case(layers, pp, layout=layout, mtp=mtp_layers - 1)
    rng = random.Random(29)
    for _ in range(400):
        yield random_layout(rng)


def parses():
    out = []
    for text, _ in HAND_LAYOUTS:
        try:
            stages = PipelineParallelLayerLayout.parse_str_to_list(text)
            chars = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
            out.append({"text": text,
                        "stages": ["".join(chars[x.name] for x in row) for row in stages]})
        except Exception as e:  # noqa: BLE001
            out.append({"text": text, "error": f"{type(e).__name__}: {e}"})
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: layer_offsets.py OUT.json")
    warnings.simplefilter("ignore")
    ProcessGroupCollection.use_mpu_process_groups = staticmethod(
        lambda *args, **kwargs: PLACEHOLDER_GROUPS)
    cases = [dict(config=c, megatron=evaluate(c)) for c in [*split_grid(), *layout_grid()]]
    result = {"megatron_core": megatron_version, "cases": cases, "parses": parses()}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=0)
    accepted = sum(c["megatron"]["accepted"] for c in cases)
    print(f"layer_offsets.py: {len(cases)} configurations ({accepted} accepted by Megatron Core "
          f"{megatron_version}), {len(result['parses'])} layout strings -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
