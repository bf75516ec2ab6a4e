// The CUDA backend's ops against the interface's plain compositions (what the
// reference runs) on the same inputs: forward values and input gradients
// within the backend_parity tolerances (fp64 rel 1e-10, fp32 rel 1e-5), and
// dropout masks reproduced exactly by restoring the device generator's state.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <utility>

#include <ATen/cuda/CUDAGeneratorImpl.h>

#include "cuda/cuda_backend.h"
#include "cuda/kernels/bias_dropout_add_twin.h"
#include "harness/backend/registry.h"
#include "harness/backend/tensor_statistics.h"
#include "tests/cuda/gpu_test.h"

namespace parity::gpu {
namespace {

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.detach().to(at::kCPU, at::kDouble);
  const at::Tensor w = want.detach().to(at::kCPU, at::kDouble);
  const double scale = std::max(w.abs().max().item<double>(), 1e-30);
  return (g - w).abs().max().item<double>() / scale;
}

struct OpCase {
  at::ScalarType dtype;
  double bound;
};

class CudaOps : public ::testing::TestWithParam<OpCase> {};

// Runs `op` on CPU inputs with the reference and on copies on the GPU with the
// CUDA backend; compares outputs and the gradients of every input.
void compare(const std::function<at::Tensor(const Backend&, const std::vector<at::Tensor>&)>& op,
             std::vector<at::Tensor> cpu_inputs, double bound, const char* what) {
  auto reference = make_backend("reference");
  CudaBackend cuda;
  std::vector<at::Tensor> dev_inputs;
  for (at::Tensor& t : cpu_inputs) {
    const bool grad = at::isFloatingType(t.scalar_type());
    dev_inputs.push_back(t.to(cuda.device()).detach().requires_grad_(grad));
    t = t.detach().requires_grad_(grad);
  }
  at::Tensor want = op(*reference, cpu_inputs);
  at::Tensor got = op(cuda, dev_inputs);
  ASSERT_EQ(got.device().type(), at::kCUDA) << what;
  EXPECT_LE(rel_error(got, want), bound) << what << " forward";
  at::Tensor seed = at::randn(want.sizes(), want.options().requires_grad(false));
  want.backward(seed);
  got.backward(seed.to(got.device()));
  for (size_t i = 0; i < cpu_inputs.size(); ++i) {
    if (!cpu_inputs[i].requires_grad() || !cpu_inputs[i].grad().defined()) continue;
    EXPECT_LE(rel_error(dev_inputs[i].grad(), cpu_inputs[i].grad()), bound)
        << what << " gradient of input " << i;
  }
}

TEST_P(CudaOps, MatchThePlainCompositionsWithinTheBackendParityTolerance) {
  PARITY_REQUIRE_GPU();
  const auto [dtype, bound] = GetParam();
  at::manual_seed(7);
  const auto o = at::TensorOptions().dtype(dtype);
  const std::int64_t s = 12, b = 2, np = 4, hn = 8, h = np * hn;
  compare([](const Backend& be,
             const std::vector<at::Tensor>& in) { return be.linear(in[0], in[1], in[2]); },
          {at::randn({s, b, h}, o), at::randn({3 * h, h}, o), at::randn({3 * h}, o)}, bound,
          "linear");
  compare(
      [](const Backend& be, const std::vector<at::Tensor>& in) {
        return be.layer_norm(in[0], in[1], in[2], 1e-5);
      },
      {at::randn({s, b, h}, o), at::randn({h}, o), at::randn({h}, o)}, bound, "layer_norm");
  compare([](const Backend& be,
             const std::vector<at::Tensor>& in) { return be.rms_norm(in[0], in[1], 1e-5); },
          {at::randn({s, b, h}, o), at::randn({h}, o)}, bound, "rms_norm");
  compare([](const Backend& be, const std::vector<at::Tensor>& in) { return be.gelu(in[0]); },
          {at::randn({s, b, h}, o)}, bound, "gelu");
  // Attention over CP-style global positions: two chunks, keys gathered.
  const at::Tensor q_pos = at::cat({at::arange(0, 6, at::kLong), at::arange(18, 24, at::kLong)});
  const at::Tensor k_pos = at::arange(0, 24, at::kLong);
  compare(
      [&](const Backend& be, const std::vector<at::Tensor>& in) {
        const at::Device d = in[0].device();
        return be.causal_attention(in[0], in[1], in[2], q_pos.to(d), k_pos.to(d), {}, {}, 0.35);
      },
      {at::randn({s, b, np, hn}, o), at::randn({24, b, np, hn}, o), at::randn({24, b, np, hn}, o)},
      bound, "causal_attention");
  // Packed documents (cu_seqlens): documents of 10 and 14 positions.
  const at::Tensor k_docs = (k_pos >= 10).to(at::kLong);
  const at::Tensor q_docs = (q_pos >= 10).to(at::kLong);
  compare(
      [&](const Backend& be, const std::vector<at::Tensor>& in) {
        const at::Device d = in[0].device();
        return be.causal_attention(in[0], in[1], in[2], q_pos.to(d), k_pos.to(d), q_docs.to(d),
                                   k_docs.to(d), 0.35);
      },
      {at::randn({s, b, np, hn}, o), at::randn({24, b, np, hn}, o), at::randn({24, b, np, hn}, o)},
      bound, "causal_attention per document");
  compare(
      [&](const Backend& be, const std::vector<at::Tensor>& in) {
        const at::Tensor ids = at::randint(0, 20, {s, b}, at::kLong).to(in[0].device());
        return be.embedding(ids, in[0]);
      },
      {at::randn({20, h}, o)}, bound, "embedding");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps,
                         ::testing::Values(OpCase{at::kDouble, 1e-10}, OpCase{at::kFloat, 1e-5}),
                         [](const auto& info) {
                           return info.param.dtype == at::kDouble ? "fp64" : "fp32";
                         });

// The fused one-read statistics (cuda/kernels/metric_prepare.h) against the
// interface's ATen reductions on the same values, NaN and Inf included: counts,
// min, max and abs-max exactly; sums to summation order (rel 1e-12 fp64,
// 1e-5 fp32 and bf16, which accumulate in fp32), on a strided view too.
TEST(CudaStatistics, TheFusedKernelMatchesTheReductionsItReplaces) {
  PARITY_REQUIRE_GPU();
  CudaBackend cuda;
  auto reference = make_backend("reference");
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
    for (const std::int64_t n : {1, 33, 4099, 1 << 20}) {
      at::Tensor x = at::randn({n}, at::kDouble).to(dtype);
      if (n > 40) {
        x[7] = std::numeric_limits<double>::infinity();
        x[40] = -std::numeric_limits<double>::infinity();
      }
      for (const bool strided : {false, true}) {
        const at::Tensor host = strided ? x.view({-1, 1}).expand({n, 2}).t() : x;
        const TensorStatistics want = reference->tensor_statistics(host);
        const TensorStatistics got = cuda.tensor_statistics(host.to(cuda.device()));
        const double tol = dtype == at::kDouble ? 1e-12 : 1e-5;
        const auto value = [](const at::Tensor& t) { return t.to(at::kCPU).item<double>(); };
        const std::string what = std::string(c10::toString(dtype)) + " n=" + std::to_string(n) +
                                 (strided ? " strided" : "");
        for (const auto& [g, w] : {std::pair{got.min, want.min},
                                   {got.max, want.max},
                                   {got.abs_max, want.abs_max},
                                   {got.nan_count, want.nan_count},
                                   {got.inf_count, want.inf_count}})
          EXPECT_EQ(value(g), value(w)) << what;
        for (const auto& [g, w] : {std::pair{got.sum, want.sum}, {got.sum_sq, want.sum_sq}}) {
          const double a = value(g), b = value(w);
          if (std::isfinite(b))
            EXPECT_LE(std::fabs(a - b), tol * std::max(std::fabs(b), 1.0) * std::sqrt(double(n)))
                << what;
          else
            EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << what;
        }
      }
    }
  }
}

// The deterministic row/column sums of squares against the metrics' ATen
// composition (Backend::sums_of_squares' default), to summation order.
TEST(CudaStatistics, RowAndColumnSumsOfSquaresMatchTheComposition) {
  PARITY_REQUIRE_GPU();
  CudaBackend cuda;
  auto reference = make_backend("reference");
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat, at::kBFloat16})
    for (const auto& shape :
         std::vector<std::vector<std::int64_t>>{{1, 1}, {7, 33}, {3, 129, 64}, {4096, 3}, {0, 5}})
      for (const bool per_row : {true, false}) {
        const at::Tensor x = at::randn(shape, at::kDouble).to(dtype);
        const at::Tensor want = reference->sums_of_squares(x, per_row);
        const at::Tensor got = cuda.sums_of_squares(x.to(cuda.device()), per_row);
        ASSERT_EQ(got.sizes(), want.sizes());
        if (want.numel() > 0) {
          EXPECT_LE(rel_error(got, want), dtype == at::kDouble ? 1e-12 : 1e-5)
              << c10::toString(dtype) << (per_row ? " rows" : " columns");
        }
      }
}

TEST(CudaRng, RestoringASnapshotReproducesTheDropoutMaskOnTheDevice) {
  PARITY_REQUIRE_GPU();
  CudaBackend cuda;
  auto rng = cuda.make_rng_tracker();
  rng->seed(1234, /*tp_rank=*/0);
  const at::Tensor x = at::ones({4096}, at::TensorOptions().device(cuda.device()));
  const RngSnapshot before = rng->snapshot();
  at::Generator g = rng->generator(RngStream::data_parallel);
  const at::Tensor first = cuda.dropout(x, 0.3, /*training=*/true, g);
  const at::Tensor second = cuda.dropout(x, 0.3, /*training=*/true, g);
  EXPECT_FALSE(at::equal(first, second));  // the Philox offset moved on
  rng->restore(before);
  const at::Tensor again = cuda.dropout(x, 0.3, /*training=*/true, g);
  EXPECT_TRUE(at::equal(first, again));
  // The model-parallel stream differs per TP rank.
  auto other = cuda.make_rng_tracker();
  other->seed(1234, /*tp_rank=*/1);
  at::Generator g0 = rng->generator(RngStream::model_parallel);
  at::Generator g1 = other->generator(RngStream::model_parallel);
  EXPECT_FALSE(at::equal(cuda.dropout(x, 0.3, true, g0), cuda.dropout(x, 0.3, true, g1)));
}

// The fused bias-dropout-add: its output is the host twin's under the
// generator's (seed, offset) bit for bit, a restored snapshot redraws the same
// mask, and the gradients are the mask's: dx = dy * mask * scale, dbias the
// column sum of dx, dresidual = dy.
TEST(CudaFusedBiasDropoutAdd, MatchesItsTwinRedrawsAfterRestoreAndBackPropagatesTheMask) {
  PARITY_REQUIRE_GPU();
  CudaBackend cuda;
  auto rng = cuda.make_rng_tracker();
  rng->seed(99, /*tp_rank=*/0);
  at::Generator g = rng->generator(RngStream::model_parallel);
  const std::int64_t rows = 37, cols = 64;
  const float p = 0.25f;
  const at::Tensor x = at::randn({rows, cols}, at::kFloat);
  const at::Tensor bias = at::randn({cols}, at::kFloat);
  const at::Tensor residual = at::randn({rows, cols}, at::kFloat);
  const auto dev = [&](const at::Tensor& t) {
    return t.to(cuda.device()).detach().requires_grad_(true);
  };
  const at::Tensor dx = dev(x), db = dev(bias), dr = dev(residual);
  const RngSnapshot before = rng->snapshot();
  kernels::DropoutKey key;
  {
    auto* gen = at::check_generator<at::CUDAGeneratorImpl>(g);
    key.seed = gen->current_seed();
    key.offset = gen->philox_offset_per_thread();
  }
  const at::Tensor y = cuda.bias_dropout_add(dx, db, dr, p, /*training=*/true, g);
  at::Tensor want = at::empty_like(residual);
  kernels::bias_dropout_add_twin(x.data_ptr<float>(), bias.data_ptr<float>(),
                                 residual.data_ptr<float>(), want.data_ptr<float>(), x.numel(),
                                 cols, p, key);
  EXPECT_TRUE(at::equal(y.detach().cpu(), want));
  rng->restore(before);
  EXPECT_TRUE(at::equal(cuda.bias_dropout_add(dx, db, dr, p, true, g).detach().cpu(), want));
  const at::Tensor grad = at::randn({rows, cols}, at::kFloat);
  y.backward(grad.to(cuda.device()));
  const at::Tensor scale_mask = ((want - residual) != 0).to(at::kFloat) / (1 - p);
  EXPECT_LE(rel_error(dx.grad(), grad * scale_mask), 1e-6);
  EXPECT_LE(rel_error(db.grad(), (grad * scale_mask).sum(0)), 1e-5);
  EXPECT_TRUE(at::equal(dr.grad().cpu(), grad));
}

}  // namespace
}  // namespace parity::gpu
