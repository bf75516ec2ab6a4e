// The model at one rank: deterministic init, the gather precedence helper, fp64 numerics against an
// independent plain implementation and against finite differences, and the observation sites.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>

#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gather_output.h"
#include "harness/model/gpt_model.h"
#include "tests/backend/gradcheck.h"
#include "tests/support/model_configs.h"

PARITY_USES_FAULT(wrong_gather_precedence);

namespace parity {
namespace {

using testing::check_gradients;
using testing::weighted_sum;

ModelConfig tiny_config() {
  ModelConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.ffn_hidden = 8;
  c.layers = 2;
  c.seq = 4;
  c.micro_batch = 2;
  c.vocab = 12;
  c.dtype = ModelDType::fp64;
  c.seed = 11;
  c.init_std = 0.5;  // large enough that every path matters in the checks
  return c;
}

ModelConfig small_config() {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.layers = 3;
  c.micro_batch = 3;
  c.dtype = ModelDType::fp64;
  c.seed = 11;
  c.init_std = 0.2;
  return c;
}

at::Tensor positions(std::int64_t s) { return at::arange(s, at::kLong); }

// ------------------------------------------------------------------ init
TEST(DeterministicInit, DependsOnlyOnSeedAndName) {
  at::Tensor a = full_parameter(1, "x.weight", {4, 3}, InitKind::normal, 0.02, at::kDouble);
  EXPECT_TRUE(
      at::equal(a, full_parameter(1, "x.weight", {4, 3}, InitKind::normal, 0.02, at::kDouble)));
  EXPECT_FALSE(
      at::equal(a, full_parameter(2, "x.weight", {4, 3}, InitKind::normal, 0.02, at::kDouble)));
  EXPECT_FALSE(
      at::equal(a, full_parameter(1, "y.weight", {4, 3}, InitKind::normal, 0.02, at::kDouble)));
  // Drawn in fp64 whatever the dtype: fp32 is the rounded fp64 tensor.
  EXPECT_TRUE(at::equal(full_parameter(1, "x.weight", {4, 3}, InitKind::normal, 0.02, at::kFloat),
                        a.to(at::kFloat)));
  at::Tensor ones =
      full_parameter(1, "n.weight", {64}, InitKind::ones_plus_noise, 0.02, at::kDouble);
  EXPECT_NEAR(ones.mean().item<double>(), 1.0, 0.02);
}

TEST(DeterministicInit, ShardAndUnshardRoundTrip) {
  at::Tensor full = at::arange(48, at::kDouble).view({8, 6});
  for (ShardSpec spec : {ShardSpec::along(0), ShardSpec::along(1), ShardSpec::along(0, 2)}) {
    std::vector<at::Tensor> shards;
    for (int r = 0; r < 2; ++r) shards.push_back(shard_of(full, spec, r, 2));
    EXPECT_TRUE(at::equal(unshard(shards, spec), full));
  }
  // Stacked parts: rank r holds [block0_r; block1_r] (SwiGLU's [gate_r; up_r]).
  at::Tensor s1 = shard_of(full, ShardSpec::along(0, 2), 1, 2);
  EXPECT_TRUE(at::equal(s1, at::cat({full.slice(0, 2, 4), full.slice(0, 6, 8)}, 0)));
  EXPECT_TRUE(at::equal(shard_of(full, ShardSpec::replicate(), 1, 2), full));
  EXPECT_ANY_THROW(shard_of(full, ShardSpec::along(1), 0, 4));
}

TEST(DeterministicInit, MicrobatchDataDependsOnSeedAndIndex) {
  MicrobatchData a = microbatch_data(3, 5, 8, 2, 50);
  EXPECT_EQ(a.tokens.sizes(), (std::vector<std::int64_t>{8, 2}));
  EXPECT_EQ(a.tokens.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(a.tokens, microbatch_data(3, 5, 8, 2, 50).tokens));
  EXPECT_FALSE(at::equal(a.tokens, microbatch_data(3, 6, 8, 2, 50).tokens));
  EXPECT_FALSE(at::equal(a.tokens, microbatch_data(4, 5, 8, 2, 50).tokens));
  EXPECT_TRUE(at::equal(a.tokens.slice(0, 1, 8), a.labels.slice(0, 0, 7)));  // next token
  EXPECT_GE(a.tokens.min().item<std::int64_t>(), 0);
  EXPECT_LT(a.labels.max().item<std::int64_t>(), 50);
}

// ------------------------------------------------------------------ gather helper
TEST(GatherOutput, RuntimeFlagWinsOverConstructorFlag) {
  static_assert(!resolve_gather_output(false, std::nullopt));
  static_assert(resolve_gather_output(true, std::nullopt));
  static_assert(resolve_gather_output(false, true));
  static_assert(!resolve_gather_output(true, false));
  static_assert(resolve_gather_output(true, true));
  // The logits label follows the same resolution: the runtime value wins.
  const std::optional<std::int64_t> vocab_sharded = -1;
  EXPECT_EQ(logits_tp_shard_dim(false, std::nullopt), vocab_sharded);
  EXPECT_FALSE(logits_tp_shard_dim(true, std::nullopt).has_value());
  EXPECT_FALSE(logits_tp_shard_dim(false, true).has_value());
  EXPECT_EQ(logits_tp_shard_dim(true, false), vocab_sharded);
}

// The code-path fault wrong-gather-precedence labels by the constructor flag.
TEST(GatherOutput, WrongGatherPrecedenceFaultLabelsByTheConstructorFlag) {
  const std::optional<std::int64_t> vocab_sharded = -1;
  CodePathFaultScope fault(fault_wrong_gather_precedence);
  EXPECT_EQ(logits_tp_shard_dim(false, true), vocab_sharded);
  EXPECT_FALSE(logits_tp_shard_dim(true, false).has_value());
  EXPECT_EQ(logits_tp_shard_dim(false, std::nullopt), vocab_sharded);  // no runtime value: same
  EXPECT_FALSE(logits_tp_shard_dim(true, std::nullopt).has_value());
}

// ------------------------------------------------------------------ plain implementation
// An independent, straightforward GPT forward over the model's own (full, TP=1)
// parameter tensors, written with ATen's built-in kernels.
struct PlainGpt {
  const ModelConfig& c;
  std::map<std::string, at::Tensor> p;

  PlainGpt(const ModelConfig& config, std::vector<Parameter>& params) : c(config) {
    for (Parameter& q : params) p[q.name] = q.value;
  }
  at::Tensor norm(const std::string& n, const at::Tensor& x) const {
    if (c.norm == NormKind::layer_norm) {
      return at::layer_norm(x, {x.size(-1)}, p.at(n + ".weight"), p.at(n + ".bias"), c.norm_eps);
    }
    return x * at::rsqrt(x.pow(2).mean({-1}, true) + c.norm_eps) * p.at(n + ".weight");
  }
  // Linears without a bias (bias-linear off) pass an undefined one.
  at::Tensor bias(const std::string& n) const {
    const auto it = p.find(n + ".bias");
    return it == p.end() ? at::Tensor() : it->second;
  }
  // Megatron's rotary embedding written pair by pair: pair i (channels i and
  // i + r/2, or 2i and 2i+1 interleaved) turns by the angle pos * base^(-2i/d),
  // d = int(hn * rotary_percent), r = 2 * ceil(d/2); channels from r on pass.
  // The angle table is fp32 as in Megatron (same ATen kernels: fp32 pow and cos
  // differ between libraries by an ulp).
  at::Tensor rotate(const at::Tensor& x) const {  // [b, np, s, hn]
    const std::int64_t s = x.size(2), d = c.rotary_dim(), half = (d + 1) / 2;
    const at::Tensor inv_freq =
        at::pow(c.rotary_base, at::arange(0, d, 2, at::kFloat) / double(d)).reciprocal();
    const at::Tensor angles = at::outer(at::arange(s, at::kFloat), inv_freq);  // [s, half]
    const at::Tensor cos = angles.cos().to(at::kDouble), sin = angles.sin().to(at::kDouble);
    at::Tensor out = x.clone();
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t first = c.rotary_interleaved ? 2 * i : i;
      const std::int64_t second = c.rotary_interleaved ? 2 * i + 1 : i + half;
      const at::Tensor a = x.select(3, first), b = x.select(3, second);
      const at::Tensor cs = cos.select(1, i), sn = sin.select(1, i);
      out.select(3, first).copy_(a * cs - b * sn);
      out.select(3, second).copy_(b * cs + a * sn);
    }
    return out;
  }
  at::Tensor logits(const at::Tensor& tokens) const {
    const std::int64_t s = tokens.size(0), b = tokens.size(1), np = c.heads, hn = c.head_dim();
    const std::int64_t ng = c.num_query_groups > 0 ? c.num_query_groups : np, r = np / ng;
    at::Tensor h = at::embedding(p.at("embedding.word_embeddings.weight"), tokens);
    if (c.position_embedding == PositionEmbeddingKind::learned)
      h = h + p.at("embedding.position_embeddings.weight").slice(0, 0, s).unsqueeze(1);
    at::Tensor causal = at::ones({s, s}, at::kBool).triu(1);
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::string L = "decoder.layers." + std::to_string(l);
      at::Tensor x = norm(L + ".input_layernorm", h);
      // Per query group: its r = np / ng query heads, then its key, then its value.
      at::Tensor qkv = at::linear(x, p.at(L + ".self_attention.linear_qkv.weight"),
                                  bias(L + ".self_attention.linear_qkv"))
                           .view({s, b, ng, r + 2, hn});
      at::Tensor q = qkv.slice(3, 0, r).reshape({s, b, np, hn});
      at::Tensor k = qkv.select(3, r);  // [s, b, ng, hn]
      if (c.qk_layernorm) {             // each head over its hn channels
        q = norm(L + ".self_attention.q_layernorm", q);
        k = norm(L + ".self_attention.k_layernorm", k);
      }
      q = q.permute({1, 2, 0, 3});  // [b, np, s, hn]
      k = k.permute({1, 2, 0, 3});  // [b, ng, s, hn]
      at::Tensor v = qkv.select(3, r + 1).permute({1, 2, 0, 3});
      if (c.position_embedding == PositionEmbeddingKind::rope) {
        q = rotate(q);
        k = rotate(k);
      }
      // Head by head: query head i attends with its group i / r's key and value.
      std::vector<at::Tensor> heads;
      for (std::int64_t i = 0; i < np; ++i) {
        const at::Tensor ki = k.select(1, i / r), vi = v.select(1, i / r);  // [b, s, hn]
        at::Tensor scores = at::matmul(q.select(1, i), ki.transpose(1, 2)) / std::sqrt(double(hn));
        heads.push_back(at::matmul(at::softmax(scores.masked_fill(causal, -INFINITY), -1), vi));
      }
      at::Tensor ctx = at::stack(heads, 1).permute({2, 0, 1, 3}).reshape({s, b, np * hn});
      h = h + at::linear(ctx, p.at(L + ".self_attention.linear_proj.weight"),
                         bias(L + ".self_attention.linear_proj"));
      x = norm(L + ".pre_mlp_layernorm", h);
      at::Tensor f = at::linear(x, p.at(L + ".mlp.linear_fc1.weight"), bias(L + ".mlp.linear_fc1"));
      if (c.activation == ActivationKind::gelu) {
        f = at::gelu(f);
      } else {
        f = at::silu(f.slice(-1, 0, c.ffn_hidden)) * f.slice(-1, c.ffn_hidden, 2 * c.ffn_hidden);
      }
      h = h + at::linear(f, p.at(L + ".mlp.linear_fc2.weight"), bias(L + ".mlp.linear_fc2"));
    }
    h = norm("decoder.final_layernorm", h);
    return at::linear(
        h, p.at(c.untie_embeddings ? "output_layer.weight" : "embedding.word_embeddings.weight"));
  }
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels) const {
    return -at::log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).mean();
  }
};

std::map<std::string, at::Tensor> take_grads(std::vector<Parameter>& params) {
  std::map<std::string, at::Tensor> g;
  for (Parameter& p : params) {
    g[p.name] = p.value.grad().defined() ? p.value.grad().clone() : at::Tensor();
    if (p.value.grad().defined()) p.value.mutable_grad().zero_();
  }
  return g;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

struct Variant {
  NormKind norm;
  ActivationKind act;
  PositionEmbeddingKind position = PositionEmbeddingKind::learned;
  bool untie = true;
  bool bias = true;
  std::int64_t heads = 0;   // 0: the config's
  std::int64_t groups = 0;  // query groups; 0: one per head
  std::int64_t kv_channels = 0;
  bool qk_layernorm = false;
  double rotary_base = 10000.0;
  double rotary_percent = 1.0;
  bool rotary_interleaved = false;
  double norm_eps = 1e-5;
  void apply(ModelConfig& c) const {
    c.norm = norm;
    c.activation = act;
    c.position_embedding = position;
    c.untie_embeddings = untie;
    c.bias_linear = bias;
    if (heads > 0) c.heads = heads;
    c.num_query_groups = groups;
    c.kv_channels = kv_channels;
    c.qk_layernorm = qk_layernorm;
    c.rotary_base = rotary_base;
    c.rotary_percent = rotary_percent;
    c.rotary_interleaved = rotary_interleaved;
    c.norm_eps = norm_eps;
  }
};
std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  std::string name = std::string(to_string(v.norm)) + "_" + std::string(to_string(v.act));
  if (v.position == PositionEmbeddingKind::rope) name += "_rope";
  if (!v.untie) name += "_tied";
  if (!v.bias) name += "_nobias";
  if (v.groups > 0)
    name += "_heads" + std::to_string(v.heads) + "_groups" + std::to_string(v.groups);
  if (v.kv_channels > 0) name += "_kv" + std::to_string(v.kv_channels);
  if (v.qk_layernorm) name += "_qknorm";
  if (v.rotary_base != 10000.0) name += "_base" + std::to_string(std::lround(v.rotary_base));
  if (v.rotary_percent != 1.0) name += "_pct" + std::to_string(std::lround(100 * v.rotary_percent));
  if (v.rotary_interleaved) name += "_interleaved";
  if (v.norm_eps != 1e-5) name += "_eps";
  return name;
}
void PrintTo(const Variant& v, std::ostream* os) { *os << variant_name({v, 0}); }
// Both norms and both activations, paired (each kind once); then Megatron's
// other options (rotary positions, tied embeddings, no linear biases) together;
// then the attention options: 2 groups of 2 heads with rotary positions, a
// head dimension of 6 (kv_channels) and RMSNorm q/k norms; multi-query (one
// group of 4) with LayerNorm q/k norms. (Rotary positions with both: without
// them the key norm's bias adds the same score to every key, and its gradient
// is zero up to rounding.) Then the rotary options: base 500000, 3 of 6
// channels (an odd dim: Megatron rotates 4), interleaved, with norm epsilon
// 1e-3; and interleaved over half of 8 channels, not interleaved over all.
const Variant kVariants[] = {
    {NormKind::layer_norm, ActivationKind::gelu},
    {NormKind::rms_norm, ActivationKind::swiglu},
    {NormKind::layer_norm, ActivationKind::gelu, PositionEmbeddingKind::rope, false, false},
    {NormKind::rms_norm, ActivationKind::swiglu, PositionEmbeddingKind::rope, true, true, 4, 2, 6,
     true},
    {NormKind::layer_norm, ActivationKind::gelu, PositionEmbeddingKind::rope, true, false, 4, 1, 0,
     true},
    {NormKind::rms_norm, ActivationKind::swiglu, PositionEmbeddingKind::rope, true, true, 4, 2, 6,
     true, 500000.0, 0.5, true, 1e-3},
    {NormKind::layer_norm, ActivationKind::gelu, PositionEmbeddingKind::rope, true, true, 4, 2, 8,
     false, 10000.0, 0.5, true},
    {NormKind::rms_norm, ActivationKind::gelu, PositionEmbeddingKind::rope, true, false, 4, 4, 0,
     false, 1000.0, 0.75}};
class ModelVsPlain : public ::testing::TestWithParam<Variant> {};

TEST_P(ModelVsPlain, Fp64LogitsLossAndEveryGradientAgree) {
  auto backend = make_backend("reference");
  ModelConfig c = small_config();
  GetParam().apply(c);
  GPTModel model(c, *backend, ParallelContext::single());
  MicrobatchData data = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);

  at::Tensor logits = model.forward(data.tokens, positions(c.seq));
  at::Tensor loss = model.loss(logits, data.labels);
  loss.backward();
  model.finalize_grads();
  auto grads = take_grads(model.parameters());

  PlainGpt plain(c, model.parameters());
  at::Tensor plain_logits = plain.logits(data.tokens);
  at::Tensor plain_loss = plain.loss(plain_logits, data.labels);
  plain_loss.backward();
  auto plain_grads = take_grads(model.parameters());

  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{c.seq, c.micro_batch, c.vocab}));
  EXPECT_EQ(logits.scalar_type(), at::kDouble);
  EXPECT_LT(rel_err(logits, plain_logits), 1e-12);
  EXPECT_NEAR(loss.item<double>(), plain_loss.item<double>(), 1e-12);
  for (const auto& [name, g] : plain_grads) {
    ASSERT_TRUE(g.defined()) << name;
    ASSERT_TRUE(grads[name].defined()) << name;
    EXPECT_GT(g.abs().max().item<double>(), 0.0) << name;
    EXPECT_LT(rel_err(grads[name], g), 1e-10) << name;
  }
  // Every parameter is named canonically and appears once.
  EXPECT_EQ(grads.size(), model.parameters().size());
  EXPECT_EQ(grads.count("decoder.layers.2.mlp.linear_fc2.bias"), GetParam().bias ? 1u : 0u);
  EXPECT_EQ(grads.count("embedding.word_embeddings.weight"), 1u);
  EXPECT_EQ(grads.count("output_layer.weight"), GetParam().untie ? 1u : 0u);
  EXPECT_EQ(grads.count("embedding.position_embeddings.weight"),
            GetParam().position == PositionEmbeddingKind::learned ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(NormAndActivation, ModelVsPlain, ::testing::ValuesIn(kVariants),
                         variant_name);

// ------------------------------------------------------------------ finite differences
class ModelFiniteDifferences : public ::testing::TestWithParam<Variant> {};

TEST_P(ModelFiniteDifferences, EveryParameterOfATinyModel) {
  auto backend = make_backend("reference");
  ModelConfig c = tiny_config();
  GetParam().apply(c);
  GPTModel model(c, *backend, ParallelContext::single());
  MicrobatchData data = microbatch_data(c.seed, 1, c.seq, c.micro_batch, c.vocab);
  std::vector<at::Tensor> leaves;
  for (Parameter& p : model.parameters()) leaves.push_back(p.value);
  EXPECT_TRUE(check_gradients(
      [&] { return model.loss(model.forward(data.tokens, positions(c.seq)), data.labels); },
      leaves));
}

TEST_P(ModelFiniteDifferences, OneTransformerLayerInputAndParameters) {
  auto backend = make_backend("reference");
  ModelConfig c = tiny_config();
  GetParam().apply(c);
  ParameterFactory factory(c, 0, 1);
  TransformerLayer layer("decoder.layers.0", &c, factory);
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  at::Tensor x = testing::random_leaf({c.seq, c.micro_batch, c.hidden}, 5);
  std::vector<at::Tensor> leaves{x};
  for (Parameter& p : factory.parameters()) leaves.push_back(p.value);
  // Norms (two, four with the q/k norms): weight (+ bias for layernorm) each;
  // four linears: weight (+ bias).
  const std::size_t norms = c.qk_layernorm ? 4 : 2;
  EXPECT_EQ(factory.parameters().size(),
            norms * (c.norm == NormKind::layer_norm ? 2u : 1u) + (c.bias_linear ? 8u : 4u));
  // Global positions of a CP rank's two chunks (not contiguous), for rope.
  const at::Tensor pos = at::tensor({1, 2, 9, 10}, at::kLong).slice(0, 0, c.seq);
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(layer.forward(rt, x, pos)); }, leaves));
}

INSTANTIATE_TEST_SUITE_P(NormAndActivation, ModelFiniteDifferences, ::testing::ValuesIn(kVariants),
                         variant_name);

// ------------------------------------------------------------------ observation sites
struct Seen {
  std::string owner;
  std::string name;
  SourceKind kind;
  OptionalDim tp, seq, batch;
  std::vector<std::int64_t> shape;
  at::Tensor tensor;
};

struct Recorder {
  std::vector<Seen> seen;
  TensorObservationCallback callback() {
    return [this](const ObservationOwner& owner, std::string_view name, SourceKind kind,
                  const at::Tensor& t, OptionalDim tp, OptionalDim seq, OptionalDim batch) {
      seen.push_back(Seen{owner.canonical_name(), std::string(name), kind, tp, seq, batch,
                          t.sizes().vec(), t.detach().clone()});
    };
  }
};

TEST(ModelObservationSites, SevenFieldsPerSiteOncePerMicrobatchInOrder) {
  auto backend = make_backend("reference");
  ModelConfig c = small_config();
  c.layers = 2;
  GPTModel model(c, *backend, ParallelContext::single());
  Recorder rec;
  {
    auto scope = capture_tensor_observations(rec.callback(), KindSet::all());
    for (int mb = 0; mb < 2; ++mb) {
      MicrobatchData d = microbatch_data(c.seed, mb, c.seq, c.micro_batch, c.vocab);
      model.loss(model.forward(d.tokens, positions(c.seq)), d.labels).backward();
    }
  }
  const std::vector<std::int64_t> hidden_shape{c.seq, c.micro_batch, c.hidden};
  std::vector<
      std::tuple<std::string, std::string, SourceKind, OptionalDim, std::vector<std::int64_t>>>
      expect;
  for (int l = 0; l < 2; ++l) {
    const std::string L = "decoder.layers." + std::to_string(l);
    expect.emplace_back(L + ".input_layernorm", "layernorm_output", SourceKind::layernorm_output,
                        std::nullopt, hidden_shape);
    expect.emplace_back(L + ".self_attention", "attention_context", SourceKind::attention_context,
                        -1, hidden_shape);
    expect.emplace_back(L + ".pre_mlp_layernorm", "layernorm_output", SourceKind::layernorm_output,
                        std::nullopt, hidden_shape);
    expect.emplace_back(L + ".mlp", "mlp_output", SourceKind::mlp_output, std::nullopt,
                        hidden_shape);
    expect.emplace_back(L, "residual_accumulator", SourceKind::residual_accumulator, std::nullopt,
                        hidden_shape);
    expect.emplace_back(L, "residual_contribution", SourceKind::residual_contribution, std::nullopt,
                        hidden_shape);
  }
  expect.emplace_back("output_layer", "output_logits", SourceKind::output_logits, -1,
                      std::vector<std::int64_t>{c.seq, c.micro_batch, c.vocab});
  ASSERT_EQ(rec.seen.size(), 2 * expect.size());  // backward adds nothing
  for (size_t i = 0; i < rec.seen.size(); ++i) {
    const Seen& s = rec.seen[i];
    const auto& [owner, name, kind, tp, shape] = expect[i % expect.size()];
    EXPECT_EQ(s.owner, owner) << i;
    EXPECT_EQ(s.name, name) << i;
    EXPECT_EQ(s.kind, kind) << i;
    EXPECT_EQ(s.tp, tp) << i;
    EXPECT_EQ(s.seq, OptionalDim(0)) << i;
    EXPECT_EQ(s.batch, OptionalDim(1)) << i;
    EXPECT_EQ(s.shape, shape) << i;
  }
  // The residual stream is consistent: accumulator(l+1) = accumulator(l) + contribution(l).
  EXPECT_TRUE(
      at::allclose(rec.seen[10].tensor, rec.seen[4].tensor + rec.seen[5].tensor, 1e-14, 1e-14));
}

TEST(ModelObservationSites, RuntimeGatherOverrideLabelsTheLogits) {
  auto backend = make_backend("reference");
  ModelConfig c = tiny_config();
  c.gather_output = true;
  GPTModel model(c, *backend, ParallelContext::single());
  Recorder rec;
  MicrobatchData d = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  {
    auto scope = capture_tensor_observations(rec.callback(), KindSet{SourceKind::output_logits});
    model.forward(d.tokens, positions(c.seq));         // constructor: gathered
    model.forward(d.tokens, positions(c.seq), false);  // runtime wins: not gathered
    model.forward(d.tokens, positions(c.seq), true);
  }
  ASSERT_EQ(rec.seen.size(), 3u);
  EXPECT_EQ(rec.seen[0].tp, std::nullopt);
  EXPECT_EQ(rec.seen[1].tp, OptionalDim(-1));
  EXPECT_EQ(rec.seen[2].tp, std::nullopt);
  EXPECT_EQ(rec.seen[0].owner, "output_layer");
}

TEST(ModelObservationSites, SuspendedForwardIsSilentAndANoGradForwardIsObserved) {
  auto backend = make_backend("reference");
  ModelConfig c = tiny_config();
  GPTModel model(c, *backend, ParallelContext::single());
  MicrobatchData d = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  Recorder rec;
  auto scope = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    auto quiet = suspend_tensor_observations();
    model.forward(d.tokens, positions(c.seq));
  }
  EXPECT_TRUE(rec.seen.empty());
  {
    at::NoGradGuard no_grad;  // grad mode is not consulted
    model.forward(d.tokens, positions(c.seq));
  }
  EXPECT_EQ(rec.seen.size(), 6u * c.layers + 1);
}

// ------------------------------------------------------------------ dtypes, dropout
TEST(ModelDtypes, Bf16WithFp32ResidualKeepsTheResidualStreamFp32) {
  auto backend = make_backend("reference");
  ModelConfig c = small_config();
  c.dtype = ModelDType::bf16;
  c.fp32_residual = true;
  c.init_std = 0.02;
  GPTModel model(c, *backend, ParallelContext::single());
  Recorder rec;
  MicrobatchData d = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  at::Tensor logits;
  {
    auto scope = capture_tensor_observations(rec.callback(), KindSet::all());
    logits = model.forward(d.tokens, positions(c.seq));
  }
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  at::Tensor loss = model.loss(logits, d.labels);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  for (Parameter& p : model.parameters()) {
    ASSERT_TRUE(p.value.grad().defined()) << p.name;
    EXPECT_EQ(p.value.grad().scalar_type(), at::kBFloat16) << p.name;
  }
  for (const Seen& s : rec.seen) {
    if (s.kind == SourceKind::residual_accumulator || s.kind == SourceKind::residual_contribution) {
      EXPECT_EQ(s.tensor.scalar_type(), at::kFloat) << s.owner;
    } else if (s.kind == SourceKind::attention_context || s.kind == SourceKind::mlp_output) {
      EXPECT_EQ(s.tensor.scalar_type(), at::kBFloat16) << s.owner;
    }
  }
  // fp32 model against bf16: close (bf16 rounding).
  ModelConfig c32 = c;
  c32.dtype = ModelDType::fp32;
  GPTModel m32(c32, *backend, ParallelContext::single());
  EXPECT_NEAR(m32.loss(m32.forward(d.tokens, positions(c.seq)), d.labels).item<double>(),
              loss.item<double>(), 0.05);
}

TEST(ModelDropout, MasksAreReproducibleFromTheTrackerState) {
  auto backend = make_backend("reference");
  ModelConfig c = small_config();
  c.dropout = 0.2;
  GPTModel model(c, *backend, ParallelContext::single());
  MicrobatchData d = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  RngSnapshot start = model.rng_tracker().snapshot();
  at::Tensor a = model.forward(d.tokens, positions(c.seq));
  at::Tensor b = model.forward(d.tokens, positions(c.seq));
  EXPECT_FALSE(at::equal(a, b));
  model.rng_tracker().restore(start);
  EXPECT_TRUE(at::equal(a, model.forward(d.tokens, positions(c.seq))));
  model.set_training(false);
  at::Tensor e1 = model.forward(d.tokens, positions(c.seq));
  EXPECT_TRUE(at::equal(e1, model.forward(d.tokens, positions(c.seq))));
  // A second model with the same seed draws the same masks.
  GPTModel twin(c, *backend, ParallelContext::single());
  model.rng_tracker().restore(start);
  model.set_training(true);
  EXPECT_TRUE(at::equal(twin.forward(d.tokens, positions(c.seq)),
                        model.forward(d.tokens, positions(c.seq))));
}

}  // namespace
}  // namespace parity

namespace parity {
namespace {

// Device placement: parameters, positions and inputs are made on the
// CPU from (seed, name) / (seed, microbatch) and placed on the backend's device.
TEST(ModelDevicePlacement, ParametersPositionsAndInputsLiveOnTheBackendsDevice) {
  auto backend = make_backend("reference");
  const ModelConfig c = tiny_config();
  GPTModel model(c, *backend, ParallelContext::single());
  EXPECT_EQ(model.device(), backend->device());
  ASSERT_FALSE(model.parameters().empty());
  for (const Parameter& p : model.parameters()) {
    EXPECT_EQ(p.value.device(), backend->device()) << p.name;
    EXPECT_TRUE(p.value.requires_grad()) << p.name;
    EXPECT_TRUE(p.value.is_leaf()) << p.name;
  }
  // The values are the CPU ones: (seed, name) alone decides them.
  const Parameter& w = model.parameters().front();
  const at::Tensor cpu = full_parameter(c.seed, w.name, w.value.sizes().vec(), InitKind::normal,
                                        c.init_std, to_scalar_type(c.dtype));
  EXPECT_TRUE(at::equal(w.value.detach().cpu(), cpu)) << w.name;
  EXPECT_EQ(model.local_positions().device(), backend->device());
  const MicrobatchData d = microbatch_data(c.seed, 0, c.seq, c.micro_batch, c.vocab);
  EXPECT_EQ(model.slice_sequence(d.tokens).device(), backend->device());
}

}  // namespace
}  // namespace parity
