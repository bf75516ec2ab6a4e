#include "harness/faults/code_path_faults.h"

#include <cstdio>
#include <cstdlib>

namespace parity {

namespace {
using F = CodePathFault;

// The one table. `doc` is what docs/cli.md ("Fault injection") and the
// mutants table print; `caught_by`/`needs` say which property must catch the
// fault and on what kind of scenario (the generators cover every `needs`).
constexpr std::array<CodePathFaultInfo, kCodePathFaultCount> kTable = {{
    {F::missing_recompute_suspension, "missing-recompute-suspension",
     "checkpoint recomputation runs without suspend_tensor_observations: sites inside a "
     "checkpoint are observed twice (forward and recompute)",
     "exactly_once",
     "recompute with a site inside a checkpoint: full, or selective core_attn/mlp/layernorm"},
    {F::observe_recompute_not_forward, "observe-recompute-not-forward",
     "the checkpointed forward is suspended and the recomputation observed instead: one "
     "observation per site, but in backward order and with backward's grad mode",
     "exactly_once",
     "recompute with a site inside a checkpoint: full, or selective core_attn/mlp/layernorm"},
    {F::grad_mode_gating, "grad-mode-gating",
     "the first Megatron revision's rule: observe only while grad mode is on, with no "
     "suspension of recomputation (no-grad checkpoint forwards are invisible, recomputes seen)",
     "exactly_once",
     "recompute with a site inside a checkpoint: full, or selective core_attn/mlp/layernorm"},
    {F::replica_overcount, "replica-overcount",
     "a tensor replicated across an axis contributes from every rank instead of its owner, so "
     "sums and counts are multiplied by the axis size",
     "sharded_reduction",
     "tp > 1 and an l2 metric of a tensor Replica on tp (residual or mlp-output "
     "without sp; logits gathered by the winning gather_output); mean/rms/max are unchanged"},
    {F::sqrt_before_sum, "sqrt-before-sum",
     "L2-type statistics take the square root of each rank's partial sum of squares before "
     "the cross-rank sum",
     "sharded_reduction",
     "an l2/rms metric on a tensor split over ranks (or a row/column-l2 metric "
     "split along the rows/columns it sums)"},
    {F::mean_of_means, "mean-of-means",
     "mean-type statistics average per-rank means over the group instead of dividing the "
     "summed total by the summed count",
     "sharded_reduction",
     "a mean/rms/mean-row-l2 metric where ranks hold unequal non-empty "
     "populations (uneven shards: sharded metric cases; the model's even layouts never expose it)"},
    {F::sp_residual_mislabel, "sp-residual-mislabel",
     "residual observations are labelled Replica on tp under sequence parallelism (the "
     "config-less owner rule of megatron-reference section 7.9)",
     "sharded_reduction", "tp > 1 with sp and a residual metric other than nan-/inf-count"},
    {F::cp_population_dropped, "cp-population-dropped",
     "the population (count) of a statistic is not reduced over the context-parallel axis",
     "sharded_reduction", "cp > 1 and a mean/rms/mean-row-l2 metric"},
    {F::dp_population_dropped, "dp-population-dropped",
     "the population (count) of a statistic is not reduced over the data-parallel axis",
     "sharded_reduction", "dp > 1 and a mean/rms/mean-row-l2 metric"},
    {F::prepare_aliases_buffer, "prepare-aliases-buffer",
     "max/min keep a view of the observed extreme element instead of a copy (a graph's static "
     "buffer is overwritten before the step's finalize); the collector's storage rule rejects it",
     "graph_replay", "a max or min metric on a site observed in fp32/fp64 (bf16 upcasts: a copy)"},
    {F::notify_on_replay, "notify-on-replay",
     "graph replay calls observers as if host code ran (a real CUDA graph replay runs none)",
     "graph_replay", "per-layer graphs with a replay step"},
    {F::warmup_counted_as_step, "warmup-counted-as-step",
     "graph warmup forwards are counted as training-step observations", "graph_replay",
     "per-layer graphs with at least one warmup run"},
    {F::asymmetric_collective, "asymmetric-collective",
     "one rank of each group issues a collective its peers do not (a rank-asymmetric request "
     "sequence)",
     "collective_symmetry", "a group of size > 1 that runs collectives"},
    {F::wrong_gather_precedence, "wrong-gather-precedence",
     "logits are labelled by the constructor's gather_output instead of the runtime value that "
     "wins (megatron-reference section 7.7)",
     "sharded_reduction",
     "tp > 1, --runtime-gather-output differing from --gather-output and a "
     "logits metric (l2/mean-row-l2 when it gathers; any but nan-/inf-count when it does not)"},
    {F::contribution_with_autograd, "contribution-with-autograd",
     "the residual contribution is computed with autograd on: output - accumulator joins the "
     "graph and requires grad (metrics detach their input, so only the trace's flags show it)",
     "exactly_once",
     "a residual observation outside a full-recompute chunk (whose forward runs "
     "under no-grad)"},
    {F::observe_forced_logits, "observe-forced-logits",
     "the router observes the forced routing logits (--moe-force-routing) instead of the raw "
     "gating output (megatron-reference section 7.5)",
     "router_invariance",
     "an MoE layer with --moe-force-routing random or biased and a router site"},
    {F::padding_included, "padding-included",
     "router observations keep the padding tokens instead of compacting to the valid ones "
     "(megatron-reference section 7.4)",
     "router_invariance", "an MoE layer with --padding-fraction > 0"},
    {F::diagnostics_under_cp, "diagnostics-under-cp",
     "the router builds and observes per-sequence diagnostics when sequence parallelism or cp "
     "splits the sequences, instead of declining (megatron-reference section 7.10)",
     "exactly_once",
     "an MoE layer under cp > 1 or sp with tp > 1 (a site the contract rules out fires)"},
    {F::expert_index_local, "expert-index-local",
     "expert parameters are named (and so initialized) by their EP-local index instead of "
     "ep_rank * E/ep + local (megatron-reference section 7.8)",
     "sharded_reduction", "an MoE layer with ep > 1 and a residual or logits metric"},
    {F::router_silent_missing, "router-silent-missing",
     "the router sites fire on replays of a captured layer (a graph replay runs no host code)",
     "graph_replay", "an MoE layer under per-layer graphs with a replay step"},
    {F::median_unpadded_gather, "median-unpadded-gather",
     "the sampled median all-gathers each rank's unpadded values without exchanging lengths "
     "first, so ranks holding different numbers of elements issue different shapes",
     "collective_symmetry",
     "a sampled-median metric over uneven non-empty shards (in the model: router logits "
     "compacted by a padding mask under cp > 1; else sharded metric cases)"},
    {F::recompute_rng_not_restored, "recompute-rng-not-restored",
     "a checkpoint's recomputation draws from the RNG state of backward time instead of the "
     "forward's saved state, so its dropout masks differ from the forward's (field bug: "
     "allenai/OLMo-core PR 828)",
     "recompute_invariance", "recompute over a region with dropout > 0 (full recompute)"},
    {F::expert_skip_empty_rank, "expert-skip-empty-rank",
     "an EP rank that received no routed token skips its experts and returns a tensor cut off "
     "from the dispatch, so its backward issues neither all-to-all and its EP peers wait (field "
     "bug: NVIDIA/Megatron-LM PR 4851)",
     "collective_symmetry",
     "an MoE layer with ep > 1 and an EP rank without routed tokens (--moe-force-routing "
     "biased with moe_topk <= moe_experts / ep)"},
    {F::sp_grad_not_reduced, "sp-grad-not-reduced",
     "the gradients of sequence-parallel parameters (norm weights, row-parallel biases, the "
     "router under SP) are not all-reduced over TP, so each TP rank steps its replica with its "
     "own partial sum (field bug: EleutherAI/gpt-neox PR 1259)",
     "replica_consistency", "sp with tp > 1"},
    {F::cp_loss_scale, "cp-loss-scale",
     "each CP rank normalizes its loss by its own tokens (seq / cp per sequence) instead of the "
     "global token count, so the reported loss and every gradient come out cp times too large "
     "(field bug: NVIDIA/Megatron-LM #673, #906)",
     "sharded_gradients", "cp > 1"},
    {F::cp_kv_grad_local_only, "cp-kv-grad-local-only",
     "the backward of the CP key/value all-gather keeps the gradient of this rank's own chunk "
     "only, dropping what the other ranks' queries sent back to its keys and values (field bug: "
     "huggingface/diffusers #14265, ring attention reading the first step's chunk)",
     "sharded_gradients", "cp > 1"},
    {F::eval_loss_cp_unscaled, "eval-loss-cp-unscaled",
     "the evaluation path skips the CP loss handling: each CP rank normalizes its eval loss by "
     "its own tokens, so the reported eval loss is cp times too large (field bug: "
     "huggingface/transformers PR 48167)",
     "sharded_gradients", "cp > 1 and --eval-every > 0"},
    {F::aux_loss_tracked_on_recompute, "aux-loss-tracked-on-recompute",
     "the MoE loss tracker records the load-balancing and z-losses in a checkpoint's "
     "recomputation too, so a recomputed MoE layer logs them twice (field bug: "
     "NVIDIA/Megatron-LM #1330, #1478)",
     "recompute_invariance",
     "an MoE layer with --moe-per-layer-logging, --moe-aux-loss or --moe-z-loss, and a "
     "recompute kind that checkpoints the router (full, or selective moe)"},
    {F::router_stats_include_padding, "router-stats-include-padding",
     "the router's load-balancing loss, z-loss and expert-load counts take every token, "
     "padding included, instead of the valid ones (field bug: NVIDIA/Megatron-LM #1984)",
     "router_invariance",
     "an MoE layer with --moe-per-layer-logging and a padding mask (--padding-fraction)"},
    {F::expert_load_count_ungated, "expert-load-count-ungated",
     "the router's expert-load counter counts every execution of the gate, so a checkpointed "
     "layer's no-grad forward and its recomputation both count (field bug: "
     "NVIDIA-NeMo/Automodel PR 3247)",
     "recompute_invariance",
     "an MoE layer with --moe-per-layer-logging and a recompute kind that checkpoints the "
     "router"},
    {F::aux_loss_tracker_host_side, "aux-loss-tracker-host-side",
     "the MoE loss tracker accumulates in host code instead of into its persistent device "
     "buffer, so a replayed graph, which runs no host code, adds nothing (field bug: "
     "NVIDIA/Megatron-LM PR 7518, #1494)",
     "graph_replay",
     "an MoE layer with --moe-per-layer-logging and --moe-aux-loss or --moe-z-loss under "
     "graphs that capture the router, with a replay step"},
    {F::replica_marked_tp_sharded, "replica-marked-tp-sharded",
     "the optimizer's norms take TP-replicated parameters (norm weights, row-parallel biases, "
     "the router) for TP shards, so every TP rank counts them and the gradient norm used for "
     "clipping counts them tp times (field bug: ROCm/TransformerEngine PR 715)",
     "sharded_reduction",
     "tp > 1 and a parameter-norm metric (global-wgrad-l2, global-param-l2 or layer-param-l2)"},
    {F::wgrad_hook_per_graph_task, "wgrad-hook-per-graph-task",
     "each gradient hook firing is notified as the parameter's weight_gradient: a hook fires "
     "once per autograd graph execution, so a weight used in several reentrant checkpoints is "
     "notified once per checkpoint with a partial gradient (field bug: pytorch/pytorch #81296)",
     "exactly_once",
     "--observe-wgrad and a weight used in two reentrant checkpoints of one backward "
     "(--mtp-layers 2 --mtp-repeated-layer with full recompute or selective:mlp)"},
}};

}  // namespace

const std::array<CodePathFaultInfo, kCodePathFaultCount>& code_path_faults() { return kTable; }

const CodePathFaultInfo& info(CodePathFault fault) { return kTable[static_cast<int>(fault)]; }

std::optional<CodePathFault> parse_code_path_fault(std::string_view name) {
  for (const CodePathFaultInfo& f : kTable)
    if (f.name == name) return f.fault;
  return std::nullopt;
}

CodePathFaultScope::CodePathFaultScope(Exactly set)
    : previous_(detail::t_active_code_path_faults), outer_(detail::t_code_path_fault_owner) {
  detail::t_active_code_path_faults = set.bits;
  detail::t_code_path_fault_owner = this;
}

CodePathFaultScope::CodePathFaultScope(const std::vector<std::string>& injected)
    : CodePathFaultScope(Exactly{[&] {
        std::uint64_t m = 0;
        for (const std::string& name : injected)
          if (auto f = parse_code_path_fault(name)) m |= code_path_fault_bit(*f);
        return m;
      }()}) {}

CodePathFaultScope::CodePathFaultScope(CodePathFault fault)
    : previous_(detail::t_active_code_path_faults), outer_(detail::t_code_path_fault_owner) {
  detail::t_active_code_path_faults = previous_ | code_path_fault_bit(fault);
  detail::t_code_path_fault_owner = this;
}

CodePathFaultScope::~CodePathFaultScope() {
  if (detail::t_code_path_fault_owner != this) {
    // The leaf room's copy of the observation room's scope-order message.
    std::fputs(
        "parity: CodePathFaultScope destroyed out of order: a scope created after it on "
        "this thread is still alive (scopes must end in reverse order of creation)\n",
        stderr);
    std::abort();
  }
  detail::t_active_code_path_faults = previous_;
  detail::t_code_path_fault_owner = outer_;
}

}  // namespace parity
