// The word embeddings on two pipeline stages (tied embeddings, or MTP depths on
// the last stage): the last stage builds a copy with the first stage's values,
// finalize_grads sums the two gradients over the embedding group (the first and
// the last stage; the stages between take no part), and the optimizer's norms
// count the weight once. MTP layers are numbered after the decoder's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gpt_model.h"
#include "harness/model/parameter_norms.h"
#include "tests/support/model_configs.h"
#include "tests/support/rank_threads.h"

PARITY_USES_FAULT(tied_embedding_norm_twice);
PARITY_USES_FAULT(mtp_layer_number_collision);

namespace parity {
namespace {

const char* const kWord = "embedding.word_embeddings.weight";

// One decoder layer per stage.
ModelConfig pipelined_config(int pp, bool tied, int mtp) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.layers = pp;
  c.pipeline.pp = pp;
  c.untie_embeddings = !tied;
  c.mtp_layers = mtp;
  if (mtp > 0) c.position_embedding = PositionEmbeddingKind::rope;
  c.dtype = ModelDType::fp64;
  return c;
}

struct StageView {
  int stage = -1;
  bool holds_word = false, shared_embedding = false, shared = false;
  bool equals_single_rank = false;  // the word embeddings' values
  double grad_min = NAN, grad_max = NAN;
  double norm = 0, norm_counting_copy = 0;
  std::vector<std::pair<std::string, std::int64_t>> mtp_layers;  // parameter -> Parameter::layer
  std::vector<std::pair<std::string, double>> per_layer;
};

// Every gradient zero but the word embeddings': 1 everywhere on the first
// stage, 2 on the last; then finalize_grads and the gradient norms.
StageView run_stage(const ModelConfig& config, ParallelContext par) {
  auto backend = make_backend("reference");
  GPTModel model(config, *backend, par);
  ModelConfig whole = config;
  whole.pipeline = PipelineLayoutConfig{};
  GPTModel single(whole, *backend, ParallelContext::single());
  StageView v;
  v.stage = par.pp_rank();
  for (Parameter& p : model.parameters()) {
    p.value.mutable_grad() = at::zeros_like(p.value);
    if (p.name.rfind("mtp.layers.", 0) == 0) v.mtp_layers.emplace_back(p.name, p.layer);
    if (p.name != kWord) continue;
    v.holds_word = true;
    v.shared_embedding = p.shared_embedding;
    v.shared = p.shared;
    for (const Parameter& q : single.parameters())
      if (q.name == kWord) v.equals_single_rank = at::equal(p.value, q.value);
    p.value.mutable_grad().fill_(v.stage == 0 ? 1.0 : 2.0);
  }
  model.finalize_grads();
  for (const Parameter& p : model.parameters())
    if (p.name == kWord) {
      v.grad_min = p.value.grad().min().item<double>();
      v.grad_max = p.value.grad().max().item<double>();
    }
  const ParameterNorms norms = parameter_norms(model, NormOf::gradients, nullptr);
  v.norm = norms.global;
  v.per_layer = norms.per_layer;
  CodePathFaultScope twice(fault_tied_embedding_norm_twice);
  v.norm_counting_copy = parameter_norms(model, NormOf::gradients, nullptr).global;
  return v;
}

TEST(PipelineEmbeddingCopy, TiedEmbeddingsAreCopiedSummedOverTheEmbeddingGroupAndCountedOnce) {
  const ModelConfig config = pipelined_config(3, /*tied=*/true, 0);
  const auto r = testing::run_model_ranks(
      ParallelTopology(1, 1, 1, 1, 3), [&](ParallelContext par) { return run_stage(config, par); });
  ASSERT_EQ(r.report(), "");
  const StageView &first = r.results[0], &middle = r.results[1], &last = r.results[2];
  EXPECT_FALSE(middle.holds_word);
  for (const StageView* s : {&first, &last}) {
    SCOPED_TRACE("stage " + std::to_string(s->stage));
    ASSERT_TRUE(s->holds_word);
    EXPECT_TRUE(s->shared_embedding);
    EXPECT_TRUE(s->equals_single_rank);
    // 1 from the first stage + 2 from the last, on both.
    EXPECT_EQ(s->grad_min, 3.0);
    EXPECT_EQ(s->grad_max, 3.0);
  }
  EXPECT_FALSE(first.shared);
  EXPECT_TRUE(last.shared);
  // The only non-zero gradient, counted once (sqrt 2 times with the copy).
  const double once = 3.0 * std::sqrt(double(config.vocab * config.hidden));
  for (const StageView& s : r.results) {
    EXPECT_NEAR(s.norm, once, 1e-12 * once) << s.stage;
    EXPECT_NEAR(s.norm_counting_copy, std::sqrt(2.0) * once, 1e-12 * once) << s.stage;
  }
}

TEST(PipelineEmbeddingCopy, MtpDepthsOnTheLastStageReadACopyAndAreNumberedAfterTheDecoder) {
  const ModelConfig config = pipelined_config(2, /*tied=*/false, 2);
  const auto run = [&](bool collide) {
    return testing::run_model_ranks(ParallelTopology(1, 1, 1, 1, 2), [&](ParallelContext par) {
      std::optional<CodePathFaultScope> fault;
      if (collide) fault.emplace(fault_mtp_layer_number_collision);
      return run_stage(config, par);
    });
  };
  const auto r = run(false);
  ASSERT_EQ(r.report(), "");
  const StageView &first = r.results[0], &last = r.results[1];
  ASSERT_TRUE(first.holds_word && last.holds_word);  // untied: the MTP depths need the copy
  EXPECT_TRUE(last.shared && last.equals_single_rank);
  EXPECT_EQ(first.grad_min, 3.0);
  EXPECT_EQ(last.grad_max, 3.0);
  EXPECT_TRUE(first.mtp_layers.empty());
  ASSERT_FALSE(last.mtp_layers.empty());
  // Depth k's layer is decoder layers + k; its norm is filed as mtp.layers.<k>.
  for (const auto& [name, layer] : last.mtp_layers)
    EXPECT_EQ(layer, config.layers + (name.rfind("mtp.layers.1.", 0) == 0 ? 1 : 0)) << name;
  std::vector<std::string> labels;
  for (const auto& [label, norm] : first.per_layer) labels.push_back(label);
  EXPECT_EQ(labels, (std::vector<std::string>{"decoder.layers.0", "decoder.layers.1",
                                              "mtp.layers.0", "mtp.layers.1"}));
  // Fault mtp-layer-number-collision: the last stage's chunk starts at layer
  // 1, so depth k takes decoder layer 1 + k's number.
  const auto collided = run(true);
  ASSERT_EQ(collided.report(), "");
  for (const auto& [name, layer] : collided.results[1].mtp_layers)
    EXPECT_EQ(layer, 1 + (name.rfind("mtp.layers.1.", 0) == 0 ? 1 : 0)) << name;
}

}  // namespace
}  // namespace parity
