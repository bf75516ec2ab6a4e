// The optimizer's norms (harness/model/parameter_norms.h) and the distributed
// optimizer's flat split (harness/model/flat_shard_layout.h): sharded runs
// report the single-rank run's norms whatever holds the parameters (TP shards,
// TP replicas with and without SP, EP-owned experts, FlatShard ranges), the
// flat ranges partition every parameter, and the split update is the plain one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/config/launch_mapping.h"
#include "harness/config/model_mapping.h"
#include "harness/driver/training_step.h"
#include "harness/model/flat_shard_layout.h"
#include "harness/model/gpt_model.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

RunConfig norms_run(int tp, int cp, int dp, int ep) {
  RunConfig c = testing::small_config<RunConfig>();
  c.tp = tp;
  c.cp = cp;
  c.dp = dp;
  c.sp = tp > 1;
  c.ep = ep;
  c.moe_experts = 4;
  c.moe_layers = "every:2";  // layer 0 MoE, layer 1 dense
  c.steps = 2;
  c.microbatches = 4 / dp;  // the same global batch in every layout
  c.dtype = ModelDType::fp64;
  c.lr = 0.5;
  c.timeout = 60;
  c.metrics = {"global-wgrad-l2", "global-param-l2", "layer-param-l2"};
  return c;
}

// (step, label of metric) -> value, from rank `rank`'s result.
std::map<std::string, double> norms_of(const RunConfig& c, int rank = 0) {
  const std::vector<ConfigViolation> v = validate_run_config(c);
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v.front().field + ": " + v.front().rule);
  register_model_program();
  const LaunchResult r = launch(c, kModelProgram);
  if (!r.ok()) {
    ADD_FAILURE() << r.failure->lines().front();
    return {};
  }
  return testing::step_metrics(r.results.at(rank));
}

void expect_same_norms(const std::map<std::string, double>& got,
                       const std::map<std::string, double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, value] : want) {
    ASSERT_TRUE(got.count(key)) << key;
    EXPECT_NEAR(got.at(key), value, 1e-10 * value) << key;
  }
}

TEST(ParameterNorms, ShardedRunsReportTheSingleRankNorms) {
  const std::map<std::string, double> single = norms_of(norms_run(1, 1, 1, 1));
  // Two steps: wgrad and param global, layer-param per layer and global.
  ASSERT_EQ(single.size(), 2u * (2 + 3));
  struct Layout {
    int tp, cp, dp, ep;
    bool distributed;
  };
  for (const Layout& l :
       {Layout{2, 1, 2, 1, false}, Layout{2, 1, 2, 2, false}, Layout{1, 2, 2, 2, true},
        Layout{2, 1, 2, 2, true}, Layout{1, 1, 4, 1, true}}) {
    SCOPED_TRACE("tp " + std::to_string(l.tp) + " cp " + std::to_string(l.cp) + " dp " +
                 std::to_string(l.dp) + " ep " + std::to_string(l.ep) +
                 (l.distributed ? " distributed optimizer" : ""));
    RunConfig c = norms_run(l.tp, l.cp, l.dp, l.ep);
    c.distributed_optimizer = l.distributed;
    expect_same_norms(norms_of(c), single);
    expect_same_norms(norms_of(c, c.world_size() - 1), single);
  }
}

// Fault replica-marked-tp-sharded (ROCm/TransformerEngine PR 715): every TP
// rank counts the replicated parameters, so the gradient norm grows.
TEST(ParameterNorms, AReplicaMarkedTpShardedIsCountedTpTimes) {
  const RunConfig c = norms_run(2, 1, 1, 1);
  const std::map<std::string, double> right = norms_of(c);
  RunConfig faulty = c;
  faulty.inject = {"replica-marked-tp-sharded"};
  const std::map<std::string, double> wrong = norms_of(faulty);
  EXPECT_GT(wrong.at("0 global-wgrad-l2 global"),
            right.at("0 global-wgrad-l2 global") * (1 + 1e-6));
  EXPECT_GT(wrong.at("0 global-param-l2 global"),
            right.at("0 global-param-l2 global") * (1 + 1e-6));
}

TEST(FlatShardLayout, RangesPartitionEveryDenseParameterAndExpertsStayWhole) {
  ModelConfig mc = model_config_from(norms_run(1, 1, 1, 1));
  auto backend = make_backend("reference");
  GPTModel model(mc, *backend, ParallelContext::single());
  const std::vector<Parameter>& params = model.parameters();
  for (int dp : {1, 3, 4}) {
    std::vector<FlatShardLayout> ranks;
    for (int d = 0; d < dp; ++d) ranks.emplace_back(params, d, dp);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::int64_t n = params[i].value.numel();
      if (params[i].expert >= 0) {
        for (const FlatShardLayout& r : ranks) EXPECT_EQ(r.owned(i).size(), n);
        continue;
      }
      std::int64_t next = 0;  // ranks own consecutive pieces, in rank order
      for (const FlatShardLayout& r : ranks) {
        const FlatShardLayout::Range o = r.owned(i);
        if (o.size() == 0) continue;
        EXPECT_EQ(o.begin, next) << params[i].name << " dp " << dp;
        next = o.end;
      }
      EXPECT_EQ(next, n) << params[i].name << " dp " << dp;
    }
  }
}

TEST(FlatShardLayout, TheSplitUpdateOnOneRankIsThePlainUpdate) {
  ModelConfig mc = model_config_from(norms_run(1, 1, 1, 1));
  auto backend = make_backend("reference");
  GPTModel plain(mc, *backend, ParallelContext::single());
  GPTModel split(mc, *backend, ParallelContext::single());
  for (GPTModel* m : {&plain, &split})
    for (Parameter& p : m->parameters())
      p.value.mutable_grad() = at::ones_like(p.value) * 0.25 + p.value.detach();
  {
    at::NoGradGuard no_grad;
    for (Parameter& p : plain.parameters()) p.value.sub_(p.value.grad(), 0.5);
  }
  FlatShardLayout(split.parameters(), 0, 1).sgd_step(split.parameters(), 0.5, nullptr);
  for (std::size_t i = 0; i < plain.parameters().size(); ++i)
    EXPECT_TRUE(at::equal(plain.parameters()[i].value, split.parameters()[i].value))
        << plain.parameters()[i].name;
}

}  // namespace
}  // namespace parity
