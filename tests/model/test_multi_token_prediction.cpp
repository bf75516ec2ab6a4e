// Multi-token prediction at one rank (docs/model.md "Multi-token prediction"):
// the shifted inputs, the decoder's logits untouched, and the attached MTP
// loss's gradient against finite differences of the loss written out here
// (Megatron's process_mtp_loss: per depth the mean over the valid positions of
// the cross entropy of the token k+1 ahead, times mtp_loss_scale / depths),
// with and without a repeated layer and full recompute.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "harness/backend/registry.h"
#include "harness/model/gpt_model.h"
#include "harness/model/multi_token_prediction.h"
#include "tests/backend/gradcheck.h"

namespace parity {
namespace {

ModelConfig mtp_config(std::int64_t depths, bool repeated, RecomputeKind recompute) {
  ModelConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.ffn_hidden = 8;
  c.layers = 2;
  c.seq = 6;
  c.micro_batch = 2;
  c.vocab = 12;
  c.dtype = ModelDType::fp64;
  c.seed = 5;
  c.init_std = 0.4;
  c.mtp_layers = depths;
  c.mtp_repeated_layer = repeated;
  c.recompute = recompute;
  c.recompute_layers = 1;
  return c;
}

at::Tensor parameter(GPTModel& model, const std::string& name) {
  for (const Parameter& p : model.parameters())
    if (p.name == name) return p.value;
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// The depth-k loss from its observed logits: mean cross entropy of labels[i+k]
// over the positions i < seq - k.
double depth_loss(const at::Tensor& logits, const at::Tensor& labels, std::int64_t k) {
  const std::int64_t seq = labels.size(0);
  const at::Tensor lp = at::log_softmax(logits.narrow(0, 0, seq - k), -1);
  const at::Tensor target = labels.narrow(0, k, seq - k).unsqueeze(-1);
  return -lp.gather(-1, target).mean().item<double>();
}

// The first violated field of `c` at one rank ("" when valid).
std::string violated_field(const ModelConfig& c) {
  const std::vector<ModelConfigViolation> v = c.violations(1, 1, 1);
  return v.empty() ? "" : v.front().field;
}

TEST(MultiTokenPrediction, ConfigRules) {
  ModelConfig c = mtp_config(2, true, RecomputeKind::none);
  EXPECT_EQ(violated_field(c), "");
  c.mtp_layers = c.seq;  // depth seq would predict past the sequence
  EXPECT_EQ(violated_field(c), "mtp_layers");
  c = mtp_config(0, true, RecomputeKind::none);  // nothing to repeat
  EXPECT_EQ(violated_field(c), "mtp_repeated_layer");
  c = mtp_config(1, false, RecomputeKind::none);
  c.graphs = GraphMode::full_iteration;  // parity runs MTP eagerly
  EXPECT_EQ(violated_field(c), "mtp_layers");
  c = mtp_config(0, false, RecomputeKind::none);
  c.observe_wgrad = true;
  EXPECT_EQ(violated_field(c), "");
  c.graphs = GraphMode::per_layer;  // a replay runs no hook
  EXPECT_EQ(violated_field(c), "observe_wgrad");
}

TEST(MultiTokenPrediction, BatchShiftsTheWholeSequenceAndMasksTheTail) {
  auto backend = make_backend("reference");
  const ModelConfig c = mtp_config(2, false, RecomputeKind::none);
  GPTModel model(c, *backend, ParallelContext::single());
  const at::Tensor tokens = at::arange(12, at::kLong).view({6, 2}) + 1;
  const at::Tensor labels = tokens + 100;
  const MtpBatch b = model.mtp_batch(tokens, labels);
  ASSERT_EQ(b.tokens.size(), 2u);
  for (std::int64_t k = 1; k <= 2; ++k) {
    const std::size_t d = static_cast<std::size_t>(k - 1);
    for (std::int64_t i = 0; i < 6; ++i) {
      const bool valid = i + k < 6;
      EXPECT_EQ(b.tokens[d][i][1].item<std::int64_t>(),
                valid ? tokens[i + k][1].item<std::int64_t>() : 0);
      EXPECT_EQ(b.labels[d][i][0].item<std::int64_t>(),
                valid ? labels[i + k][0].item<std::int64_t>() : 0);
      EXPECT_EQ(b.positions[d][i].item<std::int64_t>(), valid ? i + k : 0);
      EXPECT_EQ(b.loss_masks[d][i][0].item<double>(), valid ? 1.0 : 0.0);
    }
    EXPECT_EQ(b.valid_tokens[d], double((6 - k) * 2));
  }
}

TEST(MultiTokenPrediction, RepeatedLayerSharesOneSetOfWeights) {
  auto backend = make_backend("reference");
  std::map<bool, std::size_t> mtp_parameters;
  for (bool repeated : {false, true}) {
    GPTModel model(mtp_config(3, repeated, RecomputeKind::none), *backend,
                   ParallelContext::single());
    for (const Parameter& p : model.parameters())
      if (p.name.rfind("mtp.layers.", 0) == 0) ++mtp_parameters[repeated];
    EXPECT_TRUE(parameter(model, "mtp.layers.0.eh_proj.weight").defined());
  }
  EXPECT_EQ(mtp_parameters[false], 3 * mtp_parameters[true]);
}

struct Variant {
  std::int64_t depths;
  bool repeated;
  RecomputeKind recompute;
};

class MtpLossGradient : public ::testing::TestWithParam<Variant> {};

TEST_P(MtpLossGradient, IsTheGradientOfTheWrittenOutLossAndLeavesTheLogitsAlone) {
  auto backend = make_backend("reference");
  const Variant v = GetParam();
  const ModelConfig c = mtp_config(v.depths, v.repeated, v.recompute);
  GPTModel model(c, *backend, ParallelContext::single());
  ModelConfig plain_config = c;
  plain_config.mtp_layers = 0;
  plain_config.mtp_repeated_layer = false;
  GPTModel plain(plain_config, *backend, ParallelContext::single());
  const MicrobatchData data = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  const at::Tensor positions = at::arange(c.seq, at::kLong);
  const MtpBatch batch = model.mtp_batch(data.tokens, data.labels);

  // The decoder's logits do not depend on the MTP depths.
  {
    at::NoGradGuard no_grad;
    const at::Tensor with = model.forward(data.tokens, positions, std::nullopt, &batch);
    const at::Tensor without = plain.forward(data.tokens, positions);
    EXPECT_TRUE(at::equal(with, without));
  }

  // objective = LM loss + scale / depths * sum_k depth loss; its value from the
  // observed MTP logits, its gradient from the backward of the LM loss alone
  // (the MTP loss rides on the decoder's output).
  std::map<std::string, at::Tensor> observed;
  auto objective = [&]() {
    observed.clear();
    TensorObservationCapture capture(
        [&](const ObservationOwner& owner, std::string_view name, SourceKind, const at::Tensor& t,
            OptionalDim, OptionalDim, OptionalDim) {
          EXPECT_EQ(owner.canonical_name(), "output_layer");
          observed[std::string(name)] = t;
        },
        KindSet{SourceKind::mtp_logits});
    const at::Tensor logits = model.forward(data.tokens, positions, std::nullopt, &batch);
    const at::Tensor lm = model.loss(logits, data.labels);
    EXPECT_EQ(observed.size(), static_cast<std::size_t>(v.depths));
    double mtp = 0;
    {
      at::NoGradGuard no_grad;
      for (std::int64_t k = 1; k <= v.depths; ++k)
        mtp += depth_loss(observed.at("mtp_logits." + std::to_string(k - 1)), data.labels, k);
    }
    return lm + c.mtp_loss_scale / double(v.depths) * mtp;
  };
  const std::vector<at::Tensor> leaves = {
      parameter(model, "mtp.layers.0.eh_proj.weight"),
      parameter(model, "mtp.layers.0.enorm.weight"),
      parameter(model, "decoder.layers.1.mlp.linear_fc2.weight"),
  };
  EXPECT_TRUE(testing::check_gradients(objective, leaves));
  // The MTP-only weights learn from the MTP loss alone: not zero.
  EXPECT_GT(leaves[0].grad().abs().max().item<double>(), 0.0);
}

// Megatron's MTP loss tracker: each depth's mean loss, averaged over the step's
// microbatches, recorded by the forward only (the backward recomputes the
// checkpointed depths), zeroed by begin_step.
TEST(MultiTokenPrediction, LogsEachDepthsLossOncePerMicrobatch) {
  auto backend = make_backend("reference");
  const ModelConfig c = mtp_config(2, true, RecomputeKind::full_uniform);
  GPTModel model(c, *backend, ParallelContext::single());
  const at::Tensor positions = at::arange(c.seq, at::kLong);
  std::map<std::string, at::Tensor> observed;
  TensorObservationCapture capture(
      [&](const ObservationOwner&, std::string_view name, SourceKind, const at::Tensor& t,
          OptionalDim, OptionalDim, OptionalDim) { observed[std::string(name)] = t.detach(); },
      KindSet{SourceKind::mtp_logits});
  for (int step = 0; step < 2; ++step) {
    model.begin_step();
    std::vector<double> want(2, 0.0);
    for (std::int64_t m = 0; m < 2; ++m) {
      const MicrobatchData data = microbatch_data(c.seed, m, c.seq, c.micro_batch, c.vocab);
      const MtpBatch batch = model.mtp_batch(data.tokens, data.labels);
      const at::Tensor logits = model.forward(data.tokens, positions, std::nullopt, &batch);
      model.loss(logits, data.labels).backward();  // recomputes both depths
      for (std::int64_t k = 1; k <= 2; ++k)
        want[static_cast<std::size_t>(k - 1)] +=
            depth_loss(observed.at("mtp_logits." + std::to_string(k - 1)), data.labels, k) / 2;
    }
    const std::vector<LoggedStatistic> logged = model.logged_mtp_losses(2);
    ASSERT_EQ(logged.size(), 2u);
    for (std::size_t d = 0; d < 2; ++d) {
      EXPECT_EQ(logged[d].metric, "mtp-loss");
      EXPECT_EQ(logged[d].label, "mtp_" + std::to_string(d + 1));
      EXPECT_NEAR(logged[d].value, want[d], 1e-12) << "step " << step;
    }
  }
}

const Variant kVariants[] = {
    {1, false, RecomputeKind::none},
    {2, true, RecomputeKind::none},
    {2, true, RecomputeKind::full_uniform},
    {2, false, RecomputeKind::full_block},
};
INSTANTIATE_TEST_SUITE_P(Depths, MtpLossGradient, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::to_string(i.param.depths) + "Depths" +
                                  (i.param.repeated ? "Repeated" : "") +
                                  std::string(i.param.recompute == RecomputeKind::none
                                                  ? "NoRecompute"
                                              : i.param.recompute == RecomputeKind::full_uniform
                                                  ? "FullUniform"
                                                  : "FullBlock");
                         });

}  // namespace
}  // namespace parity
