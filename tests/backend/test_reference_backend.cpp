// The reference backend's ops: forward values against ATen's own kernels, fp64
// gradients against finite differences, the RNG tracker, the registry.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "harness/backend/registry.h"
#include "harness/backend/stable_hash.h"
#include "tests/backend/gradcheck.h"

namespace parity {
namespace {

using testing::check_gradients;
using testing::random_leaf;
using testing::weighted_sum;

class ReferenceOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend = make_backend("reference");
  const Backend& b() const { return *backend; }
};

TEST(BackendRegistry, ReferenceIsRegistered) {
  auto names = registered_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  auto backend = make_backend("reference");
  EXPECT_EQ(backend->name(), "reference");
  EXPECT_EQ(backend->transport_name(), "gloo");
}

TEST(BackendRegistry, UnknownNameListsKnownBackends) {
  try {
    (void)make_backend("nope");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
  }
}

TEST(StableHash, IsFnv1aAndSeparatesNames) {
  // FNV-1a 64 of "a" (published test vector).
  static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  static_assert(fnv1a64("") == kFnvOffset);
  EXPECT_NE(seed_for(1, "w"), seed_for(2, "w"));
  EXPECT_NE(seed_for(1, "w"), seed_for(1, "v"));
  EXPECT_NE(seed_for(1, "w", 0), seed_for(1, "w", 1));
}

TEST_F(ReferenceOps, LinearMatchesAtenAndGradients) {
  at::Tensor x = random_leaf({3, 2, 5}, 1), w = random_leaf({4, 5}, 2), bias = random_leaf({4}, 3);
  EXPECT_TRUE(at::allclose(b().linear(x, w, bias), at::linear(x, w, bias), 1e-14, 1e-14));
  EXPECT_TRUE(at::allclose(b().linear(x, w, at::Tensor()), at::linear(x, w), 1e-14, 1e-14));
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().linear(x, w, bias)); }, {x, w, bias}));
}

TEST_F(ReferenceOps, LayerNormMatchesAtenAndGradients) {
  at::Tensor x = random_leaf({3, 2, 6}, 4, 2.0, 0.5), w = random_leaf({6}, 5, 0.1, 1.0),
             bias = random_leaf({6}, 6, 0.1);
  EXPECT_TRUE(at::allclose(b().layer_norm(x, w, bias, 1e-5), at::layer_norm(x, {6}, w, bias, 1e-5),
                           1e-12, 1e-12));
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().layer_norm(x, w, bias, 1e-5)); },
                              {x, w, bias}));
}

TEST_F(ReferenceOps, RmsNormValuesAndGradients) {
  at::Tensor x = random_leaf({3, 2, 6}, 7, 2.0, 0.5), w = random_leaf({6}, 8, 0.1, 1.0);
  at::Tensor expect = x / at::sqrt((x * x).mean({-1}, true) + 1e-5) * w;
  EXPECT_TRUE(at::allclose(b().rms_norm(x, w, 1e-5), expect, 1e-13, 1e-13));
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().rms_norm(x, w, 1e-5)); }, {x, w}));
}

TEST_F(ReferenceOps, NormStatisticsInFp32ForBf16AndResultInWeightDtype) {
  at::Tensor x = at::randn({4, 8}).to(at::kBFloat16);
  at::Tensor w = at::ones({8}, at::kBFloat16), bias = at::zeros({8}, at::kBFloat16);
  at::Tensor y = b().layer_norm(x, w, bias, 1e-5);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(y.to(at::kFloat), at::layer_norm(x.to(at::kFloat), {8}, {}, {}, 1e-5),
                           1e-2, 1e-2));
  // fp32 residual stream: fp32 input, bf16 weights -> bf16 output.
  EXPECT_EQ(b().rms_norm(x.to(at::kFloat), w, 1e-5).scalar_type(), at::kBFloat16);
}

TEST_F(ReferenceOps, GeluMatchesAtenAndGradients) {
  at::Tensor x = random_leaf({4, 3, 5}, 9, 2.0);
  EXPECT_TRUE(at::allclose(b().gelu(x), at::gelu(x), 1e-14, 1e-14));
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().gelu(x)); }, {x}));
}

TEST_F(ReferenceOps, SwigluValuesAndGradients) {
  at::Tensor x = random_leaf({4, 3, 6}, 10, 2.0);
  at::Tensor gate = x.slice(-1, 0, 3), up = x.slice(-1, 3, 6);
  EXPECT_TRUE(at::allclose(b().swiglu(x), gate * at::sigmoid(gate) * up, 1e-14, 1e-14));
  EXPECT_EQ(b().swiglu(x).size(-1), 3);
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().swiglu(x)); }, {x}));
}

TEST_F(ReferenceOps, EmbeddingLookupAndGradients) {
  at::Tensor w = random_leaf({7, 4}, 11);
  at::Tensor ids = at::tensor({3, 0, 6, 3, 1, 3}, at::kLong).view({3, 2});
  at::Tensor y = b().embedding(ids, w);
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{3, 2, 4}));
  EXPECT_TRUE(at::equal(y, at::embedding(w, ids)));
  EXPECT_TRUE(check_gradients([&] { return weighted_sum(b().embedding(ids, w)); }, {w}));
}

// Straightforward attention on [s, b, np, hn] with an upper-triangular mask.
at::Tensor plain_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale) {
  const auto s = q.size(0), bs = q.size(1), np = q.size(2), hn = q.size(3);
  at::Tensor out = at::empty({s, bs, np, hn}, q.options());
  for (std::int64_t bi = 0; bi < bs; ++bi) {
    for (std::int64_t h = 0; h < np; ++h) {
      at::Tensor qi = q.select(1, bi).select(1, h), ki = k.select(1, bi).select(1, h),
                 vi = v.select(1, bi).select(1, h);  // [s, hn]
      at::Tensor scores = at::mm(qi, ki.t()) * scale;
      at::Tensor mask = at::ones({s, s}, at::kBool).triu(1);
      scores = scores.masked_fill(mask, -INFINITY);
      out.select(1, bi).select(1, h).copy_(at::mm(at::softmax(scores, -1), vi));
    }
  }
  return out.reshape({s, bs, np * hn});
}

TEST_F(ReferenceOps, CausalAttentionMatchesPlainLoops) {
  at::Tensor q = random_leaf({6, 2, 3, 4}, 12), k = random_leaf({6, 2, 3, 4}, 13),
             v = random_leaf({6, 2, 3, 4}, 14);
  at::Tensor pos = at::arange(6, at::kLong);
  at::NoGradGuard g;
  EXPECT_TRUE(at::allclose(b().causal_attention(q, k, v, pos, pos, {}, {}, 0.5),
                           plain_causal_attention(q, k, v, 0.5), 1e-13, 1e-13));
}

TEST_F(ReferenceOps, CausalAttentionMasksOnGlobalPositions) {
  // A CP rank's queries are chunks {0, 3} of 4 (Megatron's load-balanced pair)
  // and it sees every key: its rows equal those rows of the full attention.
  const std::int64_t s = 8;
  at::Tensor q = random_leaf({s, 2, 2, 4}, 15), k = random_leaf({s, 2, 2, 4}, 16),
             v = random_leaf({s, 2, 2, 4}, 17);
  at::NoGradGuard g;
  at::Tensor full = plain_causal_attention(q, k, v, 0.5);
  at::Tensor qpos = at::tensor({0, 1, 6, 7}, at::kLong);
  at::Tensor local = b().causal_attention(q.index_select(0, qpos), k, v, qpos,
                                          at::arange(s, at::kLong), {}, {}, 0.5);
  EXPECT_TRUE(at::allclose(local, full.index_select(0, qpos), 1e-13, 1e-13));
  // Keys in a permuted order with their positions: the same result.
  at::Tensor perm = at::tensor({5, 2, 7, 0, 1, 6, 3, 4}, at::kLong);
  at::Tensor permuted = b().causal_attention(q.index_select(0, qpos), k.index_select(0, perm),
                                             v.index_select(0, perm), qpos, perm, {}, {}, 0.5);
  EXPECT_TRUE(at::allclose(permuted, full.index_select(0, qpos), 1e-13, 1e-13));
}

TEST_F(ReferenceOps, CausalAttentionMasksPerDocument) {
  // Packed documents of 3, 2 and 3 positions: each query's rows equal the
  // attention of its document alone, whatever order and CP chunks the keys come in.
  const std::int64_t s = 8;
  at::Tensor q = random_leaf({s, 1, 2, 4}, 24), k = random_leaf({s, 1, 2, 4}, 25),
             v = random_leaf({s, 1, 2, 4}, 26);
  at::NoGradGuard g;
  const at::Tensor docs = at::tensor({0, 0, 0, 1, 1, 2, 2, 2}, at::kLong);
  const at::Tensor pos = at::arange(s, at::kLong);
  at::Tensor expected = at::empty({s, 1, 8}, q.options());
  for (const auto& [start, n] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {3, 2}, {5, 3}})
    expected.narrow(0, start, n)
        .copy_(plain_causal_attention(q.narrow(0, start, n), k.narrow(0, start, n),
                                      v.narrow(0, start, n), 0.5));
  EXPECT_TRUE(at::allclose(b().causal_attention(q, k, v, pos, pos, docs, docs, 0.5), expected,
                           1e-13, 1e-13));
  const at::Tensor perm = at::tensor({5, 2, 7, 0, 1, 6, 3, 4}, at::kLong);
  const at::Tensor qpos = at::tensor({1, 4, 6}, at::kLong);
  EXPECT_TRUE(at::allclose(
      b().causal_attention(q.index_select(0, qpos), k.index_select(0, perm),
                           v.index_select(0, perm), qpos, perm, docs.index_select(0, qpos),
                           docs.index_select(0, perm), 0.5),
      expected.index_select(0, qpos), 1e-13, 1e-13));
  // One document: the plain causal attention (the mask adds nothing).
  const at::Tensor one = at::zeros({s}, at::kLong);
  EXPECT_TRUE(at::allclose(b().causal_attention(q, k, v, pos, pos, one, one, 0.5),
                           plain_causal_attention(q, k, v, 0.5), 1e-13, 1e-13));
}

TEST_F(ReferenceOps, CausalAttentionGradients) {
  at::Tensor q = random_leaf({4, 2, 2, 3}, 18), k = random_leaf({4, 2, 2, 3}, 19),
             v = random_leaf({4, 2, 2, 3}, 20);
  at::Tensor pos = at::arange(4, at::kLong);
  EXPECT_TRUE(check_gradients(
      [&] { return weighted_sum(b().causal_attention(q, k, v, pos, pos, {}, {}, 0.7)); },
      {q, k, v}));
}

TEST_F(ReferenceOps, BiasDropoutAddWithoutDropoutIsResidualPlusXPlusBias) {
  at::Tensor x = random_leaf({3, 2, 4}, 21), bias = random_leaf({4}, 22),
             r = random_leaf({3, 2, 4}, 23);
  auto rng = b().make_rng_tracker();
  at::Generator gen = rng->generator(RngStream::data_parallel);
  EXPECT_TRUE(
      at::allclose(b().bias_dropout_add(x, bias, r, 0.0, true, gen), r + x + bias, 1e-15, 1e-15));
  EXPECT_TRUE(
      at::allclose(b().bias_dropout_add(x, bias, r, 0.5, false, gen), r + x + bias, 1e-15, 1e-15));
  EXPECT_TRUE(check_gradients(
      [&] { return weighted_sum(b().bias_dropout_add(x, bias, r, 0.0, true, gen)); },
      {x, bias, r}));
}

TEST_F(ReferenceOps, BiasDropoutAddDropoutIsReproducibleFromTheGeneratorState) {
  at::Tensor x = random_leaf({64, 2, 16}, 24), bias = random_leaf({16}, 25),
             r = random_leaf({64, 2, 16}, 26);
  auto rng = b().make_rng_tracker();
  rng->seed(42, 0);
  RngSnapshot before = rng->snapshot();
  at::Generator gen = rng->generator(RngStream::model_parallel);
  at::Tensor first = b().bias_dropout_add(x, bias, r, 0.25, true, gen);
  at::Tensor second = b().bias_dropout_add(x, bias, r, 0.25, true, gen);
  EXPECT_FALSE(at::equal(first, second));  // the stream advanced
  rng->restore(before);
  EXPECT_TRUE(at::equal(first, b().bias_dropout_add(x, bias, r, 0.25, true, gen)));
  // Dropped elements are exactly the residual; kept ones scaled by 1/(1-p).
  {
    at::NoGradGuard g;
    at::Tensor dropped = (first - r).abs() < 1e-300;
    double frac = dropped.to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(frac, 0.25, 0.05);
    at::Tensor kept = first.masked_select(dropped.logical_not());
    at::Tensor expect = (r + (x + bias) / 0.75).masked_select(dropped.logical_not());
    EXPECT_TRUE(at::allclose(kept, expect, 1e-14, 1e-14));
  }
  // Gradients with a fixed mask: restore the state before each evaluation.
  at::Tensor xs = random_leaf({4, 2, 3}, 27), bs = random_leaf({3}, 28),
             rs = random_leaf({4, 2, 3}, 29);
  EXPECT_TRUE(check_gradients(
      [&] {
        rng->restore(before);
        return weighted_sum(b().bias_dropout_add(xs, bs, rs, 0.3, true, gen));
      },
      {xs, bs, rs}));
}

TEST_F(ReferenceOps, BiasDropoutAddUpcastsToTheResidualDtype) {
  at::Tensor x = at::randn({3, 2, 4}).to(at::kBFloat16), bias = at::randn({4}).to(at::kBFloat16);
  at::Tensor r = at::randn({3, 2, 4});
  auto rng = b().make_rng_tracker();
  at::Generator gen = rng->generator(RngStream::data_parallel);
  at::Tensor y = b().bias_dropout_add(x, bias, r, 0.0, true, gen);
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(y, r + (x.to(at::kFloat) + bias.to(at::kFloat))));
}

TEST_F(ReferenceOps, RngTrackerStreams) {
  auto a = b().make_rng_tracker(), c = b().make_rng_tracker();
  a->seed(5, 0);
  c->seed(5, 1);
  auto draw = [](RngTracker& t, RngStream s) {
    at::Generator g = t.generator(s);
    return at::empty({16}).uniform_(0, 1, g);
  };
  // data_parallel: the same on every TP rank; model_parallel: distinct.
  EXPECT_TRUE(at::equal(draw(*a, RngStream::data_parallel), draw(*c, RngStream::data_parallel)));
  EXPECT_FALSE(at::equal(draw(*a, RngStream::model_parallel), draw(*c, RngStream::model_parallel)));
  EXPECT_FALSE(at::equal(draw(*a, RngStream::data_parallel), draw(*a, RngStream::model_parallel)));
  // Snapshot restores both streams.
  RngSnapshot s = a->snapshot();
  at::Tensor d1 = draw(*a, RngStream::data_parallel), m1 = draw(*a, RngStream::model_parallel);
  a->restore(s);
  EXPECT_TRUE(at::equal(d1, draw(*a, RngStream::data_parallel)));
  EXPECT_TRUE(at::equal(m1, draw(*a, RngStream::model_parallel)));
  EXPECT_THROW(a->restore(RngSnapshot{}), std::invalid_argument);
}

TEST_F(ReferenceOps, DropoutOnlyWhenTraining) {
  at::Tensor x = at::randn({32, 8});
  auto rng = b().make_rng_tracker();
  at::Generator gen = rng->generator(RngStream::data_parallel);
  EXPECT_TRUE(at::equal(b().dropout(x, 0.5, false, gen), x));
  EXPECT_TRUE(at::equal(b().dropout(x, 0.0, true, gen), x));
  at::Tensor y = b().dropout(x, 0.5, true, gen);
  EXPECT_TRUE(at::allclose(y.masked_select(y != 0), (x * 2).masked_select(y != 0)));
}

}  // namespace
}  // namespace parity
