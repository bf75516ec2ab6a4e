// Fault collective-skipped-when-zero: a reduction skipped on a rank whose
// contribution is all zeros, in the optimizer's norms (the EP sum) and in the
// MoE tracker (its tp, cp and dp sums). The guard fires on the idle rank only:
// with fingerprints on (--check-collectives) the run stops with a mismatch
// naming the idle rank (which issued something else: its next call, or its
// exit barrier) and its peer (which issued the reduction); where no rank is
// idle, the faulty run is the correct run. A pipeline stage without MoE layers
// is idle for the tracker's pipeline sum.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/driver/training_step.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

using testing::model_run_failure;
using testing::step_metrics;

constexpr const char* kFault = "collective-skipped-when-zero";

RunConfig moe_run() {
  RunConfig c = testing::small_config<RunConfig>();
  c.layers = 1;
  c.micro_batch = 1;
  c.moe_experts = 2;
  c.moe_topk = 1;
  c.steps = 1;
  c.dtype = ModelDType::fp64;
  c.timeout = 60;
  c.check_collectives = true;
  return c;
}

// (step metric label) -> value of the last rank; fails the test on a failed run.
std::map<std::string, double> metrics_of(const RunConfig& c) {
  register_model_program();
  const LaunchResult r = launch(c, kModelProgram);
  if (!r.ok()) {
    ADD_FAILURE() << r.failure->text();
    return {};
  }
  return step_metrics(r.results.back());
}

// The same values with the fault injected as without it.
void expect_unchanged_by_the_fault(RunConfig c) {
  c.inject.clear();
  const std::map<std::string, double> right = metrics_of(c);
  c.inject = {kFault};
  EXPECT_EQ(metrics_of(c), right);
  EXPECT_FALSE(right.empty());
}

// Biased routing sends every token to expert 0, on EP rank 0: EP rank 1's
// expert gradients are all zeros, and it skips the norm's EP sum. Rank 0
// issued the sum; rank 1 ended its program and met it with its exit barrier.
TEST(CollectiveSkippedWhenZero, TheNormsEpSumIsSkippedOnlyByTheEpRankNoTokenReaches) {
  RunConfig c = moe_run();
  c.dp = 2;
  c.ep = 2;
  c.metrics = {"global-wgrad-l2"};
  c.moe_force_routing = ForcedRouting::biased;
  c.inject = {kFault};
  const std::string text = model_run_failure(c);
  EXPECT_NE(text.find("collective mismatch on ep group [0, 1]: rank 0 called all_reduce(sum) on "
                      "ep, float64 [2], #"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("but rank 1 called barrier on ep"), std::string::npos) << text;
  // Top-2 of 2 experts: both EP ranks receive every token, none skips.
  c.moe_force_routing = ForcedRouting::none;
  c.moe_topk = 2;
  expect_unchanged_by_the_fault(c);
}

// Padding 0.75 of a sequence of 8 under cp 2 leaves positions 0-1 valid, all
// on CP rank 0 (chunks 0 and 3): CP rank 1's tracker entries are all zeros and
// it skips the tracker's CP sum; its next CP call (the loss's sum) meets it.
TEST(CollectiveSkippedWhenZero, TheTrackersCpSumIsSkippedOnlyByTheCpRankWhoseTokensAreAllPadding) {
  RunConfig c = moe_run();
  c.cp = 2;
  c.padding_fraction = 0.75;
  c.moe_per_layer_logging = true;
  c.moe_z_loss = 0.001;
  c.metrics = {"layer-residual-contribution-l2"};
  c.inject = {kFault};
  const std::string text = model_run_failure(c);
  // The tracker's vector: [aux loss, z-loss, load of 2 experts].
  EXPECT_NE(text.find("collective mismatch on cp group [0, 1]: rank 0 called all_reduce(sum) on "
                      "cp, float64 [4], #"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("but rank 1 called all_reduce(sum) on cp, float64 [1], #"), std::string::npos)
      << text;
  c.padding_fraction = 0.25;  // positions 0-5 valid: both CP ranks hold some
  expect_unchanged_by_the_fault(c);
}

// Under sequence parallelism the TP ranks split the sequence too: padding 0.5
// leaves TP rank 1 (positions 4-7) only padding, and it skips the TP sum.
TEST(CollectiveSkippedWhenZero, TheTrackersTpSumIsSkippedOnlyByTheSequenceParallelRankOfPadding) {
  RunConfig c = moe_run();
  c.tp = 2;
  c.sp = true;
  c.padding_fraction = 0.5;
  c.moe_per_layer_logging = true;
  c.metrics = {"layer-residual-contribution-l2"};
  c.inject = {kFault};
  const std::string text = model_run_failure(c);
  EXPECT_NE(text.find("collective mismatch on tp group [0, 1]: rank 0 called all_reduce(sum) on "
                      "tp, float64 [4], #"),
            std::string::npos)
      << text;
  c.padding_fraction = 0.25;
  expect_unchanged_by_the_fault(c);
}

// A pipeline stage without MoE layers holds only zeros in the tracker's
// vector: stage 0 (layer 0 dense) skips the pipeline sum that stage 1 (layer
// 1, MoE) waits in; stage 0's next pipeline call, the loss's sum, meets it.
TEST(CollectiveSkippedWhenZero, TheTrackersPipelineSumIsSkippedOnlyByTheStageWithoutMoeLayers) {
  RunConfig c = moe_run();
  c.layers = 2;
  c.pp = 2;
  c.microbatches = 2;
  c.moe_layers = "1";
  c.moe_per_layer_logging = true;
  c.inject = {kFault};
  const std::string text = model_run_failure(c);
  // The tracker's vector: 2 layers x [aux loss, z-loss, load of 2 experts].
  EXPECT_NE(text.find("collective mismatch on pp group [0, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 called all_reduce(sum) on pp, float64 [8], #"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 0 called all_reduce(sum) on pp, float64 [1], #"), std::string::npos)
      << text;
  c.moe_layers = "all";  // both stages hold an MoE layer: none skips
  expect_unchanged_by_the_fault(c);
}

}  // namespace
}  // namespace parity
