// Partial per-layer graphs (harness/graphs/graph_scope.h, docs/graph-phases.md
// "Partial graphs"): the scope's parse and capture table, the site-to-stage
// map the checks read, and models run under each scope against eager runs: the
// captured stages are regions (silent on replay steps), the rest runs eagerly
// and is observed on every step with the eager run's values, bit for bit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "harness/graphs/graph_scope.h"
#include "tests/graphs/graph_drive.h"

namespace parity {
namespace {

using testing::drive;
using testing::expect_same_results;
using testing::GraphRun;
using testing::Note;
using testing::select;

GraphScope scope_of(std::string_view list) {
  std::string why;
  std::optional<GraphScope> s = parse_graph_scope(list, &why);
  EXPECT_TRUE(s.has_value()) << list << ": " << why;
  return s.value_or(GraphScope{});
}

TEST(GraphScope, ParsesModuleListsAndNamesWhatItRejects) {
  EXPECT_TRUE(scope_of("").whole_layer());
  const GraphScope s = scope_of("moe_preprocess,attn,moe_router");
  EXPECT_TRUE(s.attn && s.moe_router && s.moe_preprocess);
  EXPECT_FALSE(s.mlp || s.moe || s.whole_layer());
  EXPECT_EQ(to_string(s), "attn,moe_router,moe_preprocess");  // canonical order
  EXPECT_EQ(scope_of(to_string(s)), s);
  std::string why;
  EXPECT_FALSE(parse_graph_scope("attn,ffn", &why));
  EXPECT_NE(why.find("unknown module \"ffn\""), std::string::npos) << why;
  EXPECT_FALSE(parse_graph_scope("mlp,mlp", &why));
  EXPECT_NE(why.find("mlp is listed twice"), std::string::npos) << why;
  EXPECT_FALSE(parse_graph_scope("attn,", &why));  // an empty item is not a module
}

TEST(GraphScope, CapturesTheStagesMegatronsScopesCapture) {
  using S = LayerStage;
  const std::vector<S> all = {S::attention,  S::mlp_input, S::mlp, S::router,
                              S::preprocess, S::experts,   S::post};
  for (S s : all) {
    EXPECT_TRUE(GraphScope{}.captures(s, true)) << to_string(s);  // whole layer
    EXPECT_TRUE(GraphScope{}.captures(s, false)) << to_string(s);
  }
  const GraphScope attn = scope_of("attn");
  EXPECT_TRUE(attn.captures(S::attention, false));
  EXPECT_FALSE(attn.captures(S::mlp_input, false));
  EXPECT_FALSE(attn.captures(S::router, true));
  // mlp is the dense MLP half: an MoE layer's MoE half stays eager.
  const GraphScope mlp = scope_of("mlp");
  EXPECT_TRUE(mlp.captures(S::mlp_input, false) && mlp.captures(S::mlp, false));
  EXPECT_FALSE(mlp.captures(S::attention, false));
  EXPECT_FALSE(mlp.captures(S::router, true) || mlp.captures(S::mlp_input, true));
  // moe: the whole MoE half, the dense MLP half eager.
  const GraphScope moe = scope_of("moe");
  for (S s : {S::mlp_input, S::router, S::preprocess, S::experts, S::post})
    EXPECT_TRUE(moe.captures(s, true)) << to_string(s);
  EXPECT_FALSE(moe.captures(S::mlp, false) || moe.captures(S::attention, true));
  // moe_router: router graph + post-process graph around eager experts.
  const GraphScope router = scope_of("moe_router");
  EXPECT_TRUE(router.captures(S::mlp_input, true) && router.captures(S::router, true) &&
              router.captures(S::post, true));
  EXPECT_FALSE(router.captures(S::preprocess, true) || router.captures(S::experts, true));
  EXPECT_TRUE(scope_of("moe_router,moe_preprocess").captures(S::preprocess, true));
  EXPECT_TRUE(router.captures_router() && moe.captures_router() && GraphScope{}.captures_router());
  EXPECT_FALSE(attn.captures_router() || mlp.captures_router());
}

TEST(GraphScope, SitesBelongToTheirOwnersStage) {
  EXPECT_EQ(layer_stage_of_site("decoder.layers.3.input_layernorm.layernorm_output"),
            LayerStage::attention);
  EXPECT_EQ(layer_stage_of_site("decoder.layers.0.self_attention.core_attention.attention_context"),
            LayerStage::attention);
  EXPECT_EQ(layer_stage_of_site("decoder.layers.1.pre_mlp_layernorm.layernorm_output"),
            LayerStage::mlp_input);
  EXPECT_EQ(layer_stage_of_site("decoder.layers.1.mlp.router.router_scores"), LayerStage::router);
  EXPECT_EQ(layer_stage_of_site("decoder.layers.1.mlp.mlp_output"), LayerStage::mlp);
  EXPECT_EQ(layer_stage_of_site("decoder.layers.1.residual_contribution"), std::nullopt);
  EXPECT_EQ(layer_stage_of_site("output_layer.output_logits"), std::nullopt);
  EXPECT_EQ(layer_index_of_site("decoder.layers.12.mlp.mlp_output"), 12);
  EXPECT_EQ(layer_index_of_site("decoder.layers.x.mlp"), std::nullopt);
  EXPECT_EQ(layer_index_of_site("decoder.layers.4"), std::nullopt);
}

// ------------------------------------------------------------ model runs
constexpr int kSteps = 3, kMb = 2;

ModelConfig scoped(std::string_view scope, bool moe) {
  ModelConfig c = testing::graph_config();
  if (moe) {
    c.moe.experts = 4;
    c.moe.topk = 2;
    c.moe.ffn_hidden = 12;
    c.moe.aux_loss_coef = 0.01;
    c.moe.layers = "every:2";  // layer 0 MoE, layer 1 dense
  }
  c.graphs = GraphMode::per_layer;
  c.graph_scope = scope_of(scope);
  return c;
}

// Runs `c` and its eager twin; checks results, the region names, and that on
// replay steps a site is observed (eagerly, with the eager value) iff its stage
// is not captured. tol 0: everything bitwise. tol > 0: step 0 and step 1's
// forward bitwise (the same weights), gradients from step 1 and what follows
// from them within tol relative (more than one region reads the same tensor,
// so its gradient contributions meet in another order: rounding only).
void expect_partial_graphs(const ModelConfig& c, const std::set<std::string>& regions,
                           double tol = 0) {
  SCOPED_TRACE("graph_scope " + to_string(c.graph_scope));
  ModelConfig eager_cfg = c;
  eager_cfg.graphs = GraphMode::none;
  eager_cfg.graph_scope = GraphScope{};
  const GraphRun g = drive(c, kSteps, kMb);
  const GraphRun e = drive(eager_cfg, kSteps, kMb);
  expect_same_results(g, e, tol);

  std::set<std::string> names;
  for (const GraphRegion& r : g.regions) {
    names.insert(r.name);
    EXPECT_TRUE(r.captured) << r.name;
    EXPECT_EQ(r.replays, (kSteps - 1) * kMb) << r.name;
  }
  EXPECT_EQ(names, regions);

  auto captured = [&](const Note& n) {
    const std::string site = n.owner + "." + n.name;
    const std::optional<LayerStage> stage = layer_stage_of_site(site);
    if (!stage) return false;
    const std::int64_t layer = *layer_index_of_site(site);
    return c.graph_scope.captures(*stage, c.moe.enabled() && c.moe.is_moe_layer(layer, c.layers));
  };
  int silent = 0, observed = 0;
  for (int step = 1; step < kSteps; ++step) {
    for (int mb = 0; mb < kMb; ++mb) {
      SCOPED_TRACE("step " + std::to_string(step) + " mb " + std::to_string(mb));
      std::vector<const Note*> want;
      for (const Note* n : select(e, step, mb)) {
        if (captured(*n)) {
          ++silent;
        } else {
          ++observed;
          want.push_back(n);
        }
      }
      const std::vector<const Note*> got = select(g, step, mb);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k]->owner + "." + got[k]->name, want[k]->owner + "." + want[k]->name);
        EXPECT_EQ(got[k]->phase, GraphPhase::eager) << got[k]->owner << " " << got[k]->name;
        const bool same = tol == 0 || step == 1
                              ? at::equal(got[k]->value, want[k]->value)
                              : testing::rel_err(got[k]->value, want[k]->value) <= tol;
        EXPECT_TRUE(same) << got[k]->owner << " " << got[k]->name;
      }
    }
  }
  EXPECT_GT(silent, 0);    // the scope captured something observable
  EXPECT_GT(observed, 0);  // and left something observable outside
}

TEST(GraphScopeModel, AttentionOnlyGraphsLeaveTheMlpHalfEager) {
  expect_partial_graphs(scoped("attn", false), {"decoder.layers.0.attn", "decoder.layers.1.attn"});
}

TEST(GraphScopeModel, MlpOnlyGraphsLeaveTheAttentionHalfEager) {
  expect_partial_graphs(scoped("mlp", false), {"decoder.layers.0.mlp", "decoder.layers.1.mlp"});
}

TEST(GraphScopeModel, DenseScopesLeaveTheMoEHalfEagerSoItsRouterIsObservedOnReplays) {
  const ModelConfig c = scoped("attn,mlp", true);
  expect_partial_graphs(c,
                        {"decoder.layers.0.attn", "decoder.layers.1.attn", "decoder.layers.1.mlp"});
  // The router's sites on every replay step.
  const GraphRun g = drive(c, kSteps, kMb);
  int router = 0;
  for (const Note& n : g.notes)
    if (n.step >= 1 && n.kind == SourceKind::router_scores) ++router;
  EXPECT_EQ(router, (kSteps - 1) * kMb);
}

// The router graph and the post-process graph both read the MoE half's input
// (the norm's input and the residual) and the pre-MLP norm's output (router
// and experts, shared expert): the replayed step's gradients of those inputs
// sum in another order than the eager layer's. fp64 rel 1e-12 is the
// contract's gradient tolerance (recompute_invariance).
TEST(GraphScopeModel, MoeRouterGraphsSurroundEagerExperts) {
  expect_partial_graphs(scoped("moe_router", true),
                        {"decoder.layers.0.moe_router", "decoder.layers.0.moe_post"}, 1e-12);
  expect_partial_graphs(scoped("attn,moe_router,moe_preprocess", true),
                        {"decoder.layers.0.attn", "decoder.layers.1.attn",
                         "decoder.layers.0.moe_router", "decoder.layers.0.moe_post"},
                        1e-12);
}

TEST(GraphScopeModel, MoeScopeCapturesTheWholeMoEHalfWithDropAndPad) {
  ModelConfig c = scoped("moe", true);
  c.moe.capacity_factor = 1.5;
  expect_partial_graphs(c, {"decoder.layers.0.moe"});
}

TEST(GraphScopeConfig, RulesNameTheFieldTheValueAndTheRule) {
  auto rules = [](const ModelConfig& c) {
    std::string all;
    for (const ModelConfigViolation& v : c.violations(1, 1, 1))
      all += v.field + "=" + v.value + ": " + v.rule + "\n";
    return all;
  };
  ModelConfig c = scoped("attn", false);
  EXPECT_EQ(rules(c), "");
  c.graphs = GraphMode::full_iteration;
  EXPECT_NE(rules(c).find("graph_scope=attn: needs per-layer graphs"), std::string::npos);
  EXPECT_NE(rules(scoped("moe", false)).find("need moe_experts >= 2"), std::string::npos);
  EXPECT_NE(rules(scoped("moe", true)).find("moe needs moe_capacity_factor > 0"),
            std::string::npos);
  EXPECT_NE(rules(scoped("moe_preprocess", true)).find("moe_preprocess needs moe_router"),
            std::string::npos);
  EXPECT_NE(rules(scoped("moe,moe_router", true)).find("name one"), std::string::npos);
  ModelConfig r = scoped("moe_router", true);
  r.recompute = RecomputeKind::selective;
  r.recompute_modules = parse_recompute_modules("layernorm");
  EXPECT_NE(rules(r).find("recompute_modules=layernorm: the layernorm checkpoint would span"),
            std::string::npos)
      << rules(r);
  r.recompute_modules = parse_recompute_modules("core_attn,mlp");
  EXPECT_EQ(rules(r), "");
}

}  // namespace
}  // namespace parity
