// The step driver and the "model" rank program: a sharded run (thread ranks
// over Gloo) gives the single-rank run's per-step losses with SGD between the
// steps (fp64, rel 1e-10), every rank reports the same loss, and the trace has
// exactly one notification per site per microbatch per step per rank, labelled
// with the driver's ExecutionPoint.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/cli/run_output.h"
#include "harness/config/launch_mapping.h"
#include "harness/config/model_mapping.h"
#include "harness/driver/training_step.h"
#include "harness/model/gpt_model.h"
#include "harness/trace/trace_recorder.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

using testing::run_model;

RunConfig small_run(int tp, int cp, int dp, bool sp, int microbatches = 2) {
  RunConfig c = testing::small_config<RunConfig>();
  c.tp = tp;
  c.cp = cp;
  c.dp = dp;
  c.sp = sp;
  c.microbatches = microbatches;
  c.steps = 2;
  c.dtype = ModelDType::fp64;
  c.seed = 99;
  c.lr = 0.5;
  c.timeout = 60;
  c.trace = "(recorded in memory)";  // the program records; only the CLI writes the file
  return c;
}

std::vector<double> losses_of(const nlohmann::json& rank_result) {
  std::vector<double> out;
  for (const auto& s : rank_result["steps"]) out.push_back(s["loss"].get<double>());
  return out;
}

struct Layout {
  int tp, cp, dp;
  bool sp;
};
std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& l = info.param;
  return "tp" + std::to_string(l.tp) + (l.sp ? "sp" : "") + "_cp" + std::to_string(l.cp) + "_dp" +
         std::to_string(l.dp);
}
void PrintTo(const Layout& l, std::ostream* os) { *os << layout_name({l, 0}); }

class TrainingStep : public ::testing::TestWithParam<Layout> {};

TEST_P(TrainingStep, ShardedLossesEqualTheSingleRankRunAndEverySiteIsTracedOnce) {
  const Layout l = GetParam();
  constexpr int kMicrobatches = 2;
  const RunConfig sharded = small_run(l.tp, l.cp, l.dp, l.sp, kMicrobatches);
  // The single rank processes the whole global batch: dp * microbatches microbatches.
  const LaunchResult single = run_model(small_run(1, 1, 1, false, l.dp * kMicrobatches));
  const LaunchResult ranks = run_model(sharded);
  ASSERT_TRUE(single.ok() && ranks.ok());
  const std::vector<double> want = losses_of(single.results[0]);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_NE(want[0], want[1]);

  const int world = l.tp * l.cp * l.dp;
  ASSERT_EQ(static_cast<int>(ranks.results.size()), world);
  const std::vector<double> rank0 = losses_of(ranks.results[0]);
  for (int rank = 0; rank < world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const nlohmann::json& r = ranks.results[rank];
    const std::vector<double> got = losses_of(r);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, rank0);  // identical on every rank, bit for bit
    for (std::size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-10 * std::abs(want[s])) << "step " << s;

    // Exactly one notification per site per microbatch per step, nothing else.
    std::map<std::tuple<std::int64_t, std::int64_t, std::string>, int> seen;
    std::int64_t expected_seq = 0;
    for (const nlohmann::json& j : r["trace"]) {
      const TraceRecord t = trace_record_from_json(j);
      EXPECT_EQ(t.rank, rank);
      EXPECT_EQ(t.seq, expected_seq++);
      EXPECT_EQ(t.phase, GraphPhase::eager);
      EXPECT_TRUE(t.grad_mode);  // forward, under grad
      EXPECT_EQ(t.thread, 0);
      EXPECT_EQ(t.summary.nan + t.summary.inf, 0);
      ++seen[{t.step, t.microbatch, t.site}];
    }
    std::set<std::string> sites = {"output_layer.output_logits"};
    for (int i = 0; i < sharded.layers; ++i) {
      const std::string layer = "decoder.layers." + std::to_string(i);
      sites.insert(layer + ".self_attention.attention_context");
      sites.insert(layer + ".input_layernorm.layernorm_output");
      sites.insert(layer + ".pre_mlp_layernorm.layernorm_output");
      sites.insert(layer + ".mlp.mlp_output");
      sites.insert(layer + ".residual_accumulator");
      sites.insert(layer + ".residual_contribution");
    }
    EXPECT_EQ(seen.size(), sites.size() * kMicrobatches * sharded.steps);
    for (std::int64_t s = 0; s < sharded.steps; ++s)
      for (std::int64_t m = 0; m < kMicrobatches; ++m)
        for (const std::string& site : sites) {
          auto it = seen.find({s, m, site});
          EXPECT_TRUE(it != seen.end() && it->second == 1)
              << "step " << s << " microbatch " << m << " " << site << ": "
              << (it == seen.end() ? 0 : it->second);
        }
    std::int64_t per_step = 0;
    for (const auto& s : r["steps"]) per_step += s["observations"].get<std::int64_t>();
    EXPECT_EQ(per_step, static_cast<std::int64_t>(r["trace"].size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainingStep,
                         ::testing::Values(Layout{2, 1, 1, true}, Layout{1, 2, 1, false},
                                           Layout{1, 1, 2, false}, Layout{2, 2, 2, true}),
                         layout_name);

TEST(TrainingStepDriver, SgdChangesTheWeightsAndLrZeroKeepsThem) {
  at::set_num_threads(1);
  const ModelConfig mc = model_config_from(small_run(1, 1, 1, false));
  auto backend = make_backend("reference");
  auto run_with = [&](double lr, TraceRecorder* recorder) {
    GPTModel model(mc, *backend, ParallelContext::single());
    TrainingOptions o;
    o.steps = 3;
    o.microbatches = 2;
    o.lr = lr;
    o.recorder = recorder;
    std::vector<std::int64_t> after;
    o.after_step = [&](std::int64_t s) { after.push_back(s); };
    TrainingResult r = run_training(model, o);
    EXPECT_EQ(after, (std::vector<std::int64_t>{0, 1, 2}));
    return r;
  };
  const TrainingResult frozen = run_with(0.0, nullptr);
  const TrainingResult trained = run_with(0.5, nullptr);
  ASSERT_EQ(trained.steps.size(), 3u);
  // Step 0 sees the initial weights either way.
  EXPECT_EQ(frozen.steps[0].loss, trained.steps[0].loss);
  EXPECT_EQ(frozen.steps[0].logits_digest, trained.steps[0].logits_digest);
  EXPECT_EQ(frozen.steps[0].grad_digest, trained.steps[0].grad_digest);
  for (std::size_t s = 1; s < 3; ++s) {
    EXPECT_NE(frozen.steps[s].loss, trained.steps[s].loss) << s;
    EXPECT_NE(frozen.steps[s].logits_digest, trained.steps[s].logits_digest) << s;
  }
  // Each step has its own global batch: losses differ even without updates.
  EXPECT_NE(frozen.steps[0].loss, frozen.steps[1].loss);
  EXPECT_EQ(frozen.steps[0].observations, 0);
  EXPECT_EQ(trained.steps[0].grad_digests.size(),
            GPTModel(mc, *backend, ParallelContext::single()).parameters().size());

  // Recording changes nothing that is computed; it counts 4L+1 sites per microbatch.
  TraceRecorder recorder(0);
  const TrainingResult traced = run_with(0.5, &recorder);
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(traced.steps[s].loss, trained.steps[s].loss);
    EXPECT_EQ(traced.steps[s].grad_digest, trained.steps[s].grad_digest);
    EXPECT_EQ(traced.steps[s].observations, (6 * mc.layers + 1) * 2);
  }
  EXPECT_EQ(recorder.size(), 3 * (6 * mc.layers + 1) * 2);
}

// --eval-every: an evaluation after every N-th step that observes nothing,
// changes no training result, and whose loss is the eval batch's mean token
// loss under the weights after that step (lr 0: each evaluation sees the same
// weights and the same-sized batch of its own).
TEST(TrainingStepDriver, EvaluationAfterEveryNthStepIsSilentAndLeavesTrainingAlone) {
  at::set_num_threads(1);
  ModelConfig mc = model_config_from(small_run(1, 1, 1, false));
  mc.dropout = 0.2;  // evaluation runs with training off: no dropout mask drawn
  auto backend = make_backend("reference");
  auto run_with = [&](std::int64_t eval_every, TraceRecorder* recorder) {
    GPTModel model(mc, *backend, ParallelContext::single());
    TrainingOptions o;
    o.steps = 4;
    o.microbatches = 2;
    o.lr = 0.5;
    o.eval_every = eval_every;
    o.recorder = recorder;
    return run_training(model, o);
  };
  TraceRecorder plain_trace(0), eval_trace(0);
  const TrainingResult plain = run_with(0, &plain_trace);
  const TrainingResult evaluated = run_with(2, &eval_trace);
  EXPECT_EQ(plain_trace.size(), eval_trace.size());  // evaluations observe nothing
  for (std::size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_TRUE(std::isnan(plain.steps[s].eval_loss));
    EXPECT_EQ(evaluated.steps[s].loss, plain.steps[s].loss);  // the RNG stream is untouched
    EXPECT_EQ(evaluated.steps[s].grad_digest, plain.steps[s].grad_digest);
    EXPECT_EQ(std::isnan(evaluated.steps[s].eval_loss), s % 2 == 0);  // after steps 1 and 3
  }
  EXPECT_GT(evaluated.steps[1].eval_loss, 0);
  EXPECT_NE(evaluated.steps[1].eval_loss, evaluated.steps[3].eval_loss);  // weights moved
}

// --moe-per-layer-logging (Megatron's MoE tracker): every MoE layer's losses
// and expert load are logged once per microbatch under every recompute kind and
// graph mode: a recomputation records nothing, a replayed graph repeats the
// captured adds, warmups and captures between steps are zeroed. So each step
// logs exactly what the run without recompute and graphs logs.
TEST(TrainingStepDriver, MoeTrackerLogsEachMicrobatchOnceUnderRecomputeAndGraphs) {
  at::set_num_threads(1);
  RunConfig base = small_run(1, 1, 1, false);
  base.moe_experts = 4;
  base.moe_topk = 2;
  base.moe_aux_loss = 0.01;
  base.moe_z_loss = 0.001;
  base.moe_per_layer_logging = true;
  base.padding_fraction = 0.25;
  auto backend = make_backend("reference");
  auto logged = [&](const RunConfig& c) {
    EXPECT_TRUE(validate_run_config(c).empty()) << c.recompute;
    GPTModel model(model_config_from(c), *backend, ParallelContext::single());
    TrainingOptions o;
    o.steps = 4;
    o.microbatches = 2;
    o.lr = 0.0;  // identical weights every step: the variants compute the same values
    std::vector<std::vector<StepMetric>> out;
    for (const StepResult& s : run_training(model, o).steps) out.push_back(s.metrics);
    return out;
  };
  const auto want = logged(base);
  ASSERT_EQ(want.size(), 4u);
  // Per MoE layer (both): two losses and four expert loads, 2 microbatches x 16
  // tokens of which 12 valid, top-2: 48 assignments.
  ASSERT_EQ(want[0].size(), 2u * 6u);
  double load = 0;
  for (const StepMetric& m : want[0])
    if (m.metric == "moe-expert-load" && m.label.rfind("decoder.layers.0/", 0) == 0)
      load += m.value;
  EXPECT_EQ(load, 48.0);
  struct Variant {
    std::string name, recompute;
    GraphMode graphs;
  };
  for (const Variant& v :
       {Variant{"full-uniform", "full-uniform", GraphMode::none},
        Variant{"selective moe", "selective:moe", GraphMode::none},
        Variant{"per-layer graphs", "none", GraphMode::per_layer},
        Variant{"per-layer graphs, selective moe", "selective:moe", GraphMode::per_layer},
        Variant{"full-iteration graphs", "none", GraphMode::full_iteration}}) {
    SCOPED_TRACE(v.name);
    RunConfig c = base;
    c.recompute = v.recompute;
    c.graphs = v.graphs;
    const auto got = logged(c);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t s = 0; s < want.size(); ++s) {
      ASSERT_EQ(got[s].size(), want[s].size()) << "step " << s;
      for (std::size_t i = 0; i < want[s].size(); ++i) {
        EXPECT_EQ(got[s][i].label, want[s][i].label);
        EXPECT_EQ(got[s][i].value, want[s][i].value)
            << "step " << s << " " << want[s][i].metric << " " << want[s][i].label;
      }
    }
  }
}

TEST(TrainingStepDriver, TheTraceIsDeterministic) {
  const RunConfig c = small_run(2, 1, 2, true);
  const std::string a = trace_jsonl(run_model(c));
  const std::string b = trace_jsonl(run_model(c));
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace parity
