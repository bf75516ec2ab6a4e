// RunConfig -> ModelConfig (harness/config/model_mapping.h): every model field is
// mapped, and every config the validator accepts is one the model accepts.
#include <gtest/gtest.h>

#include "harness/config/model_mapping.h"
#include "harness/config/run_config.h"
#include "tests/config/unusual_run_config.h"

namespace parity {
namespace {

TEST(ModelMapping, EveryModelFieldIsMapped) {
  const RunConfig c = testing::unusual_run_config();
  const ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.hidden, 96);
  EXPECT_EQ(m.heads, 6);
  EXPECT_EQ(m.num_query_groups, 2);
  EXPECT_EQ(m.kv_channels, 12);
  EXPECT_TRUE(m.qk_layernorm);
  EXPECT_EQ(m.ffn_hidden, 128);
  EXPECT_EQ(m.layers, 5);
  EXPECT_EQ(m.seq, 32);
  EXPECT_EQ(m.micro_batch, 3);
  EXPECT_EQ(m.vocab, 200);
  EXPECT_EQ(m.dtype, ModelDType::bf16);
  EXPECT_TRUE(m.fp32_residual);
  EXPECT_EQ(m.dropout, 0.1);
  EXPECT_EQ(m.norm, NormKind::rms_norm);
  EXPECT_EQ(m.activation, ActivationKind::swiglu);
  EXPECT_EQ(m.position_embedding, PositionEmbeddingKind::rope);
  EXPECT_EQ(m.rotary_base, 500000.0);
  EXPECT_EQ(m.rotary_percent, 0.25);
  EXPECT_TRUE(m.rotary_interleaved);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.rotary_dim(), 3);  // int(12 * 0.25)
  EXPECT_EQ(m.rotary_channels(), 4);
  EXPECT_EQ(m.seed, 18446744073709551557ull);
  EXPECT_TRUE(m.sequence_parallel);
  EXPECT_TRUE(m.gather_output);
  EXPECT_EQ(m.runtime_gather_output, std::optional<bool>(false));
  const ModelConfig d = model_config_from(RunConfig{});
  EXPECT_EQ(d.dtype, ModelDType::fp32);
  EXPECT_EQ(d.norm, NormKind::layer_norm);
  EXPECT_EQ(d.activation, ActivationKind::gelu);
  EXPECT_FALSE(d.sequence_parallel);
  EXPECT_FALSE(d.gather_output);
  EXPECT_FALSE(d.runtime_gather_output.has_value());
  EXPECT_EQ(d.query_groups(), d.heads);
  EXPECT_EQ(d.head_dim(), 64 / 4);
  EXPECT_FALSE(d.qk_layernorm);
  EXPECT_EQ(d.rotary_base, 10000.0);
  EXPECT_EQ(d.rotary_percent, 1.0);
  EXPECT_FALSE(d.rotary_interleaved);
  EXPECT_EQ(d.norm_eps, 1e-5);
  EXPECT_EQ(d.rotary_channels(), d.head_dim());
}

// validate_run_config is the one rule set: every config it accepts maps onto a
// ModelConfig that the model's own defensive check accepts too (so a valid run
// never fails inside a rank for a config reason). Exhaustive over a grid that
// crosses every divisibility rule.
TEST(ModelMapping, EveryValidRunConfigIsAValidModelConfig) {
  int accepted = 0, rejected = 0;
  for (int tp : {1, 2, 3, 4})
    for (int cp : {1, 2, 3})
      for (int dp : {1, 2})
        for (bool sp : {false, true})
          for (int heads : {1, 2, 3, 4, 6})
            for (int groups : {0, 1, 2, 3})
              for (int hidden : {12, 16, 24, 36})
                for (int ffn : {6, 8, 12})
                  for (int vocab : {12, 20})
                    for (int seq : {4, 6, 8, 12, 16, 24}) {
                      RunConfig c;
                      c.tp = tp, c.cp = cp, c.dp = dp, c.sp = sp, c.heads = heads;
                      c.num_query_groups = groups;
                      c.hidden = hidden, c.ffn_hidden = ffn, c.vocab = vocab, c.seq = seq;
                      if (!validate_run_config(c).empty()) {
                        ++rejected;
                        continue;
                      }
                      ++accepted;
                      try {
                        model_config_from(c).validate(tp, cp, dp);
                      } catch (const ModelConfigError& e) {
                        ADD_FAILURE()
                            << "validate_run_config accepted what the model rejects: " << e.what();
                      }
                    }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 100);
}

TEST(ModelMapping, RecomputeAndGraphs) {
  RunConfig c;
  c.layers = 4;
  c.recompute = "full-uniform";
  c.recompute_layers = 2;
  c.graphs = GraphMode::full_iteration;
  c.graph_warmup = 3;
  ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.recompute, RecomputeKind::full_uniform);
  EXPECT_EQ(m.recompute_layers, 2);
  EXPECT_EQ(m.graphs, GraphMode::full_iteration);
  EXPECT_EQ(m.graph_warmup, 3);
  c.recompute = "selective:mlp,core_attn";
  c.graphs = GraphMode::per_layer;
  m = model_config_from(c);
  EXPECT_EQ(m.recompute, RecomputeKind::selective);
  EXPECT_TRUE(m.recompute_modules.core_attn && m.recompute_modules.mlp);
  EXPECT_FALSE(m.recompute_modules.layernorm);
  EXPECT_EQ(m.graphs, GraphMode::per_layer);
  EXPECT_EQ(model_config_from(RunConfig{}).recompute, RecomputeKind::none);
}

}  // namespace
}  // namespace parity
