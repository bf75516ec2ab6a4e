// --load-weights and --load-batch at the model floor (harness/model/loaded_weights.h,
// loaded_batch.h): loaded weights reproduce the model bit for bit; every error
// path names the key and both shapes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/base/safetensors.h"
#include "harness/model/gpt_model.h"
#include "harness/model/loaded_batch.h"
#include "harness/model/loaded_weights.h"
#include "tests/support/model_configs.h"

namespace parity {
namespace {

ModelConfig config(std::uint64_t seed, ActivationKind act = ActivationKind::swiglu) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.activation = act;
  c.seed = seed;
  return c;
}

NamedTensors full_weights(GPTModel& m) {
  NamedTensors out;
  for (const Parameter& p : m.parameters()) out.emplace_back(p.name, p.value.detach());
  return out;
}

at::Tensor logits_of(GPTModel& m) {
  const ModelConfig& c = m.config();
  const MicrobatchData d = microbatch_data(7, 0, c.seq, c.micro_batch, c.vocab);
  at::NoGradGuard g;
  return m.forward(d.tokens, at::arange(c.seq, at::kLong));
}

std::vector<std::string> problems_of(const std::string& path, const ModelConfig& c) {
  auto backend = make_backend("reference");
  try {
    LoadedWeights w(path);
    GPTModel m(c, *backend, ParallelContext::single(), &w);
  } catch (const WeightsError& e) {
    return e.problems();
  }
  return {};
}

TEST(LoadedWeights, UnshardedFileReproducesTheModelBitForBit) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  GPTModel a(config(1), *backend, ParallelContext::single());
  NamedTensors w = full_weights(a);
  w.emplace_back("decoder.layers.0.mlp.linear_fc1._extra_state", at::zeros({1}));  // ignored
  safetensors::write_file(dir.path() + "/w.safetensors", w);
  LoadedWeights loaded(dir.path() + "/w.safetensors");
  GPTModel b(config(2), *backend, ParallelContext::single(), &loaded);
  GPTModel seeded_b(config(2), *backend, ParallelContext::single());
  EXPECT_TRUE(at::equal(logits_of(a), logits_of(b)));
  EXPECT_FALSE(at::equal(logits_of(a), logits_of(seeded_b)));  // the seed matters without a file
}

TEST(LoadedWeights, PerRankFilesAreReassembledForAnyTpSize) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  GPTModel a(config(1), *backend, ParallelContext::single());
  const std::string base = dir.path() + "/w.safetensors";
  for (int r = 0; r < 2; ++r) {
    NamedTensors shard;
    for (const Parameter& p : a.parameters())
      shard.emplace_back(p.name, shard_of(p.value.detach(), p.shard, r, 2));
    safetensors::write_file(base + ".tp" + std::to_string(r), shard);
  }
  LoadedWeights loaded(base);
  EXPECT_EQ(loaded.files().size(), 2u);
  GPTModel b(config(2), *backend, ParallelContext::single(), &loaded);
  EXPECT_TRUE(at::equal(logits_of(a), logits_of(b)));
  // The SwiGLU fc1 is [gate; up]: each rank file holds [gate_r; up_r] (parts = 2).
  const Parameter* fc1 = nullptr;
  for (const Parameter& p : a.parameters())
    if (p.name == "decoder.layers.0.mlp.linear_fc1.weight") fc1 = &p;
  ASSERT_NE(fc1, nullptr);
  const at::Tensor rank0 = *safetensors::read_file(base + ".tp0").find(fc1->name);
  EXPECT_TRUE(at::equal(rank0.slice(0, 0, 12), fc1->value.detach().slice(0, 0, 12)));
  EXPECT_TRUE(at::equal(rank0.slice(0, 12, 24), fc1->value.detach().slice(0, 24, 36)));

  // A per-rank file whose replicated norm weight differs from rank 0's.
  NamedTensors bad;
  for (const auto& [n, t] : safetensors::read_file(base + ".tp1").tensors)
    bad.emplace_back(n, n == "decoder.final_layernorm.weight" ? t + 1 : t);
  safetensors::write_file(base + ".tp1", bad);
  const std::vector<std::string> p = problems_of(base, config(1));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("decoder.final_layernorm.weight: replicated over TP"), std::string::npos)
      << p[0];
}

TEST(LoadedWeights, MissingExtraAndMisShapedKeysAreEachNamedWithBothShapes) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  GPTModel a(config(1), *backend, ParallelContext::single());
  NamedTensors w;
  for (const Parameter& p : a.parameters()) {
    if (p.name == "output_layer.weight") continue;  // missing
    w.emplace_back(p.name, p.name == "decoder.layers.1.mlp.linear_fc1.weight"
                               ? at::zeros({24, 16})  // gelu-sized fc1 for a swiglu model
                               : p.value.detach());
  }
  w.emplace_back("output_layer.bias", at::zeros({20}));  // extra
  const std::string path = dir.path() + "/w.safetensors";
  safetensors::write_file(path, w);
  const std::vector<std::string> p = problems_of(path, config(1));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0],
            "decoder.layers.1.mlp.linear_fc1.weight: the file has shape [24, 16], the model "
            "expects [48, 16]");
  EXPECT_EQ(p[1], "output_layer.weight: missing from the file (the model expects shape [20, 16])");
  EXPECT_EQ(p[2],
            "output_layer.bias: in the file (shape [20]) but the model has no such parameter");
}

// A grouped-query checkpoint (linear_qkv (heads + 2 groups) * head_dim rows)
// loads into the model with those groups, unsharded or from per-rank files
// whose rows cut through a group (1 group over 2 ranks); into a model without
// groups each linear_qkv is named with both shapes and the option.
TEST(LoadedWeights, AGroupedQueryCheckpointLoadsAndAMismatchNamesTheOption) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  ModelConfig mqa = config(1);
  mqa.num_query_groups = 1;
  GPTModel a(mqa, *backend, ParallelContext::single());
  const std::string path = dir.path() + "/w.safetensors";
  safetensors::write_file(path, full_weights(a));
  ModelConfig other_seed = mqa;
  other_seed.seed = 2;
  LoadedWeights loaded(path);
  GPTModel b(other_seed, *backend, ParallelContext::single(), &loaded);
  EXPECT_TRUE(at::equal(logits_of(a), logits_of(b)));

  const std::string base = dir.path() + "/ranks.safetensors";
  for (int r = 0; r < 2; ++r) {
    NamedTensors shard;
    for (const Parameter& p : a.parameters())
      shard.emplace_back(p.name, shard_of(p.value.detach(), p.shard, r, 2));
    safetensors::write_file(base + ".tp" + std::to_string(r), shard);
  }
  const at::Tensor rank1 = *safetensors::read_file(base + ".tp1")
                                .find("decoder.layers.0.self_attention.linear_qkv.weight");
  EXPECT_EQ(rank1.size(0), 12);  // (4 + 2) * 4 rows over 2 ranks
  LoadedWeights per_rank(base);
  GPTModel c(other_seed, *backend, ParallelContext::single(), &per_rank);
  EXPECT_TRUE(at::equal(logits_of(a), logits_of(c)));

  const std::vector<std::string> p = problems_of(path, config(1));
  ASSERT_EQ(p.size(), 4u);  // weight and bias of both layers
  EXPECT_EQ(p[0],
            "decoder.layers.0.self_attention.linear_qkv.weight: the file has shape [24, 16], the "
            "model expects [48, 16] (linear_qkv has (heads + 2 * num_query_groups) * head_dim "
            "rows: does the model use --num-query-groups or --kv-channels?)");
  EXPECT_EQ(p[1],
            "decoder.layers.0.self_attention.linear_qkv.bias: the file has shape [24], the model "
            "expects [48] (linear_qkv has (heads + 2 * num_query_groups) * head_dim rows: does "
            "the model use --num-query-groups or --kv-channels?)");
}

// A checkpoint with another head dimension (--kv-channels) and q/k norms
// (--qk-layernorm): each tensor that does not fit names the option.
TEST(LoadedWeights, KvChannelsAndQkNormMismatchesNameTheirOptions) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  ModelConfig wide_heads = config(1);
  wide_heads.kv_channels = 6;
  wide_heads.qk_layernorm = true;
  GPTModel a(wide_heads, *backend, ParallelContext::single());
  const std::string path = dir.path() + "/w.safetensors";
  safetensors::write_file(path, full_weights(a));
  LoadedWeights loaded(path);
  GPTModel b(wide_heads, *backend, ParallelContext::single(), &loaded);
  EXPECT_TRUE(at::equal(logits_of(a), logits_of(b)));

  auto problem_of = [](const std::vector<std::string>& problems, const std::string& start) {
    for (const std::string& p : problems)
      if (p.rfind(start, 0) == 0) return p;
    return std::string("(none starts with " + start + ")");
  };
  const std::string L = "decoder.layers.0.self_attention.";
  const std::vector<std::string> plain = problems_of(path, config(1));
  EXPECT_EQ(problem_of(plain, L + "linear_qkv.weight"),
            L + "linear_qkv.weight: the file has shape [72, 16], the model expects [48, 16] "
                "(linear_qkv has (heads + 2 * num_query_groups) * head_dim rows: does the model "
                "use --num-query-groups or --kv-channels?)");
  EXPECT_EQ(problem_of(plain, L + "linear_proj.weight"),
            L + "linear_proj.weight: the file has shape [16, 24], the model expects [16, 16] "
                "(linear_proj takes heads * head_dim inputs: does the model use --kv-channels?)");
  EXPECT_EQ(problem_of(plain, L + "q_layernorm.weight"),
            L + "q_layernorm.weight: in the file (shape [6]) but the model has no such parameter "
                "(does the model use --qk-layernorm?)");
  ModelConfig qk_only = config(1);
  qk_only.qk_layernorm = true;
  EXPECT_EQ(problem_of(problems_of(path, qk_only), L + "k_layernorm.bias"),
            L + "k_layernorm.bias: the file has shape [6], the model expects [4] (the q/k norms "
                "have head_dim weights: does the model use --kv-channels?)");
}

TEST(LoadedWeights, IntegerTensorsAndAmbiguousFilesAreRejected) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  GPTModel a(config(1), *backend, ParallelContext::single());
  NamedTensors w;
  for (const Parameter& p : a.parameters())
    w.emplace_back(p.name, p.name == "output_layer.weight" ? p.value.detach().to(at::kLong)
                                                           : p.value.detach());
  const std::string path = dir.path() + "/w.safetensors";
  safetensors::write_file(path, w);
  const std::vector<std::string> p = problems_of(path, config(1));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("output_layer.weight: dtype Long is not a floating type"), std::string::npos);
  safetensors::write_file(path + ".tp0", w);
  EXPECT_THROW(LoadedWeights{path}, WeightsError);
  EXPECT_THROW(LoadedWeights{dir.path() + "/none"}, TensorFileError);
}

TEST(LoadedWeights, Fp32FileIntoAnFp64ModelIsConvertedExactly) {
  files::TempDir dir;
  auto backend = make_backend("reference");
  GPTModel a(config(1), *backend, ParallelContext::single());
  safetensors::write_file(dir.path() + "/w", full_weights(a));
  ModelConfig c = config(1);
  c.dtype = ModelDType::fp64;
  LoadedWeights loaded(dir.path() + "/w");
  GPTModel b(c, *backend, ParallelContext::single(), &loaded);
  for (std::size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_TRUE(at::equal(b.parameters()[i].value.detach(),
                          a.parameters()[i].value.detach().to(at::kDouble)));
}

TEST(LoadedBatch, RowsMapToGlobalMicrobatchesAndStepsReuseTheBatch) {
  files::TempDir dir;
  const std::string path = dir.path() + "/b";
  // global batch 4 (micro_batch 2 x 2 microbatches), seq 3.
  const at::Tensor tokens = at::arange(12, at::kLong).view({4, 3});
  safetensors::write_file(path, {{"tokens", tokens}, {"labels", (tokens + 1) % 20}});
  LoadedBatch b(path, 4, 3, 2, 20);
  const MicrobatchData g1 = b.microbatch(1);
  EXPECT_TRUE(at::equal(g1.tokens, tokens.slice(0, 2, 4).t()));  // [seq, micro_batch]
  EXPECT_TRUE(at::equal(b.microbatch(3).tokens, g1.tokens));     // step 1 reuses step 0's
}

TEST(LoadedBatch, BadFieldsAreNamed) {
  files::TempDir dir;
  const std::string path = dir.path() + "/b";
  auto error = [&](NamedTensors t) -> std::string {
    safetensors::write_file(path, t);
    try {
      LoadedBatch b(path, 4, 3, 2, 20);
    } catch (const BatchError& e) {
      return e.what();
    }
    return "";
  };
  const at::Tensor ok = at::zeros({4, 3}, at::kLong);
  EXPECT_NE(error({{"tokens", ok}})
                .find("labels: missing (expected int64 [rows, 3] with rows a "
                      "multiple of the global batch 4; the file holds 1 "
                      "tensor(s): 'tokens')"),
            std::string::npos);
  EXPECT_NE(error({{"tokens", ok.to(at::kInt)}, {"labels", ok}}).find("tokens: dtype Int"),
            std::string::npos);
  EXPECT_NE(error({{"tokens", at::zeros({3, 3}, at::kLong)}, {"labels", ok}})
                .find("tokens: shape [3, 3], expected int64 [rows, 3]"),
            std::string::npos);
  EXPECT_NE(error({{"tokens", ok}, {"labels", ok + 20}}).find("labels: values in [20, 20]"),
            std::string::npos);
  EXPECT_NE(error({{"tokens", ok}, {"labels", ok}, {"x", ok}}).find("x: unknown tensor"),
            std::string::npos);
}

}  // namespace
}  // namespace parity
