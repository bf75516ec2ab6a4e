#include "scenarios/generators.h"

#include <algorithm>
#include <ostream>

#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/config/resume_layout.h"
#include "harness/graphs/graph_scope.h"
#include "harness/metrics/metric_names.h"
#include "scenarios/draws.h"

namespace parity {

void showValue(const RunConfig& config, std::ostream& os) {
  os << checks::scenario_file_json(config).dump();
}

}  // namespace parity

namespace parity::scenarios {

namespace gen = rc::gen;

namespace {

// Per-layer graphs whose scope captures the router (router metrics are then
// rejected, megatron-reference 7.11).
bool router_captured(const RunConfig& c) {
  return c.graphs == GraphMode::per_layer &&
         parse_graph_scope(c.graph_scope, nullptr).value_or(GraphScope{}).captures_router();
}
}  // namespace

void pick_layout(RunConfig& c) {
  c.tp = weighted<int>({{4, 1}, {4, 2}, {2, 4}});
  c.cp = weighted<int>({{6, 1}, {4, 2}, {1, 4}});
  c.dp = weighted<int>({{4, 1}, {4, 2}, {1, 4}});
  // World <= 16: thread ranks share 2 cores in CI.
  while (c.world_size() > 16) {
    if (c.dp > 1)
      c.dp /= 2;
    else
      c.cp /= 2;
  }
  c.sp = c.tp > 1 && weighted<bool>({{1, false}, {1, true}});
}

void pick_model_shape(RunConfig& c) {
  // Heads split over tp; hidden, ffn and vocab are multiples of tp.
  c.heads = c.tp * weighted<int>({{2, 1}, {1, 2}});
  c.hidden = std::max(weighted<int>({{2, 8}, {2, 16}, {1, 32}}), 4 * c.heads);
  c.ffn_hidden = c.hidden * weighted<int>({{2, 2}, {1, 4}});
  c.vocab = c.tp * weighted<int>({{2, 8}, {1, 16}});
  // Sequence: CP's 2*cp load-balanced chunks, each split over tp under SP.
  const int unit = (c.cp > 1 ? 2 * c.cp : 1) * (c.sp ? c.tp : 1);
  const int at_least_4 = (4 + unit - 1) / unit;
  c.seq = unit * at_least_4 * weighted<int>({{3, 1}, {1, 2}});
  c.layers = weighted<int>({{4, 1}, {4, 2}, {2, 3}, {1, 4}});
  c.micro_batch = weighted<int>({{3, 1}, {1, 2}});
  c.microbatches = weighted<int>({{3, 1}, {2, 2}, {1, 3}});
  c.dtype =
      weighted<ModelDType>({{6, ModelDType::fp32}, {3, ModelDType::fp64}, {1, ModelDType::bf16}});
  c.dropout = weighted<double>({{4, 0.0}, {1, 0.1}});
  c.norm = weighted<NormKind>({{3, NormKind::layer_norm}, {1, NormKind::rms_norm}});
  c.activation = weighted<ActivationKind>({{3, ActivationKind::gelu}, {1, ActivationKind::swiglu}});
  // Every dtype with and without an fp32 residual stream (fp64 + fp32 residual
  // rounds like fp32: tolerance.h), so recompute x dtype x residual is covered.
  c.fp32_residual = sometimes(3);
  // Megatron's model options (rotary positions, tied embeddings, bias-free
  // linears); the defaults first, so they shrink away.
  c.position_embedding = weighted<PositionEmbeddingKind>(
      {{3, PositionEmbeddingKind::learned}, {1, PositionEmbeddingKind::rope}});
  c.untie = !sometimes(4);
  c.bias_linear = !sometimes(4);
  // Grouped-query attention: a divisor of heads (heads is tp or 2 tp, so every
  // divisor is a multiple or a divisor of tp, Megatron's rule; below tp the
  // ranks all-gather the projection); one group per head (0) first.
  std::vector<int> groups;
  for (int g = 1; g <= c.heads; ++g)
    if (c.heads % g == 0) groups.push_back(g);
  c.num_query_groups = sometimes(3) ? one_of(groups) : 0;
  // A head dimension of 6 (never hidden / heads, a power of two; even for rope;
  // (heads + 2 groups) * 6 splits over every tp drawn) and q/k norms.
  c.kv_channels = sometimes(4) ? 6 : 0;
  c.qk_layernorm = sometimes(4);
  // Megatron's rotary options under rope (half of a head dimension of at least
  // 4 always rotates), and the norm epsilon.
  if (c.position_embedding == PositionEmbeddingKind::rope) {
    c.rotary_base = sometimes(4) ? 500000.0 : 10000.0;
    c.rotary_percent = sometimes(4) ? 0.5 : 1.0;
    c.rotary_interleaved = sometimes(4);
  }
  c.norm_epsilon = sometimes(4) ? 1e-6 : 1e-5;
  c.gather_output = c.tp > 1 && sometimes(3);
  // The forward's runtime_gather_output, which wins over gather_output (7.7).
  c.runtime_gather_output = c.tp > 1
                                ? weighted<RuntimeGatherOption>({{2, RuntimeGatherOption::unset},
                                                                 {1, RuntimeGatherOption::on},
                                                                 {1, RuntimeGatherOption::off}})
                                : RuntimeGatherOption::unset;
  c.lr = weighted<double>({{5, 0.1}, {1, 0.0}});
  c.seed = sometimes(4) ? 1 + index_below(100000) : 1234;
}

void pick_moe(RunConfig& c, bool always) {
  // Megatron requires sequence parallelism for MoE with tp > 1.
  if (c.tp > 1 && !c.sp) return;
  if (!always && !sometimes(4)) return;
  c.moe_experts = weighted<int>({{2, 2}, {2, 4}});
  c.moe_topk = 1 + static_cast<int>(index_below(std::min(2, c.moe_experts)));
  c.moe_score = weighted<RouterScore>(
      {{3, RouterScore::softmax}, {1, RouterScore::sigmoid}, {1, RouterScore::sqrt_softplus}});
  c.moe_ffn_hidden = sometimes(3) ? c.hidden : 0;  // multiples of tp either way
  c.moe_layers = c.layers > 1 && sometimes(3) ? "every:2" : "all";
  c.moe_aux_loss = sometimes(3) ? 0.01 : 0.0;
  c.moe_seq_aux_loss = c.moe_aux_loss > 0 && sometimes(2);
  c.moe_expert_bias = sometimes(4) ? 0.01 : 0.0;
  c.moe_capacity_factor = weighted<double>({{3, 0.0}, {1, 1.0}, {1, 1.5}});
  c.moe_shared_expert_ffn = sometimes(4) ? c.hidden : 0;
  c.moe_force_routing = weighted<ForcedRouting>(
      {{4, ForcedRouting::none}, {1, ForcedRouting::random}, {1, ForcedRouting::biased}});
  c.padding_fraction = sometimes(3) ? 0.25 : 0.0;
  // Expert parallelism inside cp x dp (Megatron's layout), experts split evenly.
  const int cp_dp = c.cp * c.dp;
  c.ep = cp_dp % 2 == 0 && c.moe_experts % 2 == 0 && sometimes(2) ? 2 : 1;
  // Expert tensor parallelism (Megatron's expert_tensor_parallel_size): the
  // experts split over a TP size of their own a quarter of the time, where
  // the expert layout etp x ep tiles the stage and the expert width divides.
  const int expert_ffn = c.moe_ffn_hidden > 0 ? c.moe_ffn_hidden : c.ffn_hidden;
  std::vector<int> etps;
  for (int e : {1, 2, 4})
    if (e != c.tp && (c.tp * cp_dp) % (e * c.ep) == 0 && expert_ffn % e == 0) etps.push_back(e);
  c.etp = !etps.empty() && sometimes(4) ? one_of(etps) : 0;
}

void pick_graphs(RunConfig& c) {
  c.graphs = weighted<GraphMode>(
      {{5, GraphMode::none}, {3, GraphMode::per_layer}, {2, GraphMode::full_iteration}});
  c.graph_warmup = one_of<int>({0, 1, 2});
  switch (c.graphs) {
    case GraphMode::none:
      c.graph_warmup = 1;  // unused: the default, so it shrinks away
      c.steps = weighted<int>({{2, 1}, {3, 2}, {1, 3}});
      break;
    case GraphMode::per_layer: {  // step 0 records, later steps replay
      c.steps = one_of<int>({2, 3});
      // Partial graphs (Megatron's cuda_graph_scope) half the time; "moe"
      // only with drop-and-pad (its rule, graph_scope_violations).
      std::vector<std::string> scopes = {"attn", "mlp", "attn,mlp"};
      if (c.moe_experts >= 2) {
        for (const char* s : {"moe_router", "attn,moe_router", "moe_router,moe_preprocess"})
          scopes.push_back(s);
        if (c.moe_capacity_factor > 0) scopes.push_back("attn,moe");
      }
      c.graph_scope = sometimes(2) ? one_of(scopes) : "";
      break;
    }
    case GraphMode::full_iteration:  // warmup steps, the capture step, a replay
      c.steps = c.graph_warmup + 2;
      break;
  }
}

void pick_recompute(RunConfig& c) {
  // Full recompute with per-layer graphs is rejected (as in Megatron).
  const RecomputeKind kind =
      c.graphs == GraphMode::per_layer
          ? weighted<RecomputeKind>({{4, RecomputeKind::none}, {3, RecomputeKind::selective}})
          : weighted<RecomputeKind>({{4, RecomputeKind::none},
                                     {2, RecomputeKind::full_uniform},
                                     {2, RecomputeKind::full_block},
                                     {3, RecomputeKind::selective}});
  c.recompute_layers = 1;
  switch (kind) {
    case RecomputeKind::none:
      c.recompute = "none";
      break;
    case RecomputeKind::full_uniform: {
      std::vector<int> divisors;
      for (int d = 1; d <= c.layers; ++d)
        if (c.layers % d == 0) divisors.push_back(d);
      c.recompute = "full-uniform";
      c.recompute_layers = one_of(divisors);
      break;
    }
    case RecomputeKind::full_block:
      c.recompute = "full-block";
      c.recompute_layers = 1 + static_cast<int>(index_below(c.layers));
      break;
    case RecomputeKind::selective:
      // Under graph scope moe_router a layernorm or moe checkpoint would span
      // the router graph and the eager experts (rejected).
      if (c.graph_scope.find("moe_router") != std::string::npos) {
        c.recompute = "selective:" + one_of<std::string>({"core_attn", "mlp", "core_attn,mlp"});
        break;
      }
      c.recompute =
          "selective:" +
          one_of<std::string>({"core_attn", "layernorm", "mlp", "core_attn,layernorm",
                               "core_attn,mlp", "layernorm,mlp", "core_attn,layernorm,mlp"});
      // The MoE block's own module (router sites inside a checkpoint).
      if (c.moe_experts >= 2 && sometimes(2))
        c.recompute = sometimes(2) ? "selective:moe" : c.recompute + ",moe";
      break;
  }
}

const std::vector<std::string>& scenario_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const char* source :
         {"layer-residual-accumulator", "layer-residual-contribution", "layer-attention-context",
          "layer-mlp-output", "global-output-logits"})
      for (const char* stat : {"l2", "max", "abs-max", "min", "mean", "rms", "nan-count",
                               "inf-count", "mean-row-l2", "mean-column-l2"})
        out.push_back(std::string(source) + "-" + stat);
    return out;
  }();
  return names;
}

void pick_metrics(RunConfig& c) {
  // Sources x statistics, each included independently: residuals and logits
  // (where the reduction pitfalls live) and the population statistics (mean,
  // l2, rms) are likelier. Empty picks fall back to the first: the simplest.
  struct Weighted {
    const char* name;
    std::size_t in;  // included with probability 1/in
  };
  const Weighted sources[] = {{"layer-residual-contribution", 2},
                              {"layer-residual-accumulator", 2},
                              {"global-output-logits", 2},
                              {"layer-attention-context", 4},
                              {"layer-mlp-output", 4}};
  const Weighted stats[] = {
      {"l2", 2},  {"mean", 2},      {"rms", 2},       {"max", 4},         {"abs-max", 4},
      {"min", 4}, {"nan-count", 6}, {"inf-count", 6}, {"mean-row-l2", 4}, {"mean-column-l2", 4}};
  std::vector<std::string> chosen_sources, chosen_stats;
  for (const Weighted& s : sources)
    if (sometimes(s.in)) chosen_sources.push_back(s.name);
  for (const Weighted& s : stats)
    if (sometimes(s.in)) chosen_stats.push_back(s.name);
  if (chosen_sources.empty()) chosen_sources.push_back(sources[0].name);
  if (chosen_stats.empty()) chosen_stats.push_back(stats[0].name);
  c.metrics.clear();
  for (const std::string& source : chosen_sources)
    for (const std::string& stat : chosen_stats) c.metrics.push_back(source + "-" + stat);
  // Router metrics: MoE layers outside a captured graph (per-layer graphs
  // whose scope captures the router: rejected, megatron-reference 7.11); the
  // diagnostics metrics only where whole sequences are local (no SP x TP, no
  // CP: 7.10).
  if (c.moe_experts >= 2 && !router_captured(c)) {
    for (const std::string& m : router_metric_names())
      if (sometimes(2)) c.metrics.push_back(m);
    if (!(c.sp && c.tp > 1) && c.cp == 1)
      for (const std::string& m : router_diagnostics_metric_names())
        if (sometimes(3)) c.metrics.push_back(m);
  }
}

const std::vector<std::string>& router_metric_names() {
  static const std::vector<std::string> names = {
      "layer-router-logits-l2", "layer-router-logits-max", "layer-router-logits-sampled-median",
      "layer-router-decision-entropy"};
  return names;
}

const std::vector<std::string>& router_diagnostics_metric_names() {
  static const std::vector<std::string> names = {
      "layer-router-health", "layer-router-seq-aux-decomposition", "layer-router-routing-balance",
      "layer-router-expert-bias"};
  return names;
}

void pick_evaluation(RunConfig& c) {
  // Drawn last, so the fields drawn before keep the values a seed gave them
  // before --eval-every existed (the mutants' budgets were measured on those).
  c.eval_every = weighted<int>({{1, 0}, {1, 1}});  // an evaluation forward after every step
}

void pick_moe_logging(RunConfig& c) {
  // Drawn after everything else, for the same reason as pick_evaluation.
  if (c.moe_experts == 0) return;
  c.moe_z_loss = sometimes(3) ? 0.001 : 0.0;
  c.moe_per_layer_logging = sometimes(2);
}

void pick_optimizer(RunConfig& c) {
  // Drawn last too. The optimizer's norms (each a third of the time) and the
  // distributed optimizer (a third of the DP layouts).
  for (const MetricSpec& s : known_metrics())
    if (s.source == MetricSource::parameters && sometimes(3)) c.metrics.push_back(s.name);
  c.distributed_optimizer = c.dp > 1 && sometimes(3);
}

void pick_mtp(RunConfig& c) {
  // Drawn last too. MTP depths (a quarter of the scenarios, repeated on half of
  // the two-depth ones) and the weight-gradient sites (a quarter), both eager
  // only (parity runs them without graphs).
  if (c.graphs != GraphMode::none) return;
  if (sometimes(4)) {
    c.mtp_layers = sometimes(2) ? 2 : 1;
    c.mtp_repeated_layer = c.mtp_layers == 2 && sometimes(2);
    if (!c.metrics.empty() && sometimes(2)) c.metrics.push_back("global-mtp-logits-l2");
  }
  c.observe_wgrad = sometimes(4);
  // The weight-gradient sites reassemble shards over tp: not with --etp.
  if (c.etp > 0 && c.etp != c.tp) c.observe_wgrad = false;
}

void pick_launch(RunConfig& c) {
  // Processes cost ~10x threads: rare, and small worlds only.
  c.launch = c.world_size() <= 2 && sometimes(12) ? LaunchMode::processes : LaunchMode::threads;
}

void pick_collective_checks(RunConfig& c) {
  // Fingerprints before every collective, so ranks that disagree about which
  // collectives run stop with a mismatch naming both, not a hang or a silently
  // mismatched pairing: on every MoE scenario, where collectives depend on the
  // data (the EP all-to-all's counts, the router's statistics, idle ranks).
  // Not on the others: each fingerprint is a collective of its own, and on
  // every scenario the property label took half as long again. No draw.
  c.check_collectives = c.moe_experts > 0;
}

bool make_idle_ep_rank(RunConfig& c) {
  if (c.moe_experts < 2 || c.moe_experts % 2 != 0 || (c.cp * c.dp) % 2 != 0) return false;
  c.ep = 2;
  // An expert TP size whose layout no longer tiles the stage: the default.
  if (c.etp > 0 && (c.tp * c.cp * c.dp) % (2 * c.etp) != 0) c.etp = 0;
  c.moe_force_routing = ForcedRouting::biased;
  c.moe_topk = std::min(c.moe_topk, c.moe_experts / 2);
  return true;
}

bool make_idle_experts(RunConfig& c) {
  if (c.moe_experts < 2) return false;
  c.moe_force_routing = ForcedRouting::biased;
  c.moe_topk = std::min(c.moe_topk, c.moe_experts - 1);
  return true;
}

bool make_idle_sequence_ranks(RunConfig& c) {
  if (c.moe_experts < 2) return false;
  const int chunks = (c.cp > 1 ? 2 * c.cp : 1) * (c.sp && c.tp > 1 ? c.tp : 1);
  if (chunks == 1) return false;
  c.padding_fraction = 1.0 - 1.0 / chunks;  // seq is a multiple of chunks (pick_model_shape)
  return true;
}

void pick_idle_ranks(RunConfig& c) {
  // Drawn last, for the same reason as pick_evaluation.
  if (c.moe_experts < 2 || !sometimes(2)) return;
  const RunConfig drawn = c;
  const std::size_t kind = index_below(3);  // routing, sequence, both
  bool routing = kind != 1, sequence = kind != 0;
  if (sequence && !make_idle_sequence_ranks(c)) {  // no cp and no SP x TP
    routing = true;
    sequence = false;
  }
  if (routing && (make_idle_ep_rank(c) || make_idle_experts(c)) &&
      std::find(c.metrics.begin(), c.metrics.end(), "global-wgrad-l2") == c.metrics.end())
    c.metrics.emplace_back("global-wgrad-l2");  // its EP sum: zeros from an idle EP rank
  if (sequence) {
    c.moe_per_layer_logging = true;  // the tracker's tp, cp and dp sums
    const auto& router = router_metric_names();
    const bool has_router_metric =
        std::any_of(c.metrics.begin(), c.metrics.end(), [&](const std::string& m) {
          return std::find(router.begin(), router.end(), m) != router.end();
        });
    if (!router_captured(c) && !has_router_metric) c.metrics.emplace_back(router.front());
  }
  if (!checks::validate_check_scenario(c).empty()) c = drawn;
}

void pick_resume(RunConfig& c) {
  // Drawn last, for the same reason as pick_evaluation. A third of the
  // scenarios with two steps or more save and resume (resume_invariance): at
  // the scenario's layout or one with an axis changed (every valid one alike),
  // sometimes under Adam in fp64 (fp32's rounding is no match for Adam's
  // normalized updates, check.cpp's note).
  if (c.steps < 2 || !sometimes(3)) return;
  c.resume_at = 1 + static_cast<int>(index_below(static_cast<std::size_t>(c.steps - 1)));
  std::vector<std::string> layouts = {""};
  auto halve = [](int n) { return std::to_string(n / 2); };
  if (c.tp > 1) layouts.push_back("tp=1");
  if (c.tp == 1) layouts.push_back("tp=2");
  if (c.cp > 1) layouts.push_back("cp=" + halve(c.cp));
  if (c.dp > 1) layouts.push_back("dp=" + halve(c.dp) + (c.ep > 1 ? ",ep=1" : ""));
  if (c.dp < 4) layouts.push_back("dp=" + std::to_string(2 * c.dp));
  if (c.pp > 1) layouts.push_back("pp=1");
  if (c.pp == 1 && c.layers >= 2) layouts.push_back("pp=2");
  if (c.dp > 1) layouts.push_back("tp=" + std::to_string(2 * c.tp) + ",dp=" + halve(c.dp));
  std::vector<std::string> valid;
  for (const std::string& l : layouts) {
    RunConfig r = c;
    r.resume_layout = l;
    const std::optional<RunConfig> at = resumed_config(r);
    // World <= 16 at the resume layout too (pick_layout's bound).
    if (at && at->world_size() <= 16 && checks::validate_check_scenario(r).empty())
      valid.push_back(l);
  }
  if (valid.empty()) {  // an invalid scenario: no resume makes it valid
    c.resume_at = 0;
    return;
  }
  c.resume_layout = one_of(valid);
  if (c.dtype == ModelDType::fp64 && !c.fp32_residual && sometimes(3)) {
    c.optimizer = OptimizerKind::adam;
    if (c.lr > 0) c.lr = 0.01;
  }
}

void pick_packing(RunConfig& c) {
  // Drawn last, for the same reason as pick_evaluation. A sixth of the
  // scenarios pack one to three documents in every sequence (Megatron's THD
  // batches, micro-batch 1), of any length, so most are no multiple of 2 x cp
  // and CP pads them; as many as fit in seq once padded.
  if (c.mtp_layers > 0 || c.pp > 1 || c.padding_fraction > 0 || !sometimes(6)) return;
  const RunConfig drawn = c;
  const int multiple = c.cp > 1 ? 2 * c.cp : 1;
  const int documents = 1 + static_cast<int>(index_below(3));
  std::string lengths;
  int span = 0;
  for (int d = 0; d < documents; ++d) {
    const int length =
        1 + static_cast<int>(index_below(static_cast<std::size_t>(std::max(1, c.seq / documents))));
    const int padded = (length + multiple - 1) / multiple * multiple;
    if (span + padded > c.seq) break;
    span += padded;
    lengths += (lengths.empty() ? "" : ",") + std::to_string(length);
  }
  c.packed_seq_lengths = lengths;
  c.micro_batch = 1;
  if (!checks::validate_check_scenario(c).empty()) c = drawn;
}

rc::Gen<RunConfig> gen_scenario() {
  return gen::exec([] {
    RunConfig c;
    pick_layout(c);
    pick_model_shape(c);
    pick_moe(c, /*always=*/false);
    pick_graphs(c);
    pick_recompute(c);
    pick_metrics(c);
    pick_launch(c);
    pick_evaluation(c);
    pick_moe_logging(c);
    pick_optimizer(c);
    pick_mtp(c);
    pick_idle_ranks(c);
    pick_collective_checks(c);
    pick_resume(c);
    pick_packing(c);
    return c;
  });
}

rc::Gen<RunConfig> gen_moe_scenario() {
  return gen::exec([] {
    RunConfig c;
    pick_layout(c);
    if (c.tp > 1 && !c.sp) {
      // MoE needs SP with tp > 1: the sequence must split over tp too.
      c.sp = true;
    }
    pick_model_shape(c);
    pick_moe(c, /*always=*/true);
    pick_graphs(c);
    pick_recompute(c);
    pick_metrics(c);
    pick_launch(c);
    pick_evaluation(c);
    pick_moe_logging(c);
    pick_optimizer(c);
    pick_mtp(c);
    pick_idle_ranks(c);
    pick_collective_checks(c);
    pick_resume(c);
    pick_packing(c);
    return c;
  });
}

nlohmann::json differing_fields(const RunConfig& config) {
  const nlohmann::json defaults = to_json(RunConfig{});
  nlohmann::json out = nlohmann::json::object();
  const nlohmann::json given = to_json(config);
  for (const auto& [key, value] : given.items())
    if (!defaults.contains(key) || defaults[key] != value) out[key] = value;
  return out;
}

}  // namespace parity::scenarios
