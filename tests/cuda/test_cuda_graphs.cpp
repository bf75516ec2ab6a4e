// Real CUDA graphs (cuda/cuda_graph_runner.h) against eager on the same GPU:
// several training steps with SGD updates in between and dropout on, so the
// graphs are replayed more than once with new weights and new Philox offsets.
// Per-layer graphs (record, warmup, capture, replay) and full-iteration graphs
// (eager, capture, replay) must reproduce eager's losses, logits and gradients
// bit for bit, under every recompute kind.
#include <ATen/ATen.h>

#include "harness/backend/registry.h"
#include "harness/driver/training_step.h"
#include "harness/model/gpt_model.h"
#include "tests/cuda/gpu_test.h"
#include "tests/support/model_configs.h"

namespace parity::gpu {
namespace {

ModelConfig graph_config(GraphMode mode, RecomputeKind recompute) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp32;
  c.dropout = 0.1;
  c.seed = 21;
  c.init_std = 0.2;
  c.graphs = mode;
  c.graph_warmup = 1;
  c.recompute = recompute;
  if (recompute == RecomputeKind::selective) c.recompute_modules = parse_recompute_modules("mlp");
  return c;
}

TrainingResult train(const ModelConfig& c) {
  auto backend = make_backend("cuda");
  GPTModel model(c, *backend, ParallelContext::single());
  TrainingOptions o;
  o.steps = 4;
  o.microbatches = 2;
  return run_training(model, o);
}

class CudaGraphs : public ::testing::TestWithParam<std::tuple<GraphMode, RecomputeKind>> {};

TEST_P(CudaGraphs, ReplaysReproduceEagerBitForBit) {
  PARITY_REQUIRE_GPU();
  // Bitwise comparisons need run-to-run deterministic kernels.
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const auto [mode, recompute] = GetParam();
  const TrainingResult eager = train(graph_config(GraphMode::none, recompute));
  const TrainingResult graphed = train(graph_config(mode, recompute));
  ASSERT_EQ(eager.steps.size(), graphed.steps.size());
  for (size_t s = 0; s < eager.steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(graphed.steps[s].loss, eager.steps[s].loss);
    EXPECT_EQ(graphed.steps[s].logits_digest, eager.steps[s].logits_digest);
    EXPECT_EQ(graphed.steps[s].grad_digests, eager.steps[s].grad_digests);
  }
  // The model learnt something: the steps differ (a replay of stale inputs would not).
  EXPECT_NE(eager.steps.front().logits_digest, eager.steps.back().logits_digest);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CudaGraphs,
    ::testing::Combine(::testing::Values(GraphMode::per_layer, GraphMode::full_iteration),
                       ::testing::Values(RecomputeKind::none, RecomputeKind::full_uniform,
                                         RecomputeKind::selective)),
    [](const auto& info) {
      std::string name = std::string(to_string(std::get<0>(info.param))) + "_" +
                         std::string(to_string(std::get<1>(info.param)));
      for (char& ch : name)
        if (ch == '-') ch = '_';  // gtest names: letters, digits, underscores
      return name;
    });

}  // namespace
}  // namespace parity::gpu
