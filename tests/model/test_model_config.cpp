// ModelConfig's rules (ModelConfig::violations / validate): one line naming the
// field, its value and the rule; the attention options' rules in Megatron's words.
#include <gtest/gtest.h>

#include "harness/model/model_config.h"

namespace parity {
namespace {

std::string field_of(const ModelConfig& c, int tp, int cp, int dp) {
  try {
    c.validate(tp, cp, dp);
  } catch (const ModelConfigError& e) {
    return e.field();
  }
  return "";
}

TEST(ModelConfigValidation, NamesFieldValueAndRule) {
  ModelConfig c;
  c.heads = 6;
  c.hidden = 48;
  c.ffn_hidden = 64;
  c.vocab = 128;
  try {
    c.validate(4, 1, 1);
    FAIL();
  } catch (const ModelConfigError& e) {
    EXPECT_EQ(e.field(), "heads");
    EXPECT_STREQ(e.what(), "model config: heads = 6: must be divisible by tp (4)");
  }
  ModelConfig ok;
  EXPECT_EQ(field_of(ok, 1, 1, 1), "");
  EXPECT_EQ(field_of(ok, 4, 2, 2), "");
  ModelConfig v = ok;
  v.vocab = 130;
  EXPECT_EQ(field_of(v, 4, 1, 1), "vocab");
  v = ok;
  v.ffn_hidden = 250;
  EXPECT_EQ(field_of(v, 4, 1, 1), "ffn_hidden");
  v = ok;
  v.sequence_parallel = true;
  EXPECT_EQ(field_of(v, 1, 1, 1), "sequence_parallel");
  EXPECT_EQ(field_of(v, 2, 1, 1), "");
  v = ok;
  v.seq = 12;
  EXPECT_EQ(field_of(v, 1, 4, 1), "seq");  // 2*cp = 8
  v.seq = 10;
  v.sequence_parallel = true;
  EXPECT_EQ(field_of(v, 4, 1, 1), "seq");  // 10 % 4
  v = ok;
  v.dropout = 1.0;
  EXPECT_EQ(field_of(v, 1, 1, 1), "dropout");
  v = ok;
  v.hidden = 12;
  v.heads = 4;  // head_dim 3: rotate-half needs pairs
  EXPECT_EQ(field_of(v, 1, 1, 1), "");
  v.position_embedding = PositionEmbeddingKind::rope;
  EXPECT_EQ(field_of(v, 1, 1, 1), "position_embedding");
  v.hidden = 16;
  EXPECT_EQ(field_of(v, 1, 1, 1), "");
  v = ok;
  v.hidden = 66;
  EXPECT_EQ(field_of(v, 1, 1, 1), "hidden");
}

// Grouped-query attention, the head dimension and the q/k norms.
TEST(ModelConfigValidation, AttentionOptionsFollowMegatronsRules) {
  ModelConfig c;  // hidden 64, 4 heads
  c.heads = 8;
  for (std::int64_t groups : {0, 1, 2, 4, 8}) {
    c.num_query_groups = groups;
    EXPECT_EQ(field_of(c, 4, 1, 1), "") << groups;
  }
  c.num_query_groups = 3;
  try {
    c.validate(1, 1, 1);
    FAIL();
  } catch (const ModelConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "model config: num_query_groups = 3: must divide heads (8): each group shares its "
                 "key and value with heads / num_query_groups query heads");
  }
  // 12 heads in 6 groups over tp 4: 6 is neither a multiple nor a divisor of 4.
  c.heads = 12;
  c.hidden = 48;
  c.ffn_hidden = 64;
  c.num_query_groups = 6;
  EXPECT_EQ(field_of(c, 2, 1, 1), "");
  EXPECT_EQ(field_of(c, 4, 1, 1), "num_query_groups");
  c.num_query_groups = 12;  // one per head: a multiple of 4
  EXPECT_EQ(field_of(c, 4, 1, 1), "");
  // kv_channels: the head dimension, so hidden need not divide by heads; rope
  // needs it even.
  ModelConfig k;
  k.hidden = 66;
  k.ffn_hidden = 64;
  EXPECT_EQ(field_of(k, 1, 1, 1), "hidden");
  k.kv_channels = 10;
  EXPECT_EQ(field_of(k, 1, 1, 1), "");
  EXPECT_EQ(k.head_dim(), 10);
  EXPECT_EQ(k.qkv_width(), (4 + 2 * 4) * 10);
  k.position_embedding = PositionEmbeddingKind::rope;
  k.kv_channels = 9;
  EXPECT_EQ(field_of(k, 1, 1, 1), "position_embedding");
  k.kv_channels = -1;
  EXPECT_EQ(field_of(k, 1, 1, 1), "kv_channels");
  // q/k norms take any layout.
  ModelConfig q;
  q.qk_layernorm = true;
  q.num_query_groups = 1;
  EXPECT_EQ(field_of(q, 4, 2, 1), "");
}

TEST(ModelConfigValidation, PackedSequencesFitInSeqWithMegatronsThdRules) {
  ModelConfig c;
  c.seq = 32;
  c.micro_batch = 1;
  c.packed_seq_lengths = {5, 11, 8};
  EXPECT_EQ(field_of(c, 1, 2, 1), "");  // padded to 8 + 12 + 8 = 28 <= 32
  EXPECT_EQ(field_of(c, 1, 4, 1), "");  // 8 + 16 + 8 = 32
  c.seq = 24;                           // 24 tokens, 28 positions under cp 2
  EXPECT_EQ(field_of(c, 1, 1, 1), "");
  try {
    c.validate(1, 2, 1);
    FAIL();
  } catch (const ModelConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "model config: packed_seq_lengths = 5,11,8: the documents, each padded to a "
                 "multiple of 2*cp = 4, take 28 positions, more than seq = 24 (seq is the packed "
                 "sequence's length, Megatron's --seq-length; the last document's padding runs "
                 "to its end)");
  }
  c.seq = 32;
  c.packed_seq_lengths = {5, 0};
  EXPECT_EQ(field_of(c, 1, 1, 1), "packed_seq_lengths");
  c.packed_seq_lengths = {5, 11};
  c.micro_batch = 2;
  EXPECT_EQ(field_of(c, 1, 1, 1), "packed_seq_lengths");  // THD: one sequence per microbatch
  c.micro_batch = 1;
  c.mtp_layers = 1;
  EXPECT_EQ(field_of(c, 1, 1, 1), "packed_seq_lengths");
  c.mtp_layers = 0;
  c.pipeline.pp = 2;
  EXPECT_EQ(field_of(c, 1, 1, 1), "packed_seq_lengths");
}

}  // namespace
}  // namespace parity
