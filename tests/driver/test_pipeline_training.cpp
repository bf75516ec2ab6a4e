// Pipeline parallelism end to end: thread ranks over Gloo run the step
// driver's pipeline schedules (1F1B, interleaved 1F1B) with point-to-point
// activations and gradients between stages. Against the single-rank run
// (fp64): the same per-step losses on every rank, the same gradient of every
// parameter on the one stage that holds it (the word embeddings, tied or read
// by MTP depths, on the first and the last), the optimizer's norms, and each
// layer's observation sites notified exactly once per microbatch, under their
// global names, on the owning stage only.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/driver/training_step.h"
#include "harness/graphs/graph_scope.h"
#include "harness/model/pipeline_layout.h"
#include "harness/trace/trace_recorder.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

using testing::run_model;

struct PipelineLayout {
  std::string name;
  int tp, dp, pp, vpp, layers, microbatches;
  int first_stage_layers = 0;
  const char* layout = "";
  bool check_collectives = false;
  int cp = 1;
  bool sp = false;
  bool tied = false;  // the output layer shares the word embeddings
  int mtp = 0;        // MTP depths (with rope)
};
std::string layout_name(const ::testing::TestParamInfo<PipelineLayout>& info) {
  return info.param.name;
}
void PrintTo(const PipelineLayout& l, std::ostream* os) { *os << l.name; }
// `l` with tied embeddings and/or MTP depths: the last stage's copy of the word embeddings.
PipelineLayout with_embedding_copy(PipelineLayout l, bool tied, int mtp) {
  l.tied = tied;
  l.mtp = mtp;
  return l;
}

RunConfig pipeline_run(const PipelineLayout& l) {
  RunConfig c = testing::small_config<RunConfig>();
  c.tp = l.tp;
  c.cp = l.cp;
  c.sp = l.sp;
  c.dp = l.dp;
  c.pp = l.pp;
  c.vpp = l.vpp;
  c.layers = l.layers;
  c.microbatches = l.microbatches;
  c.pp_first_layers = l.first_stage_layers;
  c.pp_layout = l.layout;
  c.check_collectives = l.check_collectives;
  c.untie = !l.tied;
  c.mtp_layers = l.mtp;
  if (l.mtp > 0) c.position_embedding = PositionEmbeddingKind::rope;
  c.metrics = {"global-wgrad-l2", "global-param-l2", "layer-param-l2"};
  c.steps = 2;
  c.dtype = ModelDType::fp64;
  c.seed = 7;
  c.lr = 0.5;
  c.timeout = 60;
  c.trace = "(recorded in memory)";
  return c;
}

class PipelineTraining : public ::testing::TestWithParam<PipelineLayout> {};

TEST_P(PipelineTraining, LossesGradientsAndObservationsEqualTheSingleRankRun) {
  const PipelineLayout l = GetParam();
  const RunConfig piped = pipeline_run(l);
  const LaunchResult single = run_model(testing::single_rank_run(piped));
  const LaunchResult ranks = run_model(piped);
  ASSERT_TRUE(single.ok() && ranks.ok());
  const nlohmann::json& s0 = single.results[0];
  ASSERT_EQ(static_cast<int>(ranks.results.size()), l.tp * l.cp * l.dp * l.pp);

  // Which stage builds each layer (pipeline_layout.h, Megatron's arithmetic).
  PipelineLayoutConfig placement;
  placement.num_layers = l.layers;
  placement.pp = l.pp;
  placement.vpp = l.vpp;
  if (l.first_stage_layers > 0) placement.first_stage_layers = l.first_stage_layers;
  placement.layout = l.layout;
  placement.mtp_layers = l.mtp;
  ASSERT_TRUE(validate_pipeline_layout(placement).empty());
  // The word embeddings live on the first stage, and on the last too where
  // the output layer or the MTP depths read them.
  const std::string word = "embedding.word_embeddings.weight";
  const bool copied = l.tied || l.mtp > 0;

  std::map<std::string, int> holders;  // parameter -> ranks holding it (tp 1: one per dp rank)
  for (const nlohmann::json& r : ranks.results) {
    const int rank = r["rank"].get<int>();
    const int stage = r["coordinates"]["pp"].get<int>();
    SCOPED_TRACE("rank " + std::to_string(rank) + " stage " + std::to_string(stage));
    for (std::size_t s = 0; s < s0["steps"].size(); ++s) {
      const double want = s0["steps"][s]["loss"].get<double>();
      EXPECT_NEAR(r["steps"][s]["loss"].get<double>(), want, 1e-10 * std::abs(want)) << s;
      EXPECT_EQ(r["steps"][s]["loss"], ranks.results[0]["steps"][s]["loss"]);  // every rank alike
      // The optimizer's norms (the shared weight counted once) and the MTP
      // losses, every rank the single-rank run's.
      std::map<std::pair<std::string, std::string>, double> want_metrics;
      for (const nlohmann::json& m : s0["steps"][s]["metrics"])
        want_metrics[{m["metric"], m["label"]}] = m["value"].get<double>();
      std::size_t metrics = 0;
      for (const nlohmann::json& m : r["steps"][s]["metrics"]) {
        const auto it = want_metrics.find({m["metric"], m["label"]});
        ASSERT_NE(it, want_metrics.end()) << m.dump();
        EXPECT_NEAR(m["value"].get<double>(), it->second, 1e-10 * std::abs(it->second)) << m.dump();
        ++metrics;
      }
      EXPECT_EQ(metrics, want_metrics.size());
      // The stages' copies of the word embeddings stay equal, step after step
      // (rank tp of stage 0 holds the same shard: tp is the fastest index).
      if (copied && (stage == 0 || stage == l.pp - 1)) {
        const int tp = r["coordinates"]["tp"].get<int>();
        EXPECT_EQ(r["steps"][s]["shared_values"][word],
                  ranks.results[static_cast<std::size_t>(tp)]["steps"][s]["shared_values"][word]);
      } else {
        EXPECT_FALSE(r["steps"][s].contains("shared_values"));
      }
    }
    // Gradients: every parameter of the stage, by its global name, after
    // finalize_grads (tp 1: whole tensors, comparable with the single rank's).
    for (const auto& [name, norm] : r["steps"][1]["grad_norms"].items()) {
      ++holders[name];
      ASSERT_TRUE(s0["steps"][1]["grad_norms"].contains(name)) << name;
      if (l.tp == 1) {
        const double want = s0["steps"][1]["grad_norms"][name].get<double>();
        EXPECT_NEAR(norm.get<double>(), want, 1e-9 * std::abs(want) + 1e-14) << name;
      }
    }
    // Observations: every site of layer i only on the stage that builds it,
    // once per microbatch and step; the logits on the last stage only.
    std::map<std::tuple<std::int64_t, std::int64_t, std::string>, int> seen;
    for (const nlohmann::json& j : r["trace"]) {
      const TraceRecord t = trace_record_from_json(j);
      ++seen[{t.step, t.microbatch, t.site}];
      const std::optional<std::int64_t> layer = layer_index_of_site(t.site);
      if (layer) {
        EXPECT_EQ(chunk_of_layer(placement, static_cast<int>(*layer)).pp_rank, stage) << t.site;
      }
      if (t.site.rfind("output_layer.", 0) == 0) {  // the logits and the MTP logits
        EXPECT_EQ(stage, l.pp - 1) << t.site;
      }
    }
    for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << std::get<2>(key);
    std::set<std::string> sites;
    for (const auto& [key, n] : seen) sites.insert(std::get<2>(key));
    std::size_t expected_sites = stage == l.pp - 1 ? 1 + l.mtp : 0;  // the logits
    for (int layer = 0; layer < l.layers; ++layer)
      if (chunk_of_layer(placement, layer).pp_rank == stage) expected_sites += 6;
    EXPECT_EQ(sites.size(), expected_sites);
    EXPECT_EQ(seen.size(), expected_sites * static_cast<std::size_t>(l.microbatches * 2));
  }
  // Every parameter lives on exactly one stage (and on every tp and dp rank of
  // it), the word embeddings on two where they are copied.
  EXPECT_EQ(holders.size(), s0["steps"][1]["grad_norms"].size());
  for (const auto& [name, n] : holders)
    EXPECT_EQ(n, l.tp * l.cp * l.dp * (copied && name == word ? 2 : 1)) << name;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineTraining,
    ::testing::Values(PipelineLayout{"pp2", 1, 1, 2, 1, 2, 3},
                      PipelineLayout{"pp4_more_microbatches_than_stages", 1, 1, 4, 1, 4, 6},
                      PipelineLayout{"pp4_fewer_microbatches_than_stages", 1, 1, 4, 1, 4, 2},
                      PipelineLayout{"pp2_vpp2_interleaved", 1, 1, 2, 2, 4, 4},
                      PipelineLayout{"pp2_tp2_dp2", 2, 2, 2, 1, 2, 2},
                      PipelineLayout{"pp2_uneven_first_stage", 1, 1, 2, 1, 3, 2, 1},
                      PipelineLayout{"pp2_layout_string", 1, 1, 2, 1, 3, 2, 0, "Et|ttL"},
                      PipelineLayout{"pp2_vpp2_checked_collectives", 1, 2, 2, 2, 4, 2, 0, "", true},
                      with_embedding_copy({"pp2_tied", 1, 1, 2, 1, 2, 3}, true, 0),
                      with_embedding_copy({"pp4_vpp2_tp2_tied_checked_collectives", 2, 1, 4, 2, 8,
                                           4, 0, "", true},
                                          true, 0),
                      with_embedding_copy({"pp2_mtp_untied", 1, 1, 2, 1, 2, 2}, false, 2),
                      with_embedding_copy({"pp4_tied_mtp_layout_string", 1, 2, 4, 1, 4, 4, 0,
                                           "Et|t|t|tmL"},
                                          true, 1)),
    layout_name);

// The matrix: every TP x SP x CP x DP layout of the model-parallel matrix
// (tp 1 or 2, sp where tp > 1, cp 1 or 2, dp 1 or 2) under pp 2, with one
// chunk per stage (1F1B) and with two (interleaved 1F1B), up to 16 thread ranks.
std::vector<PipelineLayout> pipeline_matrix() {
  std::vector<PipelineLayout> out;
  for (int tp : {1, 2})
    for (bool sp : {false, true}) {
      if (sp && tp == 1) continue;
      for (int cp : {1, 2})
        for (int dp : {1, 2})
          for (int vpp : {1, 2}) {
            PipelineLayout l{"tp" + std::to_string(tp) + (sp ? "_sp" : "") + "_cp" +
                                 std::to_string(cp) + "_dp" + std::to_string(dp) + "_pp2" +
                                 (vpp > 1 ? "_vpp2" : ""),
                             tp,
                             dp,
                             2,
                             vpp,
                             2 * vpp,
                             2};
            l.cp = cp;
            l.sp = sp;
            out.push_back(l);
          }
    }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, PipelineTraining, ::testing::ValuesIn(pipeline_matrix()),
                         layout_name);

// Megatron's interleaved schedule needs the microbatches in multiples of the
// stages: refused before any rank starts, naming the field and the rule.
TEST(PipelineConfig, InterleavedScheduleRefusesMicrobatchesThatAreNotAMultipleOfPp) {
  RunConfig c = pipeline_run({"x", 1, 1, 2, 2, 4, 3});
  const std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.front().field, "microbatches");
  EXPECT_NE(format_for_cli(v.front()).find("multiple of pp"), std::string::npos)
      << format_for_cli(v.front());
}

// MTP depths under PP: with rope only (the last stage's learned position
// embeddings would be outside the embedding group), and on the last stage
// (no standalone MTP stage); each refused naming its field.
TEST(PipelineConfig, MtpDepthsNeedRopeAndTheLastStage) {
  RunConfig c = pipeline_run(with_embedding_copy({"x", 1, 1, 2, 1, 2, 2}, false, 1));
  EXPECT_TRUE(validate_run_config(c).empty());
  c.position_embedding = PositionEmbeddingKind::learned;
  std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v.front().field, "position-embedding");
  EXPECT_NE(v.front().rule.find("needs rope"), std::string::npos) << v.front().rule;
  c = pipeline_run(with_embedding_copy({"x", 1, 1, 4, 1, 3, 4, 0, "Et|t|tm|L"}, false, 1));
  v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v.front().field, "pp-layout");
  EXPECT_NE(v.front().rule.find("last stage"), std::string::npos) << v.front().rule;
}

// The evaluation (Megatron's forward_only schedule) and the weight-gradient
// sites (delivered per backward step, for that step's chunk) under pp 2 x vpp
// 2: the eval loss equals the single-rank run's, and every parameter's site is
// notified once per microbatch on the stage that holds it.
TEST(PipelineTraining, EvaluationAndWeightGradientSitesEqualTheSingleRankRun) {
  RunConfig piped = pipeline_run({"pp2_vpp2", 1, 1, 2, 2, 4, 2});
  piped.eval_every = 1;
  piped.observe_wgrad = true;
  RunConfig whole = piped;
  whole.clear_pipeline();
  const LaunchResult single = run_model(whole);
  const LaunchResult ranks = run_model(piped);
  ASSERT_TRUE(single.ok() && ranks.ok());
  const nlohmann::json& s0 = single.results[0];
  std::set<std::string> wgrad_sites;
  for (const nlohmann::json& r : ranks.results) {
    for (std::size_t s = 0; s < s0["steps"].size(); ++s) {
      const double want = s0["steps"][s]["eval_loss"].get<double>();
      EXPECT_NEAR(r["steps"][s]["eval_loss"].get<double>(), want, 1e-10 * std::abs(want)) << s;
    }
    std::map<std::tuple<std::int64_t, std::int64_t, std::string>, int> seen;
    for (const nlohmann::json& j : r["trace"]) {
      const TraceRecord t = trace_record_from_json(j);
      if (t.kind != SourceKind::weight_gradient) continue;
      ++seen[{t.step, t.microbatch, t.site}];
      wgrad_sites.insert(t.site);
      EXPECT_TRUE(r["parameters"].contains(t.site.substr(0, t.site.size() - 6))) << t.site;
    }
    for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << std::get<2>(key);
    EXPECT_EQ(seen.size(), r["parameters"].size() * 2 * 2);  // steps x microbatches
  }
  EXPECT_EQ(wgrad_sites.size(), s0["parameters"].size());
}

// A stage that stops mid-schedule: the run fails within the timeout naming it
// (with its pipeline stage) as the culprit, and its neighbour's last
// point-to-point operation.
TEST(PipelineFailure, AHungStageIsTheCulpritAndItsNeighbourNamesItsLastMessage) {
  RunConfig c = pipeline_run({"x", 1, 1, 2, 1, 2, 2});
  c.timeout = 3;
  c.inject = {"hang-rank=1"};
  register_model_program();
  const LaunchResult r = launch(c, kModelProgram);
  ASSERT_FALSE(r.ok());
  const nlohmann::json f = r.failure->to_json();
  bool culprit = false, neighbour = false;
  for (const nlohmann::json& rank : f["ranks"]) {
    const std::string line = rank["line"].get<std::string>();
    if (rank["rank"] == 1) {
      culprit = !rank["victim"].get<bool>() && line.find("pp=1") != std::string::npos;
    } else {
      neighbour =
          rank["last_collective"].get<std::string>().find("to pp rank 1") != std::string::npos;
    }
  }
  EXPECT_TRUE(culprit) << f.dump(2);
  EXPECT_TRUE(neighbour) << f.dump(2);
}

}  // namespace
}  // namespace parity
