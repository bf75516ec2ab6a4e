// The property evaluators that combine the ranks of a sharded run, on hand-built runs:
// sharded_reduction, replica_consistency and sharded_gradients.
#include <gtest/gtest.h>

#include <functional>

#include "harness/checks/properties.h"
#include "tests/checks/hand_built_runs.h"

namespace parity::checks {
namespace {

using testing::eager_run;

TEST(Properties, ShardedReductionComparesEveryMetric) {
  CheckRun b = eager_run("b"), a = eager_run("a");
  a.config.metrics = {"layer-residual-accumulator-l2"};
  std::vector<MetricComparison> rows;
  EXPECT_EQ(check_sharded_reduction(b, {&a}, &rows).status, Status::pass);
  EXPECT_EQ(rows.size(), 2u);
  a.ranks[0].steps[1].metrics[{"layer-residual-accumulator-l2", "global"}] = 4.1;
  const PropertyResult p = check_sharded_reduction(b, {&a}, nullptr);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_EQ(p.worst_site, "layer-residual-accumulator-l2");
  EXPECT_EQ(p.worst_label, "global");
  EXPECT_NEAR(*p.max_abs, 0.1, 1e-12);
  a.config.metrics.clear();
  EXPECT_EQ(check_sharded_reduction(b, {&a}, nullptr).status, Status::skip);
}

// replica_consistency on a hand-built tp 2 x dp 2 run: a TP shard's copies are
// the ranks with the same TP rank, a TP replica's copies are every rank.
// A hand-built tp 2 x dp 2 run (a), one step, holding a TP-replicated
// "norm.weight" and a TP-sharded "fc1.weight"; `step(rank)` fills each rank's step.
CheckRun tp2_dp2_run(const std::function<StepData(int rank)>& step) {
  CheckRun run;
  run.name = "a";
  run.config.dtype = ModelDType::fp64;
  run.config.tp = 2;
  run.config.dp = 2;
  for (int rank = 0; rank < 4; ++rank) {
    RankRun r;
    r.rank = rank;
    r.parameter_tp = {{"norm.weight", "replica"}, {"fc1.weight", "shard"}};
    r.steps.push_back(step(rank));
    run.ranks.push_back(r);
  }
  return run;
}

TEST(Properties, ReplicaConsistencyComparesEachPiecesCopies) {
  CheckRun run = tp2_dp2_run([](int rank) {
    StepData s;
    s.grads = {{"norm.weight", "n"}, {"fc1.weight", "w" + std::to_string(rank % 2)}};
    return s;
  });
  PropertyResult p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("3 replicated (step, parameter, piece) groups, 8 gradient copies"),
            std::string::npos)
      << p.reason;
  // A replica whose gradient was not reduced (rank 3 = tp 1, dp 1).
  run.ranks[3].steps[0].grads["norm.weight"] = "partial";
  p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 gradient norm.weight: rank 3 (tp=1, cp=0, dp=1) differs from its "
                          "replica on rank 0 (tp=0, cp=0, dp=0)"),
            std::string::npos)
      << p.reason;
  EXPECT_EQ(p.worst_site, "norm.weight");
  // One rank: nothing to compare.
  const CheckRun single = eager_run("b");
  p = check_replica_consistency({&single});
  EXPECT_EQ(p.status, Status::skip) << p.reason;
}

// pp 2 with tied embeddings: the first and the last stage each hold the word
// embeddings, whose values after every step must be equal (the gradients
// alone cannot show a copy that started apart: the embedding group sums them).
TEST(Properties, ReplicaConsistencyComparesThePipelineStagesEmbeddingCopies) {
  CheckRun run;
  run.name = "a";
  run.config.pp = 2;
  for (int rank = 0; rank < 2; ++rank) {
    RankRun r;
    r.rank = rank;
    r.stage = rank;
    r.parameter_tp = {{"embedding.word_embeddings.weight", "shard"}};
    StepData s;
    s.grads = {{"embedding.word_embeddings.weight", "g"}};
    s.shared_values = {{"embedding.word_embeddings.weight", "v"}};
    r.steps.push_back(s);
    run.ranks.push_back(r);
  }
  PropertyResult p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 values of the stages' word-embedding copies bitwise equal"),
            std::string::npos)
      << p.reason;
  run.ranks[1].steps[0].shared_values["embedding.word_embeddings.weight"] = "apart";
  p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 value embedding.word_embeddings.weight: rank 1 (tp=0, cp=0, "
                          "dp=0, pp=1) differs from its replica on rank 0"),
            std::string::npos)
      << p.reason;
}

// sharded_gradients combines a TP-sharded parameter's pieces (one copy per TP
// rank) and takes a replica once, then compares with the single-rank norms.
TEST(Properties, ShardedGradientsCombinePiecesAndCompareWithTheSingleRankRun) {
  CheckRun single;
  single.name = "b";
  single.config.dtype = ModelDType::fp64;
  RankRun one;
  StepData want;
  want.loss = 2.5;
  want.grad_norms = {{"norm.weight", 0.5}, {"fc1.weight", 5.0}};
  one.steps.push_back(want);
  single.ranks.push_back(one);
  CheckRun run = tp2_dp2_run([](int rank) {
    StepData s;
    s.loss = 2.5;
    s.grad_norms = {{"norm.weight", 0.5}, {"fc1.weight", rank % 2 == 0 ? 3.0 : 4.0}};  // 3-4-5
    return s;
  });
  PropertyResult p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("3 losses and gradient norms"), std::string::npos) << p.reason;
  // Every gradient and the loss twice as large (a loss scaled by cp = 2).
  for (RankRun& r : run.ranks) {
    r.steps[0].loss *= 2;
    for (auto& [name, n] : r.steps[0].grad_norms) n *= 2;
  }
  p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("(a) step 0 loss: 5 vs single-rank 2.5"), std::string::npos) << p.reason;
  EXPECT_EQ(p.worst_site, "loss");
  EXPECT_EQ(p.worst_label, "global");
  // Only one layer's gradient off: the report names the parameter and its layer.
  for (RankRun& r : run.ranks) {
    r.steps[0].loss /= 2;
    for (auto& [name, n] : r.steps[0].grad_norms) n /= 2;
    r.steps[0].grad_norms["decoder.layers.1.mlp.linear_fc1.weight"] = 1.0;
    r.parameter_tp["decoder.layers.1.mlp.linear_fc1.weight"] = "replica";
  }
  single.ranks[0].steps[0].grad_norms["decoder.layers.1.mlp.linear_fc1.weight"] = 2.0;
  p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_EQ(p.worst_site, "decoder.layers.1.mlp.linear_fc1.weight");
  EXPECT_EQ(p.worst_label, "decoder.layers.1");
  // No sharded run: SKIP.
  p = check_sharded_gradients(single, {&single});
  EXPECT_EQ(p.status, Status::skip) << p.reason;
}

}  // namespace
}  // namespace parity::checks
