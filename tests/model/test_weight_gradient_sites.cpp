// The weight_gradient sites (--observe-wgrad, harness/model/weight_gradient_sites.h):
// once per parameter per backward with the gradient that backward accumulated,
// also for weights used in several reentrant checkpoints (an MTP layer repeated
// over two depths under full recompute), where the gradient hooks fire once per
// checkpoint; and the field bug pytorch/pytorch #81296 as the fault
// wgrad-hook-per-graph-task, which notifies every firing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gpt_model.h"
#include "harness/model/multi_token_prediction.h"
#include "tests/support/model_configs.h"

PARITY_USES_FAULT(wgrad_hook_per_graph_task);

namespace parity {
namespace {

ModelConfig wgrad_config() {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp64;
  c.seed = 3;
  c.mtp_layers = 2;
  c.mtp_repeated_layer = true;
  c.recompute = RecomputeKind::full_uniform;
  c.recompute_layers = 1;
  c.observe_wgrad = true;
  return c;
}

struct Notification {
  at::Tensor gradient;
  OptionalDim tp_dim;
};

// One microbatch's forward and backward as the driver runs it; every
// weight_gradient notification by site owner.
std::map<std::string, std::vector<Notification>> one_backward(GPTModel& model, bool with_mtp) {
  const ModelConfig& c = model.config();
  const MicrobatchData data = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  const MtpBatch batch = model.mtp_batch(data.tokens, data.labels);
  std::map<std::string, std::vector<Notification>> seen;
  TensorObservationCapture capture(
      [&](const ObservationOwner& owner, std::string_view name, SourceKind kind,
          const at::Tensor& t, OptionalDim tp, OptionalDim seq, OptionalDim batch_dim) {
        EXPECT_EQ(name, "wgrad");
        EXPECT_EQ(kind, SourceKind::weight_gradient);
        EXPECT_FALSE(seq.has_value());
        EXPECT_FALSE(batch_dim.has_value());
        seen[owner.canonical_name()].push_back({t.clone(), tp});
      },
      KindSet{SourceKind::weight_gradient});
  model.begin_step();
  const at::Tensor logits = model.forward(data.tokens, at::arange(c.seq, at::kLong), std::nullopt,
                                          with_mtp ? &batch : nullptr);
  const at::Tensor loss = model.loss(logits, data.labels);
  model.backward_starts();
  loss.backward();
  model.backward_finished();
  return seen;
}

TEST(WeightGradientSites, OncePerParameterWithTheBackwardsGradient) {
  auto backend = make_backend("reference");
  GPTModel model(wgrad_config(), *backend, ParallelContext::single());
  const auto seen = one_backward(model, true);
  EXPECT_EQ(seen.size(), model.parameters().size());
  for (const Parameter& p : model.parameters()) {
    ASSERT_EQ(seen.count(p.name), 1u) << p.name;
    const std::vector<Notification>& n = seen.at(p.name);
    ASSERT_EQ(n.size(), 1u) << p.name;
    ASSERT_TRUE(p.value.grad().defined()) << p.name;
    EXPECT_TRUE(at::allclose(n[0].gradient, p.value.grad(), 0, 1e-15)) << p.name;
    // The TP split of the parameter (a replica has none).
    EXPECT_EQ(n[0].tp_dim, p.shard.replicated() ? std::nullopt : OptionalDim(p.shard.dim))
        << p.name;
  }
  EXPECT_GT(seen.at("mtp.layers.0.eh_proj.weight")[0].gradient.abs().max().item<double>(), 0.0);
}

TEST(WeightGradientSites, AParameterNoGradientReachesIsDeliveredAsZeros) {
  auto backend = make_backend("reference");
  GPTModel model(wgrad_config(), *backend, ParallelContext::single());
  const auto seen = one_backward(model, /*with_mtp=*/false);  // the MTP layer is not run
  const std::vector<Notification>& n = seen.at("mtp.layers.0.eh_proj.weight");
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].gradient.abs().max().item<double>(), 0.0);
  EXPECT_EQ(seen.size(), model.parameters().size());
}

// pytorch/pytorch #81296: the repeated MTP layer runs in two reentrant
// checkpoints, so its weights' hooks fire twice per backward, each time with
// a partial gradient; a weight of one checkpoint (a decoder layer) fires once.
TEST(WeightGradientSites, FaultNotifiesEveryHookFiringAsTheGradient) {
  auto backend = make_backend("reference");
  CodePathFaultScope fault(fault_wgrad_hook_per_graph_task);
  GPTModel model(wgrad_config(), *backend, ParallelContext::single());
  const auto seen = one_backward(model, true);
  const auto grad_of = [&](const std::string& name) {
    for (const Parameter& p : model.parameters())
      if (p.name == name) return p.value.grad();
    return at::Tensor();
  };
  const std::vector<Notification>& shared = seen.at("mtp.layers.0.eh_proj.weight");
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_FALSE(at::allclose(shared[0].gradient, grad_of("mtp.layers.0.eh_proj.weight")));
  EXPECT_TRUE(at::allclose(shared[0].gradient + shared[1].gradient,
                           grad_of("mtp.layers.0.eh_proj.weight"), 1e-12, 1e-14));
  EXPECT_EQ(seen.at("decoder.layers.0.mlp.linear_fc1.weight").size(), 1u);
}

}  // namespace
}  // namespace parity
