#include "harness/config/model_mapping.h"

#include "harness/model/sequence_packing.h"
#include "harness/trace/trace_recorder.h"

namespace parity {

ModelConfig model_config_from(const RunConfig& c) {
  ModelConfig m;
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.num_query_groups = c.num_query_groups;
  m.kv_channels = c.kv_channels;
  m.qk_layernorm = c.qk_layernorm;
  m.ffn_hidden = c.ffn_hidden;
  m.layers = c.layers;
  m.seq = c.seq;
  // Text that does not parse maps to no packing (validate_run_config says why).
  if (!c.packed_seq_lengths.empty())
    m.packed_seq_lengths = parse_packed_seq_lengths(c.packed_seq_lengths, nullptr)
                               .value_or(std::vector<std::int64_t>{});
  m.micro_batch = c.micro_batch;
  m.vocab = c.vocab;
  m.dtype = c.dtype;
  m.fp32_residual = c.fp32_residual;
  m.dropout = c.dropout;
  m.norm = c.norm;
  m.activation = c.activation;
  m.position_embedding = c.position_embedding;
  m.rotary_base = c.rotary_base;
  m.rotary_percent = c.rotary_percent;
  m.rotary_interleaved = c.rotary_interleaved;
  m.norm_eps = c.norm_epsilon;
  m.untie_embeddings = c.untie;
  m.bias_linear = c.bias_linear;
  m.seed = c.seed;
  m.sequence_parallel = c.sp;
  m.gather_output = c.gather_output;
  if (c.runtime_gather_output != RuntimeGatherOption::unset)
    m.runtime_gather_output = c.runtime_gather_output == RuntimeGatherOption::on;
  const RecomputeSpec recompute = c.recompute_spec();
  m.recompute = recompute.kind;
  m.recompute_modules.core_attn = recompute.has("core_attn");
  m.recompute_modules.layernorm = recompute.has("layernorm");
  m.recompute_modules.mlp = recompute.has("mlp");
  m.recompute_modules.moe = recompute.has("moe");
  m.recompute_layers = c.recompute_layers;
  m.graphs = c.graphs;
  m.graph_warmup = c.graph_warmup;
  // A scope that does not parse maps to the whole layer (validate_run_config says why).
  m.graph_scope = parse_graph_scope(c.graph_scope, nullptr).value_or(GraphScope{});
  m.moe.experts = c.moe_experts;
  m.moe.expert_tp = c.etp;
  m.moe.topk = c.moe_topk;
  m.moe.score = c.moe_score;
  m.moe.ffn_hidden = c.moe_ffn_hidden;
  m.moe.layers = c.moe_layers;
  m.moe.aux_loss_coef = c.moe_aux_loss;
  m.moe.seq_aux_loss = c.moe_seq_aux_loss;
  m.moe.z_loss_coef = c.moe_z_loss;
  m.moe.per_layer_logging = c.moe_per_layer_logging;
  m.moe.expert_bias_rate = c.moe_expert_bias;
  m.moe.capacity_factor = c.moe_capacity_factor;
  m.moe.shared_expert_ffn = c.moe_shared_expert_ffn;
  m.moe.force_routing = c.moe_force_routing;
  m.moe.padding_fraction = c.padding_fraction;
  m.mtp_layers = c.mtp_layers;
  m.mtp_repeated_layer = c.mtp_repeated_layer;
  m.observe_wgrad = c.observe_wgrad;
  m.pipeline.pp = c.pp;
  m.pipeline.vpp = c.vpp;
  if (c.pp_first_layers > 0) m.pipeline.first_stage_layers = c.pp_first_layers;
  if (c.pp_last_layers > 0) m.pipeline.last_stage_layers = c.pp_last_layers;
  m.pipeline.account_for_embedding = c.pp_account_embedding;
  m.pipeline.account_for_loss = c.pp_account_loss;
  m.pipeline.layout = c.pp_layout;
  return m;
}

KindSet model_source_kinds(const RunConfig& c) {
  KindSet kinds = first_wave_kinds();
  if (c.mtp_layers > 0) kinds.insert(SourceKind::mtp_logits);
  if (c.observe_wgrad) kinds.insert(SourceKind::weight_gradient);
  if (c.moe_experts < 2) return kinds;
  kinds.insert(SourceKind::router_logits).insert(SourceKind::router_scores);
  // Diagnostics summarize whole local sequences (megatron-reference 2.3):
  // not when SP x TP or CP splits them (the router declines).
  if (!((c.sp && c.tp > 1) || c.cp > 1)) kinds.insert(SourceKind::router_diagnostics);
  return kinds;
}

}  // namespace parity
