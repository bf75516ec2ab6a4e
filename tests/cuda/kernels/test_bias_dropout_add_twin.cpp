// The bias-dropout-add host twins (cuda/kernels/bias_dropout_add_twin.h) and
// the Philox4x32-10 they share with the kernels: known-answer vectors, the mask
// redrawn from the same (seed, offset) by the backward and by a recomputation,
// the keep rate, the scale, p = 0, NaN, and the arithmetic against ATen's
// composition (harness/backend/plain_ops.cpp's) with the same mask.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/kernels/bias_dropout_add_twin.h"
#include "cuda/kernels/philox.h"
#include "tests/cuda/kernels/kernel_test_data.h"

namespace parity::kernels {
namespace {

using testing::random_values;

// Random123's known-answer vectors for philox4x32_10 (kat_vectors).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    Philox4x32 counter;
    std::uint32_t k0, k1;
    Philox4x32 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 got = philox4x32_10(k.counter, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
}

// Twins over at::Tensor (contiguous, of one dtype); bias may be undefined.
at::Tensor forward(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& residual, float p,
                   DropoutKey key) {
  at::Tensor y = at::empty_like(x);
  const std::int64_t n = x.numel(), cols = x.dim() ? x.size(-1) : 1;
  const bool b = bias.defined();
  switch (x.scalar_type()) {
    case at::kDouble:
      bias_dropout_add_twin(x.data_ptr<double>(), b ? bias.data_ptr<double>() : nullptr,
                            residual.data_ptr<double>(), y.data_ptr<double>(), n, cols, p, key);
      break;
    case at::kFloat:
      bias_dropout_add_twin(x.data_ptr<float>(), b ? bias.data_ptr<float>() : nullptr,
                            residual.data_ptr<float>(), y.data_ptr<float>(), n, cols, p, key);
      break;
    default: {
      const auto bf = [](const at::Tensor& t) { return reinterpret_cast<Bf16*>(t.data_ptr()); };
      bias_dropout_add_twin(bf(x), b ? bf(bias) : nullptr, bf(residual), bf(y), n, cols, p, key);
    }
  }
  return y;
}

at::Tensor backward(const at::Tensor& grad, float p, DropoutKey key) {
  at::Tensor g = at::empty_like(grad);
  const std::int64_t n = grad.numel();
  switch (grad.scalar_type()) {
    case at::kDouble:
      bias_dropout_add_backward_twin(grad.data_ptr<double>(), g.data_ptr<double>(), n, p, key);
      break;
    case at::kFloat:
      bias_dropout_add_backward_twin(grad.data_ptr<float>(), g.data_ptr<float>(), n, p, key);
      break;
    default:
      bias_dropout_add_backward_twin(reinterpret_cast<const Bf16*>(grad.data_ptr()),
                                     reinterpret_cast<Bf16*>(g.data_ptr()), n, p, key);
  }
  return g;
}

// The keep mask drawn directly from philox.h, as a bool tensor of n.
at::Tensor keep_mask(std::int64_t n, float p, DropoutKey key) {
  at::Tensor m = at::empty({n}, at::TensorOptions().dtype(at::kBool));
  bool* k = m.data_ptr<bool>();
  for (std::int64_t i = 0; i < n; ++i) k[i] = dropout_keeps(key, i, p);
  return m;
}

class BiasDropoutAddTwin : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  at::ScalarType dtype() const { return GetParam(); }
  at::ScalarType acc() const { return dtype() == at::kDouble ? at::kDouble : at::kFloat; }
  at::Tensor values(std::int64_t rows, std::int64_t cols, std::uint64_t seed) const {
    return random_values(rows * cols, seed, false).to(dtype()).reshape({rows, cols});
  }
};

// Bits equal, NaN matching NaN (payloads may differ).
void expect_same_values(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::equal(got.isnan(), want.isnan())) << what << ": NaN places differ";
  const at::Tensor nan = want.isnan();
  EXPECT_TRUE(at::equal(got.masked_fill(nan, 0), want.masked_fill(nan, 0))) << what;
}

TEST_P(BiasDropoutAddTwin, MatchesAtenCompositionWithTheSameMask) {
  const DropoutKey key{0x1234567890abcdefull, 77};
  for (const std::int64_t rows : {0, 1, 3, 129})
    for (const std::int64_t cols : {1, 31, 33, 1000})
      for (const float p : {0.0f, 0.1f, 0.5f})
        for (const bool with_bias : {false, true}) {
          const at::Tensor x = values(rows, cols, 1), r = values(rows, cols, 2);
          const at::Tensor bias = with_bias ? values(1, cols, 3).reshape({cols}) : at::Tensor();
          const at::Tensor y = forward(x, bias, r, p, key);
          // In the accumulation dtype, rounded once: y = r + (x + b) * (keep ? scale : 0).
          const double scale = p > 0 ? 1.0 / (1.0 - static_cast<double>(p)) : 1.0;
          const at::Tensor scale_t = at::full({}, scale, at::TensorOptions().dtype(acc()));
          at::Tensor v = x.to(acc());
          if (with_bias) v = v + bias.to(acc());
          const at::Tensor mask = keep_mask(rows * cols, p, key).reshape({rows, cols});
          const at::Tensor factor = at::where(mask, scale_t, at::zeros({}, scale_t.options()));
          const at::Tensor want = (r.to(acc()) + v * factor).to(dtype());
          expect_same_values(y, want,
                             "rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                                 " p " + std::to_string(p));
        }
}

TEST_P(BiasDropoutAddTwin, ZeroRateIsResidualPlusBiasedInput) {
  const at::Tensor x = values(17, 33, 4), r = values(17, 33, 5), b = values(1, 33, 6).reshape({33});
  const at::Tensor y = forward(x, b, r, 0.0f, DropoutKey{9, 9});
  expect_same_values(y, (r.to(acc()) + (x.to(acc()) + b.to(acc()))).to(dtype()), "p = 0");
  expect_same_values(backward(x, 0.0f, DropoutKey{9, 9}), x, "backward p = 0");
}

// x = 1, no bias, residual = 0: y is the scaled mask itself.
TEST_P(BiasDropoutAddTwin, BackwardAndRecomputationRedrawTheForwardMask) {
  const std::int64_t n = 4099;  // not a multiple of the 4 words of a draw
  const float p = 0.25f;
  const DropoutKey key{2024, 1000};
  const at::Tensor ones = at::ones({n}, at::TensorOptions().dtype(dtype()));
  const at::Tensor zeros = at::zeros({n}, ones.options());
  const at::Tensor y = forward(ones, at::Tensor(), zeros, p, key);
  const at::Tensor again = forward(ones, at::Tensor(), zeros, p, key);
  EXPECT_TRUE(at::equal(y, again)) << "a recomputation under the same key";
  const at::Tensor grad = values(1, n, 8).reshape({n});
  const at::Tensor dx = backward(grad, p, key);
  // Backward = grad * mask * scale in the accumulation dtype, with the forward's mask.
  const at::Tensor kept = y != 0;
  const at::Tensor scale_acc = at::full({}, 1.0 / 0.75, at::TensorOptions().dtype(acc()));
  const at::Tensor factor = at::where(kept, scale_acc, at::zeros({}, scale_acc.options()));
  expect_same_values(dx, (grad.to(acc()) * factor).to(dtype()), "backward");
  EXPECT_TRUE(at::equal(kept, keep_mask(n, p, key)));
  const double scale = y.masked_select(kept).to(at::kDouble).max().item<double>();
  EXPECT_EQ(y.masked_select(kept).to(at::kDouble).min().item<double>(), scale);
  EXPECT_EQ(scale, scale_acc.to(dtype()).item<double>());
  // Another offset draws another mask (equal with probability ~ 2^-4099).
  EXPECT_FALSE(at::equal(kept, forward(ones, at::Tensor(), zeros, p, DropoutKey{2024, 1001}) != 0));
}

// Under a CUDA graph capture the key points at the generator's seed and
// outer offset (updated by each replay) and carries the launch's offset within
// the graph: it draws what the value key (seed, outer + inner) draws.
TEST_P(BiasDropoutAddTwin, ACapturedKeyDrawsWhatTheValueKeyAtTheReplaysStateDraws) {
  const std::int64_t n = 1031;
  const float p = 0.4f;
  const at::Tensor ones = at::ones({n}, at::TensorOptions().dtype(dtype()));
  const at::Tensor zeros = at::zeros({n}, ones.options());
  std::int64_t seed = 77, outer = 5000;
  DropoutKey captured{0, 12, &seed, &outer};
  const at::Tensor first = forward(ones, at::Tensor(), zeros, p, captured);
  EXPECT_TRUE(at::equal(first, forward(ones, at::Tensor(), zeros, p, DropoutKey{77, 5012})));
  EXPECT_TRUE(at::equal(backward(ones, p, captured), backward(ones, p, DropoutKey{77, 5012})));
  outer = 6000;  // the next replay: the generator moved on
  EXPECT_TRUE(at::equal(forward(ones, at::Tensor(), zeros, p, captured),
                        forward(ones, at::Tensor(), zeros, p, DropoutKey{77, 6012})));
  EXPECT_FALSE(at::equal(first, forward(ones, at::Tensor(), zeros, p, captured)));
}

TEST_P(BiasDropoutAddTwin, KeepRateIsOneMinusP) {
  const std::int64_t n = std::int64_t{1} << 20;
  const at::Tensor ones = at::ones({n}, at::TensorOptions().dtype(dtype()));
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const at::Tensor y = forward(ones, at::Tensor(), at::zeros_like(ones), p, DropoutKey{5, 3});
    const double kept = (y != 0).sum().item<double>();
    // Binomial(n, 1 - p): 5 standard deviations, deterministic for this key.
    const double sigma = std::sqrt(n * static_cast<double>(p) * (1.0 - p));
    EXPECT_NEAR(kept, n * (1.0 - p), 5 * sigma) << "p " << p;
  }
}

TEST_P(BiasDropoutAddTwin, DroppedNanAndInfStayNanAsTheReferenceDoes) {
  const std::int64_t n = 64;
  const float p = 0.5f;
  const DropoutKey key{11, 0};
  at::Tensor x = at::full({n}, NAN, at::TensorOptions().dtype(dtype()));
  x.narrow(0, 32, 32).fill_(INFINITY);
  const at::Tensor y = forward(x, at::Tensor(), at::zeros_like(x), p, key);
  const at::Tensor keep = keep_mask(n, p, key);
  ASSERT_TRUE(keep.any().item<bool>() && (~keep).any().item<bool>());
  // The reference's y * mask: NaN * 0 and Inf * 0 are NaN; kept Inf stays Inf.
  EXPECT_TRUE(y.narrow(0, 0, 32).isnan().all().item<bool>());
  EXPECT_TRUE(at::equal(y.narrow(0, 32, 32).isnan(), ~keep.narrow(0, 32, 32)));
  EXPECT_TRUE(at::equal(y.narrow(0, 32, 32).isinf(), keep.narrow(0, 32, 32)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasDropoutAddTwin,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace parity::kernels
