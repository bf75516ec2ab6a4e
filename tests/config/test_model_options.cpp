// The model options of current open models and their expert layouts: the
// rotary options, the norm epsilon and expert tensor parallelism (--etp).
#include <gtest/gtest.h>

#include "harness/config/run_config.h"
#include "tests/support/config_violations.h"

namespace parity {
namespace {

using testing::cli_lines;
using testing::expect_only;

// The rotary options (Megatron's rotary_base, rotary_percent,
// rotary_interleaved) and the norm epsilon: their ranges, rope only, and the
// rotated channels 2 * ceil(int(head_dim * percent) / 2) fit in the head.
TEST(RunConfigValidation, RotaryOptionsAndNormEpsilon) {
  RunConfig c;
  c.position_embedding = PositionEmbeddingKind::rope;
  c.rotary_base = 500000;
  c.rotary_percent = 0.5;
  c.rotary_interleaved = true;
  c.norm_epsilon = 1e-6;
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
  c.rotary_percent = 0.0;
  expect_only(c, "--rotary-percent 0: must be in (0, 1]");
  c.rotary_percent = 1.5;
  expect_only(c, "--rotary-percent 1.5: must be in (0, 1]");
  c.rotary_percent = 0.05;  // int(16 * 0.05) = 0
  expect_only(c,
              "--rotary-percent 0.05: int(head_dim * rotary_percent) = 0 rotates no channel "
              "(hidden / heads = 16)");
  EXPECT_EQ(validate_run_config(c).at(0).involves,
            (std::vector<std::string>{"hidden", "heads", "position-embedding"}));
  c.rotary_percent = 0.1;  // int(1.6) = 1: one frequency, two channels (as Megatron)
  EXPECT_TRUE(validate_run_config(c).empty());
  c.kv_channels = 5;  // an odd head dimension with 3 of 5 rotating (int(2.5) = 2)
  c.rotary_percent = 0.5;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.rotary_percent = 1.0;
  expect_only(c,
              "--position-embedding rope: rotary embeddings need an even head dimension "
              "(kv_channels = 5)");
  c = {};
  c.position_embedding = PositionEmbeddingKind::rope;
  c.rotary_base = 0;
  expect_only(c, "--rotary-base 0: must be > 0");
  c = {};
  c.norm_epsilon = 0;
  expect_only(c, "--norm-epsilon 0: must be > 0");
  c.norm_epsilon = -1e-5;
  expect_only(c, "--norm-epsilon -1e-05: must be > 0");
  c.norm_epsilon = 0.1;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Without rope they would change nothing: refused, naming the option.
  c = {};
  c.rotary_base = 1e6;
  expect_only(c,
              "--rotary-base 1e+06: applies to rotary embeddings only (--position-embedding "
              "rope)");
  c = {};
  c.rotary_percent = 0.5;
  expect_only(c,
              "--rotary-percent 0.5: applies to rotary embeddings only (--position-embedding "
              "rope)");
  c = {};
  c.rotary_interleaved = true;
  expect_only(c,
              "--rotary-interleaved: applies to rotary embeddings only (--position-embedding "
              "rope)");
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"position-embedding"});
}

// --etp (Megatron's expert_tensor_parallel_size): the expert layout etp x ep
// tiles each stage's tp x cp x dp ranks, the expert width divides by etp, and
// it needs MoE layers.
TEST(RunConfigValidation, ExpertTensorParallelFollowsMegatronsRules) {
  RunConfig c;
  c.tp = 2;
  c.sp = true;
  c.dp = 2;
  c.moe_experts = 4;
  c.ep = 2;
  c.etp = 1;
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
  c.dp = 1;  // ep 2 over the TP pair: ep no longer divides cp*dp, the expert layout still tiles
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
  c.ep = 4;
  expect_only(c,
              "--etp 1: etp*ep = 1*4 must divide tp*cp*dp = 2 (Megatron's expert layout tiles "
              "each pipeline stage)");
  c.ep = 1;
  c.etp = 4;
  expect_only(c,
              "--etp 4: etp*ep = 4*1 must divide tp*cp*dp = 2 (Megatron's expert layout tiles "
              "each pipeline stage)");
  c = {};
  c.dp = 4;
  c.moe_experts = 4;
  c.etp = 2;
  c.moe_ffn_hidden = 6;
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
  c.etp = 4;
  expect_only(c, "--moe-ffn-hidden 6: must be divisible by etp (4): experts are split over etp");
  c.etp = -1;
  expect_only(c, "--etp -1: must be >= 0 (0 = tp)");
  c = {};
  c.dp = 2;
  c.etp = 2;
  expect_only(c, "--etp 2: needs moe_experts >= 2 (the model has no MoE layer)");
  c.etp = 1;  // = tp: the default layout, allowed without experts
  EXPECT_TRUE(validate_run_config(c).empty());
  c = {};
  c.dp = 2;
  c.moe_experts = 4;
  c.etp = 2;
  c.observe_wgrad = true;
  expect_only(c,
              "--etp 2: --observe-wgrad with experts split over a TP size of their own (etp != "
              "tp) is not supported yet");
}

}  // namespace
}  // namespace parity
