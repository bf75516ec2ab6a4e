// The pipelined scenarios' pieces (generators.h: pick_pipeline, pick_pipeline_moe,
// gen_pipeline_scenario).
#include <string>
#include <vector>

#include "scenarios/draws.h"
#include "scenarios/generators.h"

namespace parity::scenarios {

namespace gen = rc::gen;

void pick_pipeline(RunConfig& c) {
  c.pp = weighted<int>({{4, 2}, {1, 4}});
  while (c.world_size() > 16) {
    if (c.dp > 1)
      c.dp /= 2;
    else if (c.cp > 1)
      c.cp /= 2;
    else
      c.pp = 2;
  }
  c.vpp = weighted<int>({{3, 1}, {1, 2}});
  // Megatron's interleaved schedule: microbatches at least and a multiple of pp.
  if (c.vpp > 1) c.microbatches = c.pp * weighted<int>({{2, 1}, {1, 2}});
  // Enough layers for every chunk (even split), sometimes one more on the first stage.
  const int chunks = c.pp * c.vpp;
  c.layers = chunks * weighted<int>({{3, 1}, {1, 2}});
  // MTP depths on the last stage (a quarter of the scenarios, repeated on half
  // of the two-depth ones), with rope: the last stage's depths embed with its
  // copy of the word embeddings only (ModelConfig). Tied embeddings as
  // pick_model_shape drew them.
  c.mtp_layers = 0;
  c.mtp_repeated_layer = false;
  if (sometimes(4)) {
    c.mtp_layers = sometimes(2) ? 2 : 1;
    c.mtp_repeated_layer = c.mtp_layers == 2 && sometimes(2);
    c.position_embedding = PositionEmbeddingKind::rope;
  }
  const int placement = weighted<int>({{4, 0}, {1, 1}, {1, 2}});
  if (placement == 1 && c.vpp == 1) {
    c.pp_first_layers = 1 + c.layers / c.pp;  // the rest split evenly over pp - 1 stages
    c.layers = c.pp_first_layers + (c.pp - 1) * (c.layers / c.pp);
  } else if (placement == 2 && c.vpp == 1) {
    // Megatron's layout string: the embedding with stage 0's layers, the loss
    // (after the MTP depths) with the last's.
    const int per_stage = c.layers / c.pp;
    c.pp_layout = "E";
    for (int s = 0; s < c.pp; ++s)
      c.pp_layout += (s ? "|" : "") + std::string("t*") + std::to_string(per_stage);
    c.pp_layout += std::string(static_cast<std::size_t>(c.mtp_layers), 'm') + "L";
  }
  c.moe_experts = 0;  // drawn last (pick_pipeline_moe)
  c.ep = 1;
  pick_graphs(c);
  // MTP depths run eagerly (docs/model.md): no graphs with them.
  if (c.mtp_layers > 0) {
    c.graphs = GraphMode::none;
    c.graph_scope.clear();
  }
  // Eager only; per chunk: a backward step delivers its chunk's sites.
  c.observe_wgrad = c.graphs == GraphMode::none && sometimes(4);
  c.check_collectives = sometimes(2);
}

void pick_pipeline_moe(RunConfig& c) {
  // Drawn last, for the same reason as pick_evaluation.
  if (!sometimes(3)) return;
  pick_moe(c, /*always=*/true);
  if (c.moe_experts == 0) return;  // tp > 1 without sp
  // The weight-gradient sites reassemble shards over tp: not with --etp.
  if (c.etp > 0 && c.etp != c.tp) c.observe_wgrad = false;
  // Where the MoE layers lie: every layer, every second one (layers 0, 2, ...),
  // or the last layer only, so every stage but the last holds dense layers only.
  if (c.layers > 1) {
    c.moe_layers =
        weighted<std::string>({{2, "all"}, {1, "every:2"}, {1, std::to_string(c.layers - 1)}});
  }
  // Per-layer graphs over MoE layers: the whole layer, or Megatron's partial
  // scopes (the router graph; "moe" only with drop-and-pad), on every stage.
  if (c.graphs == GraphMode::per_layer && sometimes(2)) {
    std::vector<std::string> scopes = {"attn"};
    // A layernorm checkpoint would span the router graph and the eager
    // experts (graph_scope_violations): the MoE scopes only without it.
    if (c.recompute.find("layernorm") == std::string::npos) {
      for (const char* scope : {"moe_router", "attn,moe_router", "moe_router,moe_preprocess"})
        scopes.push_back(scope);
      if (c.moe_capacity_factor > 0) scopes.push_back("attn,moe");
    }
    c.graph_scope = one_of(scopes);
  }
  // The MoE block's own checkpoint, the router metrics (eager only: a graph
  // may capture the router) and the tracker, which every stage joins.
  // (Megatron refuses to checkpoint the MoE block a graph captures part of.)
  if (c.graphs == GraphMode::none && c.recompute.rfind("selective:", 0) == 0 && sometimes(2))
    c.recompute += ",moe";
  if (c.graphs == GraphMode::none)
    for (const std::string& m : router_metric_names())
      if (sometimes(3)) c.metrics.push_back(m);
  pick_moe_logging(c);
  pick_collective_checks(c);
}

rc::Gen<RunConfig> gen_pipeline_scenario() {
  return gen::exec([] {
    RunConfig c;
    pick_layout(c);
    pick_model_shape(c);
    pick_pipeline(c);
    pick_recompute(c);
    pick_metrics(c);
    if (c.mtp_layers > 0 && sometimes(2)) c.metrics.push_back("global-mtp-logits-l2");
    pick_launch(c);
    pick_optimizer(c);
    pick_evaluation(c);
    pick_pipeline_moe(c);
    pick_resume(c);
    return c;
  });
}

}  // namespace parity::scenarios
