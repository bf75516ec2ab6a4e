// The metric-prepare and dimwise-sums host twins (cuda/kernels/) against the
// reference statistics computed with ATen as the reference metrics do
// (harness/metrics/statistics/logical_metrics.cpp, dimwise_metrics.cpp), on random
// tensors of uneven sizes with NaN/Inf, empty, in fp32, bf16 and fp64.
//
// Tolerances: counts, min, max and abs-max are exact (no rounding involved).
// A sum differs from ATen's only in its order: the error of either is at most
// about depth * eps * sum|x_i| with depth the tree's and the chains' length,
// which is small here (a few dozen adds), so fp64 gets 1e-12 and fp32 1e-5
// relative to sum|x_i|; bf16 values widen exactly to fp32 and accumulate in
// fp32, so they get fp32's bound. NaN and +-Inf results must match exactly.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "cuda/kernels/bf16.h"
#include "cuda/kernels/dimwise_sums_twin.h"
#include "cuda/kernels/metric_prepare_twin.h"
#include "tests/cuda/kernels/kernel_test_data.h"

namespace parity::kernels {
namespace {

using testing::random_values;

// Twins take Bf16 for bf16 data: at::BFloat16 holds the same 16 bits.
template <typename Acc>
MetricPrepareResult<Acc> twin_of(const at::Tensor& x);
template <>
MetricPrepareResult<double> twin_of<double>(const at::Tensor& x) {
  return metric_prepare_twin(x.data_ptr<double>(), x.numel());
}
template <>
MetricPrepareResult<float> twin_of<float>(const at::Tensor& x) {
  if (x.scalar_type() == at::kBFloat16)
    return metric_prepare_twin(reinterpret_cast<const Bf16*>(x.data_ptr()), x.numel());
  return metric_prepare_twin(x.data_ptr<float>(), x.numel());
}

// `got` equals `want` exactly, NaN matching NaN.
void expect_same(double got, double want, const std::string& what) {
  if (std::isnan(want))
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got << ", want NaN";
  else
    EXPECT_EQ(got, want) << what;
}

// `got` is within rel * scale of `want`; NaN and +-Inf results match exactly.
void expect_near(double got, double want, double scale, double rel, const std::string& what) {
  if (!std::isfinite(want)) return expect_same(got, want, what);
  EXPECT_LE(std::abs(got - want), rel * scale) << what << ": " << got << " vs " << want;
}

// expect_near for every element; NaN and +-Inf places must agree.
void expect_near_all(const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale,
                     double rel, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  if (want.numel() == 0) return;
  EXPECT_TRUE(at::equal(got.isnan(), want.isnan())) << what << ": NaN places differ";
  const at::Tensor inf = want.isinf();
  EXPECT_TRUE(at::equal(got.masked_fill(~inf, 0), want.masked_fill(~inf, 0)))
      << what << ": Inf places differ";
  const at::Tensor excess = ((got - want).abs() - rel * scale).masked_fill(~want.isfinite(), 0);
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": worst at " << excess.argmax().item<std::int64_t>();
}

double rel_bound(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-12 : 1e-5; }

struct PrepareCase {
  at::ScalarType dtype;
  std::int64_t n;
  bool specials;
};

std::string case_name(const PrepareCase& c) {
  return std::string(c10::toString(c.dtype)) + " n=" + std::to_string(c.n) +
         (c.specials ? " with NaN/Inf" : "");
}

template <typename Acc>
void check_prepare(const PrepareCase& c, std::uint64_t seed) {
  const at::Tensor x = random_values(c.n, seed, c.specials, 0.5).to(c.dtype);
  const MetricPrepareResult<Acc> got = twin_of<Acc>(x);
  const std::string what = case_name(c);
  const at::Tensor a = x.to(c.dtype == at::kDouble ? at::kDouble : at::kFloat);
  EXPECT_EQ(got.nan_count, a.isnan().sum().item<std::int64_t>()) << what;
  EXPECT_EQ(got.inf_count, a.isinf().sum().item<std::int64_t>()) << what;
  if (c.n == 0) {  // the reduction identities, as reduction_identity gives
    EXPECT_EQ(got.sum, 0) << what;
    EXPECT_EQ(got.sum_squares, 0) << what;
    EXPECT_EQ(got.min, INFINITY) << what;
    EXPECT_EQ(got.max, -INFINITY) << what;
    EXPECT_EQ(got.abs_max, -INFINITY) << what;
    return;
  }
  const at::Tensor finite = a.masked_fill(~a.isfinite(), 0);
  const double abs_sum = finite.abs().sum().item<double>();
  const double rel = rel_bound(c.dtype);
  expect_near(got.sum, a.sum().item<double>(), abs_sum, rel, what + " sum");
  const double squares = (a * a).sum().item<double>();
  expect_near(got.sum_squares, squares, (finite * finite).sum().item<double>(), rel,
              what + " sum of squares");
  expect_same(got.min, a.min().item<double>(), what + " min");
  expect_same(got.max, a.max().item<double>(), what + " max");
  expect_same(got.abs_max, a.abs().max().item<double>(), what + " abs-max");
}

class MetricPrepareTwin : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(MetricPrepareTwin, MatchesAtenStatistics) {
  const at::ScalarType dtype = GetParam();
  std::uint64_t seed = 1;
  for (const std::int64_t n : {0, 1, 7, 31, 33, 1000, 4097, 65537, 300007})
    for (const bool specials : {false, true}) {
      const PrepareCase c{dtype, n, specials};
      if (dtype == at::kDouble)
        check_prepare<double>(c, seed++);
      else
        check_prepare<float>(c, seed++);
    }
}

TEST_P(MetricPrepareTwin, SingleNanOrInfDecidesTheResult) {
  const at::ScalarType dtype = GetParam();
  for (const double special : {NAN, INFINITY, -INFINITY}) {
    at::Tensor x = random_values(65537, 42, false).to(dtype);
    x[40000] = special;  // one special value deep inside one thread's chain
    const PrepareCase c{dtype, x.numel(), true};
    if (dtype == at::kDouble)
      check_prepare<double>(c, 0);
    else
      check_prepare<float>(c, 0);
    const double sum = dtype == at::kDouble ? twin_of<double>(x).sum : twin_of<float>(x).sum;
    expect_same(sum, special, "sum with one " + std::to_string(special));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MetricPrepareTwin,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// A batched launch gives item k the blocks its single launch would have, after
// the earlier items' (empty items take none), so its order is the single one's.
TEST(MetricPrepareBatchLayout, GivesEachItemItsSingleLaunchBlocks) {
  const std::int64_t ns[] = {0, 1000, 0, 5000000, 4097, 0};
  std::int64_t first[6];
  const std::int64_t total = batch_first_blocks(ns, 6, sizeof(float), first);
  std::int64_t expected = 0;
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(first[k], expected) << k;
    expected += reduction_blocks(ns[k], sizeof(float));
  }
  EXPECT_EQ(total, expected);
  EXPECT_EQ(reduction_blocks(5000000, sizeof(float)), kMaxBlocks);  // capped, not n-sized
  EXPECT_EQ(reduction_blocks(4097, sizeof(float)), 5);              // ceil(1025 vectors / 256)
  EXPECT_EQ(reduction_blocks(4097, 2), 3);                          // 513 bf16 vectors of 8
  EXPECT_EQ(total, 1 + kMaxBlocks + 5);
}

// Row and column sums of squares: the dimwise metrics' prepare.
class DimwiseSumsTwin : public ::testing::TestWithParam<at::ScalarType> {};

template <typename T, typename Acc>
void sums(const T* x, std::int64_t rows, std::int64_t cols, Acc* out, bool by_rows) {
  if (by_rows)
    row_sums_of_squares_twin(x, rows, cols, out);
  else
    column_sums_of_squares_twin(x, rows, cols, out);
}

at::Tensor twin_sums(const at::Tensor& m, bool by_rows) {
  const std::int64_t rows = m.size(0), cols = m.size(1);
  const at::ScalarType acc = m.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor out = at::full({by_rows ? rows : cols}, -1.0, at::TensorOptions().dtype(acc));
  if (m.scalar_type() == at::kDouble)
    sums(m.data_ptr<double>(), rows, cols, out.data_ptr<double>(), by_rows);
  else if (m.scalar_type() == at::kBFloat16)
    sums(reinterpret_cast<const Bf16*>(m.data_ptr()), rows, cols, out.data_ptr<float>(), by_rows);
  else
    sums(m.data_ptr<float>(), rows, cols, out.data_ptr<float>(), by_rows);
  return out;
}

TEST_P(DimwiseSumsTwin, MatchesAtenSumsOfSquares) {
  const at::ScalarType dtype = GetParam();
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  std::uint64_t seed = 100;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {0, 5}, {5, 0}, {1, 1}, {3, 31}, {33, 1000}, {1000, 33}, {7, 65537}, {65537, 3}, {31, 1}};
  for (const auto& [rows, cols] : shapes)
    for (const bool specials : {false, true}) {
      const at::Tensor m =
          random_values(rows * cols, seed++, specials).to(dtype).reshape({rows, cols});
      const at::Tensor sq = m.to(acc) * m.to(acc);
      const at::Tensor finite_sq = sq.masked_fill(~sq.isfinite(), 0);
      const std::string what = std::string(c10::toString(dtype)) + " [" + std::to_string(rows) +
                               ", " + std::to_string(cols) + "]" + (specials ? " NaN/Inf" : "");
      for (const bool by_rows : {true, false}) {
        const int dim = by_rows ? 1 : 0;
        const at::Tensor got = twin_sums(m, by_rows).to(at::kDouble);
        const at::Tensor want = sq.sum(dim).to(at::kDouble);
        const at::Tensor scale = finite_sq.sum(dim).to(at::kDouble);
        expect_near_all(got, want, scale, rel_bound(dtype),
                        what + (by_rows ? " rows" : " columns"));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DimwiseSumsTwin,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// The host bf16 rounding is ATen's (round to nearest even): every bit pattern
// of fp32 around ties, and NaN/Inf, convert to the same bf16 bits.
TEST(KernelBf16, RoundsToNearestEvenLikeAten) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, INFINITY, -INFINITY, NAN, 3.0e38f, -1e-40f};
  for (int i = 0; i < 100000; ++i) {
    std::uint32_t bits = rng();
    if (i % 3 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // an exact tie
    float f;
    std::memcpy(&f, &bits, sizeof f);
    values.push_back(f);
  }
  const at::Tensor a =
      at::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}).to(at::kBFloat16);
  const auto* want = reinterpret_cast<const std::uint16_t*>(a.data_ptr());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Bf16 got = float_to_bf16(values[i]);
    if (std::isnan(values[i]))
      EXPECT_TRUE(std::isnan(bf16_to_float(got))) << i;
    else
      ASSERT_EQ(got.bits, want[i]) << "value " << values[i] << " (#" << i << ")";
  }
}

}  // namespace
}  // namespace parity::kernels
