#!/usr/bin/env python3
"""golden.py: run real Megatron Core on a parity scenario and save what parity must match.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/golden.py SCENARIO.json OUTDIR [--weights FILE]

Builds Megatron Core's GPTModel (get_gpt_layer_local_spec(), fp32, CPU, a gloo world of one,
use_cpu_initialization=True, dropout 0, gradient_accumulation_fusion=False, fusions off) from the
model keys of a parity scenario (hidden, heads, num-query-groups, kv-channels, qk-layernorm,
ffn-hidden, layers, seq, vocab, micro-batch, microbatches, dp, norm, norm-epsilon, activation,
seed, position-embedding, rotary-base, rotary-percent, rotary-interleaved, untie, bias-linear,
mtp-layers, packed-seq-lengths;
absent keys take parity's defaults; mtp-layers adds get_gpt_mtp_block_spec's depths), runs one
forward/backward over the global batch (micro-batch * microbatches * dp rows), microbatch by
microbatch, and writes to OUTDIR:

  weights.safetensors   the state dict, unsharded, Megatron's key names (`_extra_state` dropped)
  batch.safetensors     tokens, labels: int64 [global_batch, seq]
  expected.safetensors  logits fp32 [global_batch, seq, vocab]; loss fp32 [global_batch, seq]
                        (per-token cross entropy); grad.<key> for every weight: the gradient of
                        sum(all per-token losses) / (global_batch * seq), parity's normalization
  trace.jsonl           parity's trace schema (docs/trace-format.md) from forward hooks at
                        Megatron's observation sites: each layer's input and output ->
                        residual_accumulator / residual_contribution, the output layer ->
                        output_logits; rank 0, step 0, microbatch = global microbatch index
  scenario.json         the scenario's keys, as given
  REGENERATE.md         the exact command that wrote this folder

packed-seq-lengths (packed THD documents, micro-batch 1): the batch holds the documents in the
single rank's layout (back to back, zeros after the last), each document runs as a sequence of its
own (Megatron's local attention rejects packed input on the CPU), and the expected logits and
losses are assembled at the documents' rows (zeros in the padding); trace.jsonl then holds one
record set per document (Megatron's own runs compare with it, parity's packed trace does not).

--weights FILE loads a weights.safetensors instead of initializing (the `megatron` CTest label
uses it to compare a live run with the committed fixture).

Three shims make Megatron run without CUDA: GlobalMemoryBuffer.get_tensor allocates on
the CPU, CudaRNGStatesTracker.fork is a no-op context (dropout is 0, no RNG state is needed), and
torch.cuda.current_device answers the CPU device (rotary embeddings cache their frequencies there).
A fourth is for MoE: 0.16.1's router_gating_linear reads te_general_gemm, which exists only with
Transformer Engine; golden.py sets it to None.
"""
import argparse
import json
import math
import os
import contextlib
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# parity's defaults (harness/config/run_config.h) for keys a scenario leaves out.
DEFAULTS = {
    "hidden": 64, "heads": 4, "ffn-hidden": 256, "layers": 2, "seq": 16, "vocab": 128,
    "micro-batch": 2, "microbatches": 2, "dp": 1, "norm": "layernorm", "activation": "gelu",
    "seed": 1234, "position-embedding": "learned", "untie": True, "bias-linear": True,
    "dtype": "fp32", "num-query-groups": 0, "kv-channels": 0, "qk-layernorm": False,
    "rotary-base": 10000, "rotary-percent": 1.0, "rotary-interleaved": False,
    "norm-epsilon": 1e-5,
}
MEGATRON_PIN = "0.16.1"  # ci/megatron-env's megatron-core
# MoE options golden.py does not map (parity's defaults); moe-experts, moe-topk, moe-aux-loss and
# moe-z-loss it maps onto Megatron's config.
MOE_DEFAULTS = {
    "moe-score": "softmax", "moe-ffn-hidden": 0, "moe-layers": "all", "moe-seq-aux-loss": False,
    "moe-expert-bias": 0.0, "moe-capacity-factor": 0.0, "moe-shared-expert-ffn": 0,
    "moe-force-routing": "none", "padding-fraction": 0.0, "ep": 1,
}
INIT_STD = 0.02   # parity's ModelConfig::init_std


def fail(msg):
    print(f"golden.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_scenario(path):
    try:
        with open(path) as f:
            given = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(given, dict):
        fail(f"{path}: expected a JSON object")
    s = dict(DEFAULTS)
    s.update(given)
    # Keys that do not change the math (tp, cp, sp, recompute, graphs, metrics, ...) are ignored:
    # the golden run is one unsharded rank. Keys that would change it must be what golden.py runs.
    for key in ("hidden", "heads", "ffn-hidden", "layers", "seq", "vocab", "micro-batch",
                "microbatches", "dp"):
        if not isinstance(s[key], int) or isinstance(s[key], bool) or s[key] < 1:
            fail(f'"{key}" = {json.dumps(s[key])}: must be a positive integer')
    if not isinstance(s["seed"], int) or isinstance(s["seed"], bool) or s["seed"] < 0:
        fail(f'"seed" = {json.dumps(s["seed"])}: must be a non-negative integer')
    for key in ("untie", "bias-linear", "qk-layernorm", "rotary-interleaved"):
        if not isinstance(s[key], bool):
            fail(f'"{key}" = {json.dumps(s[key])}: must be true or false')
    if s.get("dropout", 0) != 0:
        fail(f'"dropout" = {s["dropout"]}: golden.py runs with dropout 0 (the shims fork no RNG)')
    if s["norm"] not in ("layernorm", "rmsnorm"):
        fail(f'"norm" = {s["norm"]!r}: must be layernorm or rmsnorm')
    if s["activation"] not in ("gelu", "swiglu"):
        fail(f'"activation" = {s["activation"]!r}: must be gelu or swiglu')
    if s["position-embedding"] not in ("learned", "rope"):
        fail(f'"position-embedding" = {s["position-embedding"]!r}: must be learned or rope')
    def positive_number(key):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            fail(f'"{key}" = {json.dumps(v)}: must be a number > 0')
    positive_number("rotary-base")
    positive_number("norm-epsilon")
    positive_number("rotary-percent")
    if s["rotary-percent"] > 1:
        fail(f'"rotary-percent" = {json.dumps(s["rotary-percent"])}: must be in (0, 1]')
    if s["position-embedding"] != "rope":
        for key in ("rotary-base", "rotary-percent", "rotary-interleaved"):
            if s[key] != DEFAULTS[key]:
                fail(f'"{key}" = {json.dumps(s[key])}: applies to rotary embeddings only '
                     '("position-embedding": "rope")')
    if s["dtype"] != "fp32":
        fail(f'"dtype" = {s["dtype"]!r}: golden.py runs fp32 only')
    experts = s.get("moe-experts", 0)
    if not isinstance(experts, int) or isinstance(experts, bool) or experts == 1 or experts < 0:
        fail(f'"moe-experts" = {json.dumps(experts)}: must be 0 (dense) or an integer >= 2')
    if experts:
        if s.get("bias-linear", True):
            fail('"bias-linear" = true: with MoE layers golden.py needs false (parity\'s experts '
                 'have no biases)')
        # The MoE keys golden.py maps; any other MoE option must keep parity's default.
        for key, default in MOE_DEFAULTS.items():
            if s.get(key, default) != default:
                fail(f'"{key}" = {json.dumps(s[key])}: golden.py runs MoE layers with its default '
                     f'({json.dumps(default)}) only')
    mtp = s.get("mtp-layers", 0)
    if not isinstance(mtp, int) or isinstance(mtp, bool) or mtp < 0 or mtp >= s["seq"]:
        fail(f'"mtp-layers" = {json.dumps(mtp)}: must be an integer in [0, seq)')
    if s.get("mtp-repeated-layer", False):
        fail('"mtp-repeated-layer" = true: megatron-core ' + MEGATRON_PIN +
             ' has no mtp_use_repeated_layer')
    packed = s.get("packed-seq-lengths", "")
    if packed:
        try:
            lengths = [int(x) for x in str(packed).split(",")]
        except ValueError:
            fail(f'"packed-seq-lengths" = {json.dumps(packed)}: must be a comma list of integers')
        if any(n < 1 for n in lengths) or sum(lengths) > s["seq"]:
            fail(f'"packed-seq-lengths" = {json.dumps(packed)}: lengths >= 1 whose sum fits in '
                 f'seq ({s["seq"]})')
        if s["micro-batch"] != 1:
            fail(f'"micro-batch" = {s["micro-batch"]}: packed (THD) batches need 1')
        if experts or mtp:
            fail(f'"packed-seq-lengths" = {json.dumps(packed)}: golden.py packs documents on '
                 'dense models without MTP only')
        s["packed"] = lengths
    else:
        s["packed"] = None
    kv = s["kv-channels"]
    if not isinstance(kv, int) or isinstance(kv, bool) or kv < 0:
        fail(f'"kv-channels" = {json.dumps(kv)}: must be a non-negative integer (0 = hidden / heads)')
    if not kv and s["hidden"] % s["heads"]:
        fail(f'"heads" = {s["heads"]}: must divide hidden ({s["hidden"]})')
    groups = s["num-query-groups"]
    if (not isinstance(groups, int) or isinstance(groups, bool) or groups < 0
            or (groups and s["heads"] % groups)):
        fail(f'"num-query-groups" = {json.dumps(groups)}: must divide heads ({s["heads"]}) '
             '(0 = heads)')
    return given, s


def install_cpu_shims():
    """The CPU shims (see the module docstring)."""
    from megatron.core import utils as mcore_utils
    from megatron.core.tensor_parallel import random as mcore_random

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        n = math.prod(tensor_shape)
        buf = self.buffer.get((name, dtype))
        if buf is None or buf.numel() < n:
            buf = self.buffer[(name, dtype)] = torch.empty(n, dtype=dtype, device="cpu")
        return buf[:n].view(*tensor_shape)

    mcore_utils.GlobalMemoryBuffer.get_tensor = get_tensor
    mcore_random.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()
    # 0.16.1's router_gating_linear reads te_general_gemm, which exists only with TE installed.
    from megatron.core.transformer.moe import moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    torch.cuda.current_device = lambda: torch.device("cpu")


def init_world(tmpdir):
    import torch.distributed as dist
    from megatron.core import parallel_state
    # A file rendezvous: no port to pick, nothing to race with.
    dist.init_process_group("gloo", init_method=f"file://{tmpdir}/rendezvous", rank=0,
                            world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1,
                                             pipeline_model_parallel_size=1)


def build_model(s, tp=1, pp=1, pre_process=True, post_process=True):
    """Megatron's GPTModel for scenario `s`; tp / pp and the stage flags for the checkpoint tools
    and rank_run.py (this TP rank's part; parallel_state must be initialized with the same
    sizes)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    swiglu = s["activation"] == "swiglu"
    config = TransformerConfig(
        num_layers=s["layers"], hidden_size=s["hidden"], num_attention_heads=s["heads"],
        num_query_groups=s["num-query-groups"] or None,  # None: one group per head
        kv_channels=s["kv-channels"] or None,  # None: hidden // heads
        qk_layernorm=bool(s["qk-layernorm"]),
        ffn_hidden_size=s["ffn-hidden"],  # per half under swiglu (fc1 is 2 * ffn wide), as parity
        hidden_dropout=0.0, attention_dropout=0.0,
        normalization="LayerNorm" if s["norm"] == "layernorm" else "RMSNorm",
        layernorm_epsilon=float(s["norm-epsilon"]), init_method_std=INIT_STD,
        rotary_interleaved=bool(s["rotary-interleaved"]),
        gated_linear_unit=swiglu, activation_func=F.silu if swiglu else F.gelu,
        add_bias_linear=bool(s["bias-linear"]),
        use_cpu_initialization=True, perform_initialization=True,
        gradient_accumulation_fusion=False, bias_activation_fusion=False,
        bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        apply_rope_fusion=False, params_dtype=torch.float32,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32 if pp > 1 else None,
    )
    experts = s.get("moe-experts", 0)
    if experts:
        # Megatron's dropless MoE with the all-gather dispatcher (one rank), experts as
        # SequentialMLP, the switch load-balancing loss and the z-loss.
        config.num_moe_experts = experts
        config.moe_router_topk = s.get("moe-topk", 2)
        config.moe_ffn_hidden_size = s["ffn-hidden"]
        config.moe_aux_loss_coeff = float(s.get("moe-aux-loss", 0.0))
        config.moe_z_loss_coeff = float(s.get("moe-z-loss", 0.0)) or None
        config.moe_router_load_balancing_type = "aux_loss" if config.moe_aux_loss_coeff else "none"
        # parity's softmax routing takes the top-k of the softmax over every expert and keeps
        # those scores as the weights: Megatron's pre-softmax routing (its default softmaxes
        # the top-k logits instead).
        config.moe_router_pre_softmax = True
        config.moe_token_dispatcher_type = "allgather"
        config.moe_grouped_gemm = False
    layer_spec = get_gpt_layer_local_spec(
        num_experts=experts or None, moe_grouped_gemm=False, qk_layernorm=bool(s["qk-layernorm"]),
        normalization="LayerNorm" if s["norm"] == "layernorm" else "RMSNorm")
    mtp_block_spec = None
    if s.get("mtp-layers", 0) > 0:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec
        config.mtp_num_layers = s["mtp-layers"]
        config.mtp_loss_scaling_factor = 0.1  # parity's ModelConfig::mtp_loss_scale
        mtp_block_spec = get_gpt_mtp_block_spec(config, layer_spec, use_transformer_engine=False)
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        mtp_block_spec=mtp_block_spec,
        vocab_size=s["vocab"], max_sequence_length=s["seq"],
        share_embeddings_and_output_weights=not s["untie"],
        position_embedding_type="learned_absolute" if s["position-embedding"] == "learned"
        else "rope",
        rotary_percent=float(s["rotary-percent"]), rotary_base=s["rotary-base"],
        parallel_output=True, pre_process=pre_process, post_process=post_process,
    )


# megatron-core 0.16.1 calls an MTP layer's transformer layer `transformer_layer`; later
# Megatron (and parity) `mtp_model_layer`. The files hold the later name.
def file_name(key):
    return key.replace(".transformer_layer.", ".mtp_model_layer.") if key.startswith("mtp.") else key


def megatron_name(key):
    return key.replace(".mtp_model_layer.", ".transformer_layer.") if key.startswith("mtp.") else key


def weights_of(model):
    """The unsharded state dict, the files' names, `_extra_state` dropped, fp32 copies."""
    return {file_name(k): v.detach().clone() for k, v in model.state_dict().items()
            if not k.endswith("_extra_state") and v is not None}


def load_weights(model, path):
    tensors, _ = safetensors_io.load(path)
    own = weights_of(model)
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        fail(f"{path}: missing keys {missing}, unexpected keys {extra}")
    for k, t in tensors.items():
        if tuple(t.shape) != tuple(own[k].shape):
            fail(f"{path}: {k} has shape {list(t.shape)}, the model wants {list(own[k].shape)}")
    model.load_state_dict({megatron_name(k): t for k, t in tensors.items()}, strict=False)


# --------------------------------------------------------------------------- trace records

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


class TraceRecorder:
    """Records like harness/trace/trace_recorder.cpp (docs/trace-format.md), rank 0."""

    def __init__(self):
        self.records = []
        self.microbatch = -1

    def record(self, site, kind, tensor, tp_shard_dim, requires_grad):
        t = tensor.detach().to("cpu").contiguous()
        data = t.view(torch.uint8).numpy().tobytes()
        d = t.to(torch.float64)
        finite = d[torch.isfinite(d)]
        self.records.append({
            "rank": 0, "seq": len(self.records), "step": 0, "microbatch": self.microbatch,
            "phase": "eager", "site": site, "kind": kind,
            "tp_shard_dim": tp_shard_dim, "sequence_dim": 0, "batch_dim": 1,
            "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "grad_mode": torch.is_grad_enabled(), "requires_grad": requires_grad,
            "aliases_accumulator": False, "thread": 0,
            "digest": f"0x{fnv1a64(data):016x}", "numel": t.numel(),
            "sum": finite.sum().item(), "sum_sq": (finite * finite).sum().item(),
            "min": finite.min().item() if finite.numel() else None,
            "max": finite.max().item() if finite.numel() else None,
            "nan": int(torch.isnan(d).sum()), "inf": int(torch.isinf(d).sum()),
        })

    def jsonl(self):
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.records)


def attach_hooks(model, recorder):
    """Forward hooks where Megatron's observation sites sit (megatron-reference.md 2.2)."""
    handles = []
    for i, layer in enumerate(model.decoder.layers):
        owner = f"decoder.layers.{i}"

        def after_layer(module, args, kwargs, output, owner=owner):
            # observe_layer_residuals(layer, accumulator=input, output) after the layer call;
            # tp_shard_dim None: no sequence parallelism in a world of one.
            acc = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            out = output[0] if isinstance(output, tuple) else output
            recorder.record(f"{owner}.residual_accumulator", "residual_accumulator", acc, None,
                            acc.requires_grad)
            with torch.no_grad():
                contribution = out.detach() - acc.detach()
            recorder.record(f"{owner}.residual_contribution", "residual_contribution",
                            contribution, None, False)
        handles.append(layer.register_forward_hook(after_layer, with_kwargs=True))

    # With MTP the output layer runs once per depth (mtp_logits.<k>) before the decoder's own
    # logits, in each microbatch.
    mtp_depths = model.config.mtp_num_layers or 0
    calls = {"microbatch": None, "n": 0}

    def after_output_layer(module, args, output):
        logits = output[0] if isinstance(output, tuple) else output
        if calls["microbatch"] != recorder.microbatch:
            calls["microbatch"], calls["n"] = recorder.microbatch, 0
        k = calls["n"]
        calls["n"] += 1
        # Not gathered (parallel_output=True): Megatron passes tp_shard_dim -1.
        if k < mtp_depths:
            recorder.record(f"output_layer.mtp_logits.{k}", "mtp_logits", logits, -1,
                            logits.requires_grad)
        else:
            recorder.record("output_layer.output_logits", "output_logits", logits, -1,
                            logits.requires_grad)
    handles.append(model.output_layer.register_forward_hook(after_output_layer))
    return handles


# --------------------------------------------------------------------------- main

def make_batch(s):
    gen = torch.Generator().manual_seed(int(s["seed"]))
    rows = s["micro-batch"] * s["microbatches"] * s["dp"]
    if s["packed"]:
        # Packed documents in the single rank's layout (parity's --load-batch and --dump files):
        # back to back from position 0, document d's labels the ids after its tokens in one
        # stream; the padding after the last document holds 0.
        valid = sum(s["packed"])
        stream = torch.randint(0, s["vocab"], (rows, valid + 1), generator=gen, dtype=torch.int64)
        tokens = torch.zeros(rows, s["seq"], dtype=torch.int64)
        labels = torch.zeros(rows, s["seq"], dtype=torch.int64)
        tokens[:, :valid] = stream[:, :valid]
        labels[:, :valid] = stream[:, 1:]
        return tokens, labels
    stream = torch.randint(0, s["vocab"], (rows, s["seq"] + 1), generator=gen, dtype=torch.int64)
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


def run_packed(model, s, tokens, labels, recorder):
    """Packed documents (THD): Megatron's local attention takes no packed input on the CPU, so
    each document runs as a sequence of its own (positions from 0, causal within it, which is
    what cu_seqlens and --reset-position-ids give a packed batch); its logits and per-token
    losses go to its rows of the packed layout, the padding rows stay 0, and the gradient is
    that of sum(every document's token losses) / (rows * the documents' tokens)."""
    rows = tokens.shape[0]
    global_tokens = rows * sum(s["packed"])
    captured = {}

    def keep_logits(module, args, output):
        captured["logits"] = (output[0] if isinstance(output, tuple) else output).detach().clone()
    handle = model.output_layer.register_forward_hook(keep_logits)
    logits = torch.zeros(rows, s["seq"], s["vocab"])
    losses = torch.zeros(rows, s["seq"])
    for i in range(rows):  # micro-batch 1: one packed sequence per microbatch
        recorder.microbatch = i
        start = 0
        for n in s["packed"]:
            doc = slice(start, start + n)
            positions = torch.arange(n, dtype=torch.int64).unsqueeze(0)
            causal = torch.triu(torch.ones(1, 1, n, n, dtype=torch.bool), diagonal=1)
            loss = model(tokens[i:i + 1, doc], positions, causal, labels=labels[i:i + 1, doc])
            (loss.sum() / global_tokens).backward()
            logits[i, doc] = captured["logits"][:, 0]  # [n, 1, V] -> [n, V]
            losses[i, doc] = loss.detach().float()[0]
            start += n
    handle.remove()
    return logits, losses


def run(model, s, tokens, labels, recorder):
    """Forward/backward microbatch by microbatch; returns logits [B,s,V], loss [B,s]."""
    mb = s["micro-batch"]
    rows = tokens.shape[0]
    global_tokens = rows * s["seq"]
    captured = {}

    def keep_logits(module, args, output):
        # A copy: vocab_parallel_cross_entropy subtracts the row max from the logits in place.
        captured["logits"] = (output[0] if isinstance(output, tuple) else output).detach().clone()
    handle = model.output_layer.register_forward_hook(keep_logits)
    logits, losses = [], []
    positions = torch.arange(s["seq"], dtype=torch.int64).unsqueeze(0).expand(mb, -1)
    # Megatron's causal mask (True = masked out), passed explicitly: its default mask is made
    # on "cuda" (get_default_causal_mask).
    causal = torch.triu(torch.ones(1, 1, s["seq"], s["seq"], dtype=torch.bool), diagonal=1)
    if s.get("mtp-layers", 0) > 0:
        # The MTP loss's backward scale, as the training schedule sets it: the main loss's
        # (each microbatch's mean is its 1 / microbatches share of the batch mean; parity's
        # aux_loss_scale).
        from megatron.core.transformer.multi_token_prediction import MTPLossAutoScaler
        MTPLossAutoScaler.set_loss_scale(torch.tensor(1.0 / (rows // mb)))
    if s.get("moe-experts", 0):
        # The MoE aux losses' backward scale, as the schedule sets it (parity's aux_loss_scale).
        from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler
        MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(1.0 / (rows // mb)))
    for i in range(rows // mb):
        recorder.microbatch = i
        rows_i = slice(i * mb, (i + 1) * mb)
        # With labels Megatron returns its own per-token cross entropy, [b, s].
        loss = model(tokens[rows_i], positions, causal, labels=labels[rows_i])
        (loss.sum() / global_tokens).backward()
        logits.append(captured["logits"].transpose(0, 1).contiguous())  # [s,b,V] -> [b,s,V]
        losses.append(loss.detach().float())
    handle.remove()
    return torch.cat(logits), torch.cat(losses)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("outdir")
    parser.add_argument("--weights", help="weights.safetensors to load instead of initializing")
    a = parser.parse_args()
    given, s = read_scenario(a.scenario)

    install_cpu_shims()
    torch.manual_seed(int(s["seed"]))
    with tempfile.TemporaryDirectory() as tmp:
        init_world(tmp)
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        with contextlib.suppress(Exception):  # its CUDA half is shimmed away; fork is a no-op
            model_parallel_cuda_manual_seed(int(s["seed"]))
        torch.manual_seed(int(s["seed"]))  # CPU initialization draws from this generator
        model = build_model(s).float()
        if a.weights:
            load_weights(model, a.weights)
        model.train()
        weights = weights_of(model)
        tokens, labels = make_batch(s)
        recorder = TraceRecorder()
        handles = attach_hooks(model, recorder)
        logits, loss = (run_packed if s["packed"] else run)(model, s, tokens, labels, recorder)
        for h in handles:
            h.remove()
        params = dict(model.named_parameters())
        expected = {"logits": logits, "loss": loss}
        for k in weights:
            p = params.get(megatron_name(k))
            if p is None:
                continue  # a buffer, not a parameter
            expected[f"grad.{k}"] = p.grad if p.grad is not None else torch.zeros_like(p)

        import megatron.core
        os.makedirs(a.outdir, exist_ok=True)
        meta = {"megatron_core": megatron.core.__version__, "torch": torch.__version__}
        safetensors_io.save(weights, os.path.join(a.outdir, "weights.safetensors"), meta)
        safetensors_io.save({"tokens": tokens, "labels": labels},
                            os.path.join(a.outdir, "batch.safetensors"), meta)
        safetensors_io.save(expected, os.path.join(a.outdir, "expected.safetensors"), meta)
        with open(os.path.join(a.outdir, "trace.jsonl"), "w") as f:
            f.write(recorder.jsonl())
        with open(os.path.join(a.outdir, "scenario.json"), "w") as f:
            json.dump(given, f, indent=2)
            f.write("\n")
        with open(os.path.join(a.outdir, "REGENERATE.md"), "w") as f:
            f.write(
                "# How this folder was made\n\n"
                f"megatron-core {megatron.core.__version__}, torch {torch.__version__}, CPU, fp32.\n\n"
                "```\n"
                "venv=$(ci/megatron-env)\n"
                f"$venv/bin/python tools/megatron/golden.py {a.outdir}/scenario.json {a.outdir}"
                + (" --weights " + a.weights if a.weights else "") + "\n```\n")
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
