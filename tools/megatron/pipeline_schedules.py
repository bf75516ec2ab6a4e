#!/usr/bin/env python3
"""pipeline_schedules.py: Megatron Core's pipeline schedules, run stage by stage on the CPU, as JSON.

Usage (inside the venv that ci/megatron-env prints):
    python tools/megatron/pipeline_schedules.py OUT.json

For every configuration of a grid (pp, vpp, microbatches, microbatch_group_size_per_vp_stage,
forward_only) and every pp rank it runs Megatron's own schedule function, the one
get_forward_backward_func picks (forward_backward_no_pipelining,
forward_backward_pipelining_without_interleaving or forward_backward_pipelining_with_interleaving),
in training mode or forward_only (the evaluation) with Megatron's p2p defaults (batch_p2p_comm, no
overlap_p2p_comm), and records, in order, what the stage runs:

- every forward and backward, from mocks of schedules.forward_step / schedules.backward_step
  (microbatch = current_microbatch, chunk = vp_stage; a backward is named by the forward whose
  output it receives);
- every P2PCommunicator call (the real class, its methods and _communicate run unchanged) with the
  ops _communicate hands to _batched_p2p_ops (mocked: records instead of batch_isend_irecv), in
  Megatron's order send_prev, recv_prev, send_next, recv_next. A sent tensor is named by the
  forward (activation) or backward (gradient) that produced it; a received tensor by the forward
  or backward that later consumes it (null when none does).

It also records get_pp_rank_microbatches' warmup count and
cuda_graphs.convert_schedule_table_to_order(warmup, chunks, get_schedule_table(...)), the order
Megatron derives from its schedule table for CUDA graph capture. A configuration Megatron rejects
(an exception from TransformerConfig or the schedule) is recorded with the error.
tests/megatron/pipeline_schedule_conformance.cpp compares parity with the output.

No stage talks to another: each pp rank runs alone, so nothing can hang here; the C++ side plays
the recorded ops against each other. torch.distributed is a gloo world of one (file rendezvous),
initialized only because Megatron's get_pg_rank answers 0 without it; the pipeline group is a stub
with rank() and size(). Shims: torch.cuda.current_device answers the CPU, torch.cuda.synchronize
does nothing, and torch.zeros(device="cuda") (the schedules' token counter) allocates on the CPU.
"""
import json
import sys
import tempfile
import types
import warnings

import torch
import torch.distributed as dist

from megatron.core import __version__ as megatron_version
from megatron.core.enums import ModelType
from megatron.core.pipeline_parallel import p2p_communication, schedules
from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator
from megatron.core.transformer.cuda_graphs import convert_schedule_table_to_order
from megatron.core.transformer.transformer_config import TransformerConfig

CALLS = ["recv_forward", "send_forward", "recv_backward", "send_backward",
         "send_forward_recv_backward", "send_backward_recv_forward", "send_forward_recv_forward",
         "send_backward_recv_backward", "send_forward_backward_recv_forward_backward"]


class StubGroup:
    """The pipeline (or any) process group as the schedules read it: rank() and size()."""

    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


class Recorder:
    """One stage's record: steps in order, and which tensor is which."""

    def __init__(self):
        self.steps = []
        self.call = None
        self.keep = []        # every tagged tensor stays alive, so no id() is reused
        self.produced = {}    # id(tensor) -> ("activation" | "gradient", microbatch, chunk)
        self.pending = {}     # id(received tensor) -> its op, named when consumed

    def tag(self, tensor, kind, microbatch, chunk):
        self.keep.append(tensor)
        self.produced[id(tensor)] = (kind, microbatch, chunk)

    def consume(self, tensors, kind, microbatch, chunk):
        for t in tensors if isinstance(tensors, list) else [tensors]:
            op = self.pending.pop(id(t), None) if t is not None else None
            if op is not None:
                op.update(microbatch=microbatch, chunk=chunk, consumed_as=kind)


RECORDER = None


def batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next,
                    group, prev_pipeline_rank, next_pipeline_rank):
    """Stands in for p2p_communication._batched_p2p_ops: records the ops, moves nothing."""
    ops = []

    def send(tensor, slot_kind, peer):
        kind, microbatch, chunk = RECORDER.produced.get(id(tensor), (None, None, None))
        ops.append({"op": "send", "tensor": slot_kind, "carries": kind, "peer": peer,
                    "microbatch": microbatch, "chunk": chunk})

    def recv(tensor, slot_kind, peer):
        op = {"op": "recv", "tensor": slot_kind, "peer": peer, "microbatch": None, "chunk": None}
        RECORDER.keep.append(tensor)
        RECORDER.pending[id(tensor)] = op
        ops.append(op)

    if tensor_send_prev is not None:
        send(tensor_send_prev, "gradient", prev_pipeline_rank)
    if tensor_recv_prev is not None:
        recv(tensor_recv_prev, "activation", prev_pipeline_rank)
    if tensor_send_next is not None:
        send(tensor_send_next, "activation", next_pipeline_rank)
    if tensor_recv_next is not None:
        recv(tensor_recv_next, "gradient", next_pipeline_rank)
    RECORDER.call["batches"].append(ops)
    return []


class RecordingP2PCommunicator(P2PCommunicator):
    """Megatron's P2PCommunicator over a stub group: peers are pp ranks on the ring, as its
    __init__ computes them (without asking torch.distributed for global ranks)."""

    def __init__(self, pp_group, config):  # noqa: super().__init__ needs a real group
        self.pp_group = pp_group
        self.config = config
        size, rank = pp_group.size(), pp_group.rank()
        self.next_rank = (rank + 1) % size
        self.prev_rank = (rank - 1) % size
        self.virtual_pipeline_model_parallel_size = config.virtual_pipeline_model_parallel_size


def recording(name):
    method = getattr(P2PCommunicator, name)

    def wrapper(self, *args, **kwargs):
        RECORDER.call = {"call": name, "batches": []}
        RECORDER.steps.append(RECORDER.call)
        try:
            return method(self, *args, **kwargs)
        finally:
            RECORDER.call = None

    return wrapper


for _name in CALLS:
    setattr(RecordingP2PCommunicator, _name, recording(_name))


def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                 forward_data_store, config, cp_group_size, collect_non_loss_data=False,
                 checkpoint_activations_microbatch=None, is_first_microbatch=False,
                 current_microbatch=None, vp_stage=None, is_last_stage=True):
    """Stands in for schedules.forward_step: records, consumes the input, tags the output."""
    chunk = vp_stage if vp_stage is not None else 0
    RECORDER.steps.append({"compute": "forward", "microbatch": current_microbatch, "chunk": chunk})
    RECORDER.consume(input_tensor, "forward", current_microbatch, chunk)
    output = torch.zeros(1)
    RECORDER.tag(output, "activation", current_microbatch, chunk)
    num_tokens = torch.tensor(0, dtype=torch.int)
    return ([output] if isinstance(input_tensor, list) else output), num_tokens


def backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
    """Stands in for schedules.backward_step: the backward of the forward that made
    output_tensor; returns a tagged gradient for each non-None input, as the real one does."""
    out = output_tensor[0] if isinstance(output_tensor, list) else output_tensor
    _, microbatch, chunk = RECORDER.produced.get(id(out), (None, None, None))
    RECORDER.steps.append({"compute": "backward", "microbatch": microbatch, "chunk": chunk})
    RECORDER.consume(output_tensor_grad, "backward", microbatch, chunk)

    def gradient(x):
        if x is None:
            return None
        g = torch.zeros(1)
        RECORDER.tag(g, "gradient", microbatch, chunk)
        return g

    if isinstance(input_tensor, list):
        return [gradient(x) for x in input_tensor]
    return gradient(input_tensor)


class StubModel(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model_type = ModelType.encoder_or_decoder


def megatron_config(case):
    pp, vpp = case["pp"], case["vpp"]
    return TransformerConfig(
        num_layers=pp * vpp, hidden_size=8, num_attention_heads=1,
        pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32 if pp > 1 else None,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        microbatch_group_size_per_vp_stage=case["microbatch-group"])


def run_stage(case, config, rank):
    global RECORDER
    RECORDER = Recorder()
    pp, vpp, microbatches = case["pp"], case["vpp"], case["microbatches"]
    group = StubGroup(rank, pp)
    comm = RecordingP2PCommunicator(group, config)
    one = StubGroup(0, 1)
    pg_collection = types.SimpleNamespace(tp=one, cp=one, embd=None, pos_embd=None, pp=group,
                                          dp_cp=one)
    func = schedules.get_forward_backward_func(pp_size=pp, vp_size=vpp if vpp > 1 else None)
    chunks = vpp if pp > 1 else 1
    model = [StubModel(config) for _ in range(vpp)]
    func(forward_step_func=None, data_iterator=[None] * len(model), model=model,
         num_microbatches=microbatches, seq_length=4, micro_batch_size=1,
         forward_only=case["forward-only"],
         p2p_communicator=comm, pg_collection=pg_collection)
    _, _, warmup, _ = schedules.get_pp_rank_microbatches(
        microbatches, chunks, config.microbatch_group_size_per_vp_stage,
        forward_only=case["forward-only"],
        p2p_communicator=comm)
    table = schedules.get_schedule_table(microbatches, chunks,
                                         config.microbatch_group_size_per_vp_stage)
    return {"rank": rank, "function": func.__name__, "warmup": warmup,
            "order": convert_schedule_table_to_order(warmup, chunks, table),
            "steps": RECORDER.steps}


def evaluate(case):
    try:
        config = megatron_config(case)
        return {"accepted": True,
                "stages": [run_stage(case, config, rank) for rank in range(case["pp"])]}
    except Exception as e:  # noqa: BLE001 - any exception is Megatron's rejection
        return {"accepted": False, "error": f"{type(e).__name__}: {e}"}


def case(pp, vpp, microbatches, group=None, forward_only=False):
    return {"pp": pp, "vpp": vpp, "microbatches": microbatches, "microbatch-group": group,
            "forward-only": forward_only}


def grid():
    for pp in [1, 2, 3, 4, 5, 6, 8]:
        for vpp in ([1, 2] if pp == 1 else [1, 2, 3, 4]):
            for microbatches in [*range(1, 13), 15, 16, 24]:
                groups = [None]
                if vpp > 1:
                    groups += sorted({g for g in [pp - 1, pp, pp + 1, pp + 2, 2 * pp,
                                                  microbatches, microbatches + 1] if g >= 1})
                elif microbatches == 4:
                    groups.append(3)  # read only under vpp > 1: must change nothing
                for group in groups:
                    yield case(pp, vpp, microbatches, group)
                # The evaluation's forward_only schedules, on the default group.
                if pp <= 4 and microbatches <= 12:
                    yield case(pp, vpp, microbatches, forward_only=True)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: pipeline_schedules.py OUT.json")
    warnings.simplefilter("ignore")
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *args, **kwargs: None
    zeros = torch.zeros

    def cpu_zeros(*args, device=None, **kwargs):
        return zeros(*args, device="cpu" if device == "cuda" else device, **kwargs)

    torch.zeros = cpu_zeros
    p2p_communication._batched_p2p_ops = batched_p2p_ops
    schedules.forward_step = forward_step
    schedules.backward_step = backward_step
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=0,
                                world_size=1)
        cases = [dict(config=c, megatron=evaluate(c)) for c in grid()]
        dist.destroy_process_group()
    result = {"megatron_core": megatron_version, "cases": cases}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, separators=(",", ":"))
    accepted = sum(c["megatron"]["accepted"] for c in cases)
    print(f"pipeline_schedules.py: {len(cases)} configurations ({accepted} accepted by Megatron "
          f"Core {megatron_version}) -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
