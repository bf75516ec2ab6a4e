// validate_run_config's rules for the parallel layout and the model's shapes: sizes,
// divisibility by tp / cp / ep, query groups, head dimension, sequence layout, and the
// model's own rules named by RunConfig's keys.
#include <gtest/gtest.h>

#include "harness/config/model_mapping.h"
#include "harness/config/run_config.h"
#include "tests/support/config_violations.h"

namespace parity {
namespace {

using testing::cli_lines;
using testing::expect_only;

TEST(RunConfigValidation, DefaultsAreValid) {
  EXPECT_TRUE(validate_run_config(RunConfig{}).empty());
}

TEST(RunConfigValidation, ParallelSizesAtLeastOne) {
  RunConfig c;
  c.tp = 0;
  expect_only(c, "--tp 0: must be >= 1");
  c = {};
  c.cp = -1;
  expect_only(c, "--cp -1: must be >= 1");
  c = {};
  c.dp = 0;
  expect_only(c, "--dp 0: must be >= 1");
}

// Expert parallelism re-slices the cp x dp ranks (Megatron's tp-ep-edp order).
TEST(RunConfigValidation, EpMustDivideCpTimesDp) {
  RunConfig c;
  c.dp = 2;
  c.ep = 3;
  expect_only(c, "--ep 3: must divide cp*dp = 1*2 = 2");
  c.ep = 0;
  expect_only(c, "--ep 0: must be >= 1");
  c.tp = 2;  // tp does not count: expert tensor parallelism is tp itself
  c.ep = 4;
  expect_only(c, "--ep 4: must divide cp*dp = 1*2 = 2");
  c.cp = 2;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, WorldSizeAtMost64) {
  RunConfig c;
  c.cp = 8;
  c.dp = 16;
  expect_only(c, "--dp 16: world size tp*cp*dp = 1*8*16 = 128 exceeds the maximum of 64");
  c.dp = 8;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, ModelSizesAtLeastOne) {
  const std::vector<std::pair<int RunConfig::*, std::string>> fields = {
      {&RunConfig::hidden, "hidden"},
      {&RunConfig::heads, "heads"},
      {&RunConfig::ffn_hidden, "ffn-hidden"},
      {&RunConfig::layers, "layers"},
      {&RunConfig::seq, "seq"},
      {&RunConfig::micro_batch, "micro-batch"},
      {&RunConfig::microbatches, "microbatches"},
      {&RunConfig::steps, "steps"},
      {&RunConfig::vocab, "vocab"}};
  for (const auto& [member, name] : fields) {
    RunConfig c;
    c.*member = 0;
    expect_only(c, "--" + name + " 0: must be >= 1");
  }
}

TEST(RunConfigValidation, HiddenDivisibleByHeads) {
  RunConfig c;
  c.heads = 3;
  expect_only(c, "--hidden 64: must be divisible by heads (3)");
}

TEST(RunConfigValidation, RotaryEmbeddingsNeedAnEvenHeadDimension) {
  RunConfig c;
  c.position_embedding = PositionEmbeddingKind::rope;
  EXPECT_TRUE(validate_run_config(c).empty());  // 64 / 4 = 16
  c.hidden = 12;
  expect_only(c,
              "--position-embedding rope: rotary embeddings need an even head dimension "
              "(hidden / heads = 3)");
}

TEST(RunConfigValidation, TensorParallelDivisibilityNamesWhich) {
  RunConfig c;
  c.tp = 3;
  EXPECT_EQ(cli_lines(c), (std::vector<std::string>{
                              "--heads 4: must be divisible by tp (3)",
                              "--ffn-hidden 256: must be divisible by tp (3)",
                              "--vocab 128: must be divisible by tp (3)",
                          }));
  c = {};
  c.tp = 2;
  c.vocab = 127;
  expect_only(c, "--vocab 127: must be divisible by tp (2)");
  c = {};
  c.tp = 4;
  c.heads = 2;
  expect_only(c, "--heads 2: must be divisible by tp (4)");
  c = {};
  c.tp = 2;
  c.ffn_hidden = 255;
  expect_only(c, "--ffn-hidden 255: must be divisible by tp (2)");
  // The rule reads tp: a message can say where tp came from.
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"tp"});
}

// Grouped-query attention: groups divide heads, and (Megatron's
// TransformerConfig) are a multiple or a divisor of tp; with fewer groups than
// TP ranks linear_qkv's rows still split evenly over TP.
TEST(RunConfigValidation, QueryGroupsFollowMegatronsRules) {
  RunConfig c;
  for (int groups : {0, 1, 2, 4}) {
    c.num_query_groups = groups;
    EXPECT_TRUE(validate_run_config(c).empty()) << groups;
  }
  for (int groups : {3, 8}) {
    c.num_query_groups = groups;
    expect_only(c, "--num-query-groups " + std::to_string(groups) +
                       ": must divide heads (4): each group shares its key and value with heads / "
                       "num_query_groups query heads");
    EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"heads"});
  }
  c.num_query_groups = -1;
  expect_only(c, "--num-query-groups -1: must be >= 1 (0 = heads: one group per head)");
  // heads 12, groups 3 over tp 2: neither a multiple nor a divisor.
  c = {};
  c.hidden = 48;
  c.heads = 12;
  c.num_query_groups = 3;
  c.tp = 2;
  expect_only(c,
              "--num-query-groups 3: must be a multiple or divisor of tp (2) (Megatron: "
              "\"num_query_groups must be a multiple or divisor of tensor_model_parallel_size\")");
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"tp"});
  c.num_query_groups = 6;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Fewer groups than ranks (Megatron all-gathers the projection): allowed
  // while (heads + 2 groups) * head_dim splits over tp.
  c = {};
  c.tp = 4;
  c.num_query_groups = 1;  // (4 + 2) * 16 = 96 rows over 4 ranks
  EXPECT_TRUE(validate_run_config(c).empty());
  c.hidden = 12;  // head_dim 3: (4 + 2) * 3 = 18 rows
  c.ffn_hidden = 16;
  expect_only(c,
              "--num-query-groups 1: linear_qkv's width (heads + 2 * num_query_groups) * "
              "head_dim = 18 is not divisible by tp (4) (Megatron's ColumnParallelLinear splits "
              "it evenly over TP)");
  c.num_query_groups = 2;  // (4 + 4) * 3 = 24
  EXPECT_TRUE(validate_run_config(c).empty());
}

// --kv-channels sets the head dimension: hidden need not divide by heads, and
// the rules that read the head dimension (rope, the QKV width) read it.
TEST(RunConfigValidation, KvChannelsSetTheHeadDimension) {
  RunConfig c;
  c.hidden = 66;
  c.kv_channels = 16;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.kv_channels = 0;
  expect_only(c, "--hidden 66: must be divisible by heads (4)");
  c = {};
  c.kv_channels = -1;
  expect_only(c, "--kv-channels -1: must be >= 1 (0 = hidden / heads)");
  c = {};
  c.position_embedding = PositionEmbeddingKind::rope;
  c.kv_channels = 5;
  expect_only(c,
              "--position-embedding rope: rotary embeddings need an even head dimension "
              "(kv_channels = 5)");
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"kv-channels"});
  c = {};
  c.tp = 4;
  c.num_query_groups = 1;
  c.kv_channels = 3;  // (4 + 2) * 3 = 18 rows over 4 ranks
  expect_only(c,
              "--num-query-groups 1: linear_qkv's width (heads + 2 * num_query_groups) * "
              "head_dim = 18 is not divisible by tp (4) (Megatron's ColumnParallelLinear splits "
              "it evenly over TP)");
}

TEST(RunConfigValidation, SequenceParallelNeedsTensorParallel) {
  RunConfig c;
  c.sp = true;
  expect_only(c, "--sp: sequence parallelism requires tp > 1 (tp = 1)");
  c.tp = 2;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, SequenceLayout) {
  RunConfig c;
  c.cp = 2;
  c.seq = 6;
  expect_only(c,
              "--seq 6: sequence length 6 is not divisible by 2*cp = 4 "
              "(context-parallel load-balanced layout)");
  c = {};
  c.tp = 2;
  c.sp = true;
  c.seq = 15;
  expect_only(c, "--seq 15: sequence length 15 is not divisible by tp = 2 (sequence parallelism)");
  c = {};
  c.tp = 2;
  c.sp = true;
  c.cp = 2;
  c.seq = 12;
  expect_only(c,
              "--seq 12: sequence length 12 is not divisible by 2*cp*tp = 8 "
              "(context-parallel load-balanced chunks, each split over tp by sequence "
              "parallelism)");
  c.seq = 16;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Without SP the sequence need not divide by tp; without CP not by 2.
  c = {};
  c.tp = 2;
  c.seq = 15;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, GlobalBatchIsPerDpRankSoAlwaysDivisible) {
  RunConfig c;
  c.dp = 4;
  c.micro_batch = 3;
  c.microbatches = 1;
  EXPECT_TRUE(validate_run_config(c).empty());
  EXPECT_EQ(c.global_batch(), 12);
}

// ModelConfig::violations is the one home of the model's rules; the run-config
// validator names RunConfig's keys and the other keys each rule reads.
TEST(RunConfigValidation, ModelRulesMapOntoRunKeys) {
  RunConfig c;
  c.sp = true;
  std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "sp");
  EXPECT_EQ(v[0].kind, ConfigViolation::Kind::flag);
  EXPECT_EQ(v[0].involves, std::vector<std::string>{"tp"});
  c = {};
  c.recompute = "full-uniform";
  c.graphs = GraphMode::per_layer;
  v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "recompute");
  EXPECT_EQ(v[0].value, "full-uniform");
  EXPECT_EQ(v[0].involves, std::vector<std::string>{"graphs"});
  // The model reports every broken rule, not only the first (validate() throws that one).
  const std::vector<ModelConfigViolation> all = ModelConfig{}.violations(3, 1, 1);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].field, "heads");
  EXPECT_EQ(all[1].field, "ffn_hidden");
  EXPECT_EQ(all[2].field, "vocab");
  // The model's own SP layout needs each CP rank's share divisible by tp; parity's
  // runs are stricter (every load-balanced chunk), a run-level rule.
  ModelConfig sp;
  sp.seq = 8;
  sp.sequence_parallel = true;
  EXPECT_TRUE(sp.violations(4, 2, 1).empty());
  RunConfig strict;
  strict.tp = 4, strict.cp = 2, strict.sp = true, strict.seq = 8;
  expect_only(strict,
              "--seq 8: sequence length 8 is not divisible by 2*cp*tp = 16 (context-parallel "
              "load-balanced chunks, each split over tp by sequence parallelism)");
  // The same rules, straight from the model.
  const std::vector<ModelConfigViolation> m = model_config_from(c).violations(1, 1, 1);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].field, "recompute");
}

}  // namespace
}  // namespace parity
