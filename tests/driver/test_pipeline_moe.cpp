// MoE layers on pipeline stages: thread ranks over Gloo run the pipeline
// schedules with MoE layers on some or all stages (expert parallelism inside
// each stage's DP ranks). Against the single-rank run (fp64): the losses, every
// parameter's gradient (the aux losses' backward scale per microbatch is the
// non-pipelined one), the router sites under their global names on the owning
// stage only, and Megatron's MoE tracker, whose per-layer vector every stage
// sums over the pipeline group, so every rank, a stage without MoE layers too,
// logs every MoE layer's values.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/config/model_mapping.h"
#include "harness/driver/training_step.h"
#include "harness/graphs/graph_scope.h"
#include "harness/model/pipeline_layout.h"
#include "harness/trace/trace_recorder.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

using testing::model_run_failure;
using testing::run_model;

struct MoePipeline {
  const char* name;
  int tp, dp, ep, pp, vpp, layers, microbatches;
  const char* moe_layers = "all";
  int first_stage_layers = 0;
};
std::string case_name(const ::testing::TestParamInfo<MoePipeline>& info) { return info.param.name; }
void PrintTo(const MoePipeline& l, std::ostream* os) { *os << l.name; }

RunConfig moe_pipeline_run(const MoePipeline& l) {
  RunConfig c = testing::small_config<RunConfig>();
  c.tp = l.tp;
  c.sp = l.tp > 1;
  c.dp = l.dp;
  c.ep = l.ep;
  c.pp = l.pp;
  c.vpp = l.vpp;
  c.layers = l.layers;
  c.microbatches = l.microbatches;
  c.pp_first_layers = l.first_stage_layers;
  c.moe_experts = 4;
  c.moe_topk = 2;
  c.moe_layers = l.moe_layers;
  c.moe_aux_loss = 0.01;
  c.moe_z_loss = 0.001;
  c.moe_per_layer_logging = true;
  c.check_collectives = true;
  c.steps = 2;
  c.dtype = ModelDType::fp64;
  c.seed = 11;
  c.lr = 0.5;
  c.timeout = 60;
  c.trace = "(recorded in memory)";
  return c;
}

// (step, metric, label) -> value of the tracker's metrics of one rank.
using Logged = std::map<std::tuple<std::size_t, std::string, std::string>, double>;
Logged logged_of(const nlohmann::json& rank) {
  Logged out;
  for (std::size_t s = 0; s < rank["steps"].size(); ++s)
    for (const nlohmann::json& m : rank["steps"][s]["metrics"]) {
      const std::string metric = m["metric"].get<std::string>();
      if (metric.rfind("moe-", 0) == 0)
        out[{s, metric, m["label"].get<std::string>()}] = m["value"].get<double>();
    }
  return out;
}

class PipelineMoe : public ::testing::TestWithParam<MoePipeline> {};

TEST_P(PipelineMoe, TrackerGradientsAndRouterSitesEqualTheSingleRankRun) {
  const MoePipeline l = GetParam();
  const RunConfig piped = moe_pipeline_run(l);
  const LaunchResult single = run_model(testing::single_rank_run(piped));
  const LaunchResult ranks = run_model(piped);
  ASSERT_TRUE(single.ok() && ranks.ok());
  const nlohmann::json& s0 = single.results[0];
  const PipelineLayoutConfig placement = model_config_from(piped).pipeline_layout();
  const ModelConfig model = model_config_from(piped);

  // Every MoE layer's tracker values: (aux, z, 4 loads) per step.
  const Logged want = logged_of(s0);
  std::size_t moe_layers = 0;
  for (int i = 0; i < l.layers; ++i) moe_layers += model.moe.is_moe_layer(i, l.layers) ? 1 : 0;
  ASSERT_EQ(want.size(), moe_layers * 6 * 2);
  std::set<int> stages_without_moe;
  for (const nlohmann::json& r : ranks.results) {
    const int stage = r["coordinates"]["pp"].get<int>();
    SCOPED_TRACE("rank " + r["rank"].dump() + " stage " + std::to_string(stage));
    bool builds_moe = false;
    for (int i = 0; i < l.layers; ++i)
      builds_moe = builds_moe || (chunk_of_layer(placement, i).pp_rank == stage &&
                                  model.moe.is_moe_layer(i, l.layers));
    if (!builds_moe) stages_without_moe.insert(stage);
    // Every rank logs every MoE layer (its own stage's or not), as the single rank does.
    const Logged got = logged_of(r);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, value] : want) {
      const auto it = got.find(key);
      ASSERT_NE(it, got.end()) << std::get<1>(key) << " " << std::get<2>(key);
      EXPECT_NEAR(it->second, value, 1e-9 * std::abs(value) + 1e-14)
          << "step " << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key);
    }
    for (std::size_t s = 0; s < s0["steps"].size(); ++s) {
      const double loss = s0["steps"][s]["loss"].get<double>();
      EXPECT_NEAR(r["steps"][s]["loss"].get<double>(), loss, 1e-10 * std::abs(loss)) << s;
    }
    // Gradients by global name (the routers' include the aux losses' backward;
    // an expert's norm is whole on its EP rank). Under TP, norms are of shards.
    for (const auto& [name, norm] : r["steps"][1]["grad_norms"].items()) {
      ASSERT_TRUE(s0["steps"][1]["grad_norms"].contains(name)) << name;
      if (l.tp == 1 || name.find(".router.") != std::string::npos) {
        const double w = s0["steps"][1]["grad_norms"][name].get<double>();
        EXPECT_NEAR(norm.get<double>(), w, 1e-9 * std::abs(w) + 1e-14) << name;
      }
    }
    // The router's sites: on the stage that builds the layer, under its
    // global number, once per microbatch and step.
    std::map<std::string, int> router_sites;
    for (const nlohmann::json& j : r["trace"]) {
      const TraceRecord t = trace_record_from_json(j);
      if (t.site.find(".mlp.router.") == std::string::npos) continue;
      ++router_sites[t.site];
      const std::optional<std::int64_t> layer = layer_index_of_site(t.site);
      ASSERT_TRUE(layer.has_value()) << t.site;
      EXPECT_EQ(chunk_of_layer(placement, static_cast<int>(*layer)).pp_rank, stage) << t.site;
      EXPECT_TRUE(model.moe.is_moe_layer(*layer, l.layers)) << t.site;
    }
    for (const auto& [site, n] : router_sites) EXPECT_EQ(n, l.microbatches * 2) << site;
    EXPECT_EQ(router_sites.empty(), !builds_moe);
  }
  // Cases named "dense_stage" hold a stage without MoE layers.
  EXPECT_EQ(std::string(l.name).find("dense_stage") != std::string::npos,
            !stages_without_moe.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineMoe,
    ::testing::Values(MoePipeline{"pp2_ep2_dp2", 1, 2, 2, 2, 1, 2, 2},
                      MoePipeline{"pp2_vpp2_every_second_layer_dense_stage_1", 1, 1, 1, 2, 2, 4, 2,
                                  "every:2"},
                      MoePipeline{"pp2_dense_stage_0", 1, 1, 1, 2, 1, 2, 3, "1"},
                      MoePipeline{"pp4_dense_stages_0_to_2", 1, 1, 1, 4, 1, 4, 4, "3"},
                      MoePipeline{"pp2_tp2_sp_ep2_dp2_dense_stage_1", 2, 2, 2, 2, 1, 3, 2, "0", 2},
                      MoePipeline{"pp2_uneven_first_stage", 1, 1, 1, 2, 1, 3, 2, "every:2", 2}),
    case_name);

// Fault moe-tracker-size-per-stage: stage 0 builds two layers and sizes its
// vector [2 x (2 + 4)], stage 1 one layer, [1 x 6]. The fingerprints stop
// the pipeline sum before it moves data, naming both stages' calls.
TEST(PipelineMoeTracker, AVectorSizedPerStageIsAMismatchOnThePipelineGroup) {
  RunConfig c = moe_pipeline_run({"x", 1, 1, 1, 2, 1, 3, 2, "all", 2});
  c.trace.clear();
  c.inject = {"moe-tracker-size-per-stage"};
  const std::string text = model_run_failure(c);
  EXPECT_NE(text.find("collective mismatch on pp group [0, 1]: rank 0 called all_reduce(sum) on "
                      "pp, float64 [12], #"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("but rank 1 called all_reduce(sum) on pp, float64 [6], #"), std::string::npos)
      << text;
  c.inject.clear();
  EXPECT_EQ(model_run_failure(c), "");
}

// Where the stages build as many layers the sizes agree and the sum adds
// other layers' rows: stage 1's layer lands in layer 0's row, and layer 1's
// row is never logged.
TEST(PipelineMoeTracker, AVectorSizedPerStageWithEvenStagesLogsOtherLayersRows) {
  RunConfig c = moe_pipeline_run({"x", 1, 1, 1, 2, 1, 2, 2});
  c.trace.clear();
  const LaunchResult right = run_model(c);
  c.inject = {"moe-tracker-size-per-stage"};
  const LaunchResult faulty = run_model(c);
  ASSERT_TRUE(right.ok() && faulty.ok());
  const Logged want = logged_of(right.results[0]), got = logged_of(faulty.results[0]);
  const auto key = [](const char* label) {
    return std::make_tuple(std::size_t{0}, std::string("moe-load-balancing-loss"),
                           std::string(label));
  };
  ASSERT_TRUE(want.count(key("decoder.layers.0")) && want.count(key("decoder.layers.1")));
  EXPECT_FALSE(got.count(key("decoder.layers.1")));
  ASSERT_TRUE(got.count(key("decoder.layers.0")));
  EXPECT_NEAR(got.at(key("decoder.layers.0")),
              want.at(key("decoder.layers.0")) + want.at(key("decoder.layers.1")), 1e-12);
}

}  // namespace
}  // namespace parity
