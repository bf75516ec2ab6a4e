#include "scenarios/fault_shapes.h"

#include <algorithm>
#include <string>

#include "harness/checks/check.h"
#include "harness/graphs/graph_scope.h"
#include "harness/metrics/metric_names.h"
#include "scenarios/generators.h"

PARITY_USES_FAULT(aux_loss_tracked_on_recompute);
PARITY_USES_FAULT(aux_loss_tracker_host_side);
PARITY_USES_FAULT(collective_skipped_when_zero);
PARITY_USES_FAULT(expert_load_count_ungated);
PARITY_USES_FAULT(etp_reduced_over_tp);
PARITY_USES_FAULT(expert_skip_empty_rank);
PARITY_USES_FAULT(gqa_kv_heads_split_wrong);
PARITY_USES_FAULT(mtp_layer_number_collision);
PARITY_USES_FAULT(moe_tracker_size_per_stage);
PARITY_USES_FAULT(observe_forced_logits);
PARITY_USES_FAULT(optimizer_step_not_saved);
PARITY_USES_FAULT(packed_positions_global);
PARITY_USES_FAULT(pp_send_order);
PARITY_USES_FAULT(qk_norm_over_whole_hidden);
PARITY_USES_FAULT(static_grad_aliasing);
PARITY_USES_FAULT(pp_grads_cleared_per_microbatch);
PARITY_USES_FAULT(recompute_rng_not_restored);
PARITY_USES_FAULT(replica_marked_tp_sharded);
PARITY_USES_FAULT(replica_saved_per_rank);
PARITY_USES_FAULT(reshard_flat_buffer_order);
PARITY_USES_FAULT(resume_rng_not_restored);
PARITY_USES_FAULT(tied_embedding_norm_twice);
PARITY_USES_FAULT(router_stats_include_padding);
PARITY_USES_FAULT(warmup_counted_as_step);
PARITY_USES_FAULT(wrong_gather_precedence);
PARITY_USES_FAULT(wgrad_hook_per_graph_task);

namespace parity::scenarios {

namespace {

// Megatron's MoE tracker logs a loss only when one is configured.
void ensure_logged_loss(RunConfig& s) {
  s.moe_per_layer_logging = true;
  if (!(s.moe_aux_loss > 0) && !(s.moe_z_loss > 0)) s.moe_z_loss = 0.001;
}

// The router runs inside a checkpoint: full recompute (full-block always
// includes layer 0, an MoE layer under every moe_layers pattern the generators
// draw) or the selective moe module, added where needed.
void checkpoint_router(RunConfig& s) {
  if (s.recompute.rfind("full-", 0) == 0) return;
  if (s.recompute.rfind("selective:", 0) == 0) {
    if (s.recompute.find("moe") == std::string::npos) s.recompute += ",moe";
  } else {
    s.recompute = "selective:moe";
  }
}

// A graph captures the router and at least one step replays it.
bool replay_router(RunConfig& s) {
  if (s.graphs == GraphMode::none) {
    if (s.recompute.rfind("full-", 0) == 0) return false;  // rejected with graphs (Megatron)
    s.graphs = GraphMode::per_layer;
  }
  if (s.graphs == GraphMode::per_layer) {
    std::string why;
    const auto scope = parse_graph_scope(s.graph_scope, &why);
    if (!scope || !scope->captures_router()) s.graph_scope = "";  // the whole layer
    s.steps = std::max(s.steps, 2);
  } else {
    s.steps = std::max(s.steps, s.graph_warmup + 2);
  }
  return true;
}

void add_metric(RunConfig& s, const char* metric) {
  if (std::find(s.metrics.begin(), s.metrics.end(), metric) == s.metrics.end())
    s.metrics.emplace_back(metric);
}

// A resume (resume_invariance): two steps at least, saved after the first
// unless the case drew a resume of its own.
void resume(RunConfig& s) {
  s.steps = std::max(s.steps, 2);
  if (s.resume_at == 0 || s.resume_at >= s.steps) s.resume_at = 1;
}

// Adam, in fp64 (check.cpp's note: fp32 rounding is no match for Adam's
// normalized updates), updating.
void adam(RunConfig& s) {
  s.optimizer = OptimizerKind::adam;
  s.dtype = ModelDType::fp64;
  s.fp32_residual = false;
  if (!(s.lr > 0) || s.lr > 0.01) s.lr = 0.01;
}

}  // namespace

bool shape_for_fault(RunConfig& s, CodePathFault fault) {
  if (fault == fault_wgrad_hook_per_graph_task) {
    // A weight in two reentrant checkpoints of one backward: the MTP layer
    // repeated over two depths, checkpointed by full recompute or inside it
    // by selective mlp. MTP and the hooks run without graphs.
    s.graphs = GraphMode::none;
    s.graph_scope.clear();
    s.observe_wgrad = true;
    s.mtp_layers = 2;
    s.mtp_repeated_layer = true;
    if (s.recompute.rfind("selective:", 0) == 0) {
      if (s.recompute.find("mlp") == std::string::npos) s.recompute += ",mlp";
    } else if (s.recompute.rfind("full-", 0) != 0) {
      s.recompute = "full-uniform";
      s.recompute_layers = 1;
    }
    return true;
  } else if (fault == fault_recompute_rng_not_restored) {
    // Dropout inside a checkpoint: parity's dropout sits in bias-dropout-add,
    // which only full recompute checkpoints (rejected with per-layer graphs).
    if (s.graphs == GraphMode::per_layer) return false;
    if (!(s.dropout > 0)) s.dropout = 0.1;
    if (s.recompute.rfind("full-", 0) != 0) {
      s.recompute = "full-uniform";
      s.recompute_layers = 1;
    }
  } else if (fault == fault_warmup_counted_as_step) {
    // Per-layer graphs with a warmup run and a step after the capture.
    if (s.graphs != GraphMode::per_layer) {
      if (s.recompute.rfind("full-", 0) == 0) return false;  // rejected with graphs (Megatron)
      s.graphs = GraphMode::per_layer;
    }
    s.graph_warmup = std::max(s.graph_warmup, 1);
    s.steps = std::max(s.steps, 2);
  } else if (fault == fault_static_grad_aliasing) {
    // Per-layer graphs, a replay step, and a later microbatch whose replay
    // overwrites the gradient an earlier one handed back.
    if (s.graphs != GraphMode::per_layer) {
      if (s.recompute.rfind("full-", 0) == 0) return false;  // rejected with graphs (Megatron)
      s.graphs = GraphMode::per_layer;
    }
    s.steps = std::max(s.steps, 2);
    s.microbatches = std::max(s.microbatches, 2);
  } else if (fault == fault_observe_forced_logits) {
    // Forced routing, which the router must not observe.
    if (s.moe_force_routing == ForcedRouting::none) s.moe_force_routing = ForcedRouting::random;
  } else if (fault == fault_expert_skip_empty_rank) {
    // An EP rank that receives no token: EP 2 where the layout allows it,
    // and biased routing, which sends every token to experts 0..k-1, all on
    // the first EP rank when k <= E / ep.
    if ((s.cp * s.dp) % 2 != 0 || s.moe_experts % 2 != 0) return false;
    s.ep = 2;
    // An expert TP size whose layout no longer tiles the stage: the default.
    if (s.etp > 0 && (s.tp * s.cp * s.dp) % (2 * s.etp) != 0) s.etp = 0;
    s.moe_topk = std::min(s.moe_topk, s.moe_experts / 2);
    s.moe_force_routing = ForcedRouting::biased;
    // The skipped collectives may leave ranks blocked in different groups,
    // which no fingerprint sees: the hang detector reports them at the timeout.
    s.timeout = 10;
  } else if (fault == fault_collective_skipped_when_zero) {
    // An idle rank and a reduction over its axis (generators.h): ranks whose
    // tokens are all padding and the tracker's sums where the sequence is
    // split, else an EP rank without tokens and the gradient norm's EP sum.
    if (make_idle_sequence_ranks(s)) {
      s.moe_per_layer_logging = true;
    } else if (make_idle_ep_rank(s)) {
      if (std::find(s.metrics.begin(), s.metrics.end(), "global-wgrad-l2") == s.metrics.end())
        s.metrics.emplace_back("global-wgrad-l2");
    } else {
      return false;
    }
    // A peer left waiting while the idle rank blocks in another group is
    // reported by the hang detector at the timeout.
    s.timeout = 10;
  } else if (fault == fault_aux_loss_tracked_on_recompute) {
    ensure_logged_loss(s);
    checkpoint_router(s);
  } else if (fault == fault_expert_load_count_ungated) {
    s.moe_per_layer_logging = true;
    checkpoint_router(s);
  } else if (fault == fault_aux_loss_tracker_host_side) {
    ensure_logged_loss(s);
    if (!replay_router(s)) return false;
  } else if (fault == fault_replica_marked_tp_sharded) {
    // A replica counted by every TP rank needs TP ranks, and a norm to count it in.
    if (s.tp < 2) return false;
    if (std::none_of(s.metrics.begin(), s.metrics.end(),
                     [](const std::string& m) { return is_parameter_metric(m); }))
      add_metric(s, "global-wgrad-l2");
  } else if (fault == fault_pp_send_order || fault == fault_pp_grads_cleared_per_microbatch) {
    // Two microbatches at least (the interleaved schedule: a multiple of pp).
    if (s.pp < 2) return false;
    if (s.microbatches < 2) s.microbatches = s.vpp > 1 ? s.pp : 2;
  } else if (fault == fault_tied_embedding_norm_twice) {
    // A copy of the word embeddings on the last stage (tied, unless MTP
    // depths need it anyway) and a norm that counts the embeddings.
    if (s.pp < 2) return false;
    if (s.mtp_layers == 0) s.untie = false;
    if (std::find(s.metrics.begin(), s.metrics.end(), "global-param-l2") == s.metrics.end())
      add_metric(s, "global-wgrad-l2");
  } else if (fault == fault_mtp_layer_number_collision) {
    // MTP depths (rope under PP; a layout string holds them before its L) and
    // the per-layer norm that files their parameters by layer number.
    if (s.pp < 2) return false;
    if (s.mtp_layers == 0) {
      s.mtp_layers = 1;
      s.position_embedding = PositionEmbeddingKind::rope;
      s.graphs = GraphMode::none;  // MTP runs eagerly
      s.graph_scope.clear();
      if (!s.pp_layout.empty() && s.pp_layout.back() == 'L')
        s.pp_layout.insert(s.pp_layout.size() - 1, "m");
    }
    add_metric(s, "layer-param-l2");
  } else if (fault == fault_moe_tracker_size_per_stage) {
    // The tracker on pipeline stages that build different numbers of layers:
    // MoE layers where the case has none (MoE with tp > 1 needs sp), and one
    // more layer on the first stage where the placement is even.
    if (s.pp < 2 || (s.tp > 1 && !s.sp)) return false;
    if (s.moe_experts == 0) {
      s.moe_experts = 2;
      s.moe_topk = 1;
    }
    s.moe_per_layer_logging = true;
    if (s.pp_first_layers == 0) {  // an even split (the generators' layout strings are even)
      const int per_stage = s.layers / (s.pp * s.vpp) * s.vpp;
      s.vpp = 1;
      s.pp_layout.clear();
      s.pp_first_layers = per_stage + 1;
      s.layers = s.pp_first_layers + (s.pp - 1) * per_stage;
      if (s.recompute == "full-uniform") s.recompute_layers = 1;  // a divisor of every count
    }
  } else if (fault == fault_gqa_kv_heads_split_wrong) {
    // Two query groups over TP 4: ranks 1 and 2 hold a query head of one group
    // and, dealt round-robin, the other group's key and value (the generators'
    // heads are tp or 2 tp, so even).
    if (s.tp < 4) return false;
    s.num_query_groups = 2;
  } else if (fault == fault_reshard_flat_buffer_order) {
    // The distributed optimizer's Adam state, resumed at another DP size.
    resume(s);
    adam(s);
    s.distributed_optimizer = true;
    s.resume_layout =
        s.dp > 1 ? "dp=" + std::to_string(s.dp / 2) + (s.ep > 1 ? ",ep=1" : "") : "dp=2";
  } else if (fault == fault_resume_rng_not_restored) {
    // Dropout, resumed at the same layout (where the streams carry over).
    resume(s);
    s.resume_layout.clear();
    if (!(s.dropout > 0)) s.dropout = 0.1;
  } else if (fault == fault_optimizer_step_not_saved) {
    resume(s);
    adam(s);
  } else if (fault == fault_replica_saved_per_rank) {
    // Replicas: more than one rank.
    resume(s);
    if (s.world_size() == 1) s.dp = 2;
  } else if (fault == fault_etp_reduced_over_tp) {
    // Experts split over a TP size other than tp (1 under tp > 1, else 2
    // where the stage and the expert width allow) and an optimizer norm.
    if (s.moe_experts < 2) return false;
    const int etp = s.tp > 1 ? 1 : 2;
    const int expert_ffn = s.moe_ffn_hidden > 0 ? s.moe_ffn_hidden : s.ffn_hidden;
    if ((s.tp * s.cp * s.dp) % (etp * s.ep) != 0 || expert_ffn % etp != 0) return false;
    s.etp = etp;
    s.observe_wgrad = false;
    if (std::none_of(s.metrics.begin(), s.metrics.end(),
                     [](const std::string& m) { return is_parameter_metric(m); }))
      s.metrics.emplace_back("global-wgrad-l2");
  } else if (fault == fault_qk_norm_over_whole_hidden) {
    // The q/k norms over TP: a rank holds fewer heads than the single-rank
    // run normalizes together.
    if (s.tp < 2) return false;
    s.qk_layernorm = true;
  } else if (fault == fault_wrong_gather_precedence) {
    // A runtime gather_output that overrides the constructor's (the logits
    // gathered where the label says vocab-sharded, or the reverse) and a
    // logits metric that a wrong label changes.
    if (s.tp < 2) return false;
    const bool gathered = s.runtime_gather_output == RuntimeGatherOption::on;
    if (s.runtime_gather_output == RuntimeGatherOption::unset || gathered == s.gather_output)
      s.runtime_gather_output =
          s.gather_output ? RuntimeGatherOption::off : RuntimeGatherOption::on;
    add_metric(s, "global-output-logits-l2");
  } else if (fault == fault_packed_positions_global) {
    // Packed documents under CP, the first of 2 x cp + 1 tokens so that its
    // padding moves the second, and learned position embeddings (rope's
    // scores read relative positions only, which a shift keeps).
    if (s.cp < 2 || s.pp > 1 || s.mtp_layers > 0) return false;
    const int multiple = 2 * s.cp;
    while (s.seq < 4 * multiple) s.seq *= 2;  // stays a multiple of 2 cp (tp)
    s.packed_seq_lengths = std::to_string(multiple + 1) + "," + std::to_string(multiple);
    s.micro_batch = 1;
    s.padding_fraction = 0;
    s.position_embedding = PositionEmbeddingKind::learned;
    s.rotary_base = 10000.0;
    s.rotary_percent = 1.0;
    s.rotary_interleaved = false;
  } else if (fault == fault_router_stats_include_padding) {
    s.moe_per_layer_logging = true;
    if (!(s.padding_fraction > 0)) s.padding_fraction = 0.25;
  } else {
    return true;
  }
  // A resume the case drew may not fit what the shape added (MoE layers at a
  // resume layout without SP, EP 2 at a DP of 1): the case keeps its shape and
  // drops the resume, which the other faults do not need.
  const bool resume_fault =
      fault == fault_reshard_flat_buffer_order || fault == fault_resume_rng_not_restored ||
      fault == fault_optimizer_step_not_saved || fault == fault_replica_saved_per_rank;
  if (!resume_fault && s.resume_at > 0 && !checks::validate_check_scenario(s).empty()) {
    s.resume_at = 0;
    s.resume_layout.clear();
  }
  return checks::validate_check_scenario(s).empty();
}

}  // namespace parity::scenarios
