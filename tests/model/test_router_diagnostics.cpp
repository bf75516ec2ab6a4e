// build_router_diagnostics on hand-computed cases: every channel, padding
// zeroed out of every channel, a sequence without valid tokens, the top-k
// boundary margin, and the inputs it rejects.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <limits>
#include <stdexcept>

#include "harness/model/router_diagnostics.h"

namespace parity {
namespace {

using C = RouterDiagnosticChannel;

// s = 2, b = 2, E = 3; token t = si * b + bi, so sequence 0 holds tokens 0 and
// 2, sequence 1 tokens 1 and 3. Top-1 routing.
struct Batch {
  at::Tensor scores = at::tensor({0.5, 0.3, 0.2,   // t0 (s0, b0)
                                  0.1, 0.6, 0.3,   // t1 (s0, b1)
                                  0.2, 0.2, 0.6,   // t2 (s1, b0)
                                  0.4, 0.4, 0.2},  // t3 (s1, b1): a tie at the boundary
                                 at::kFloat)
                          .reshape({4, 3});
  // Unbiased top-1: e0, e1, e2, e0.
  at::Tensor aux =
      at::tensor({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0}, at::kInt).to(at::kBool).reshape({4, 3});
  // Dispatched: t0 moved to e1 by the bias, t2 dropped, t1 and t3 as aux.
  at::Tensor actual =
      at::tensor({0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}, at::kInt).to(at::kBool).reshape({4, 3});
  at::Tensor bias = at::tensor({0.1, -0.2, 0.1}, at::kFloat);
};

at::Tensor row(const at::Tensor& d, std::int64_t seq, C c) { return d[seq][channel_index(c)]; }
double elem0(const at::Tensor& d, std::int64_t seq, C c) {
  return row(d, seq, c)[0].item<double>();
}
void expect_row(const at::Tensor& d, std::int64_t seq, C c, std::vector<double> want) {
  const at::Tensor w = at::tensor(want, at::kDouble);
  EXPECT_TRUE(at::allclose(row(d, seq, c).to(at::kDouble), w, 1e-6, 1e-7))
      << "sequence " << seq << " channel " << channel_index(c) << ": " << row(d, seq, c);
}

TEST(RouterDiagnostics, EveryChannelOfTwoSequences) {
  Batch x;
  const at::Tensor d =
      build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 2, 2, at::Tensor());
  ASSERT_EQ(d.sizes(), (at::IntArrayRef{2, kRouterDiagnosticChannelCount, 3}));
  EXPECT_EQ(d.scalar_type(), at::kFloat);
  // Sequence 0: tokens t0, t2.
  expect_row(d, 0, C::mean_score, {0.35, 0.25, 0.4});
  expect_row(d, 0, C::aux_load, {0.5, 0, 0.5});
  expect_row(d, 0, C::actual_load, {0, 1, 0});  // its own total: one dispatched assignment
  expect_row(d, 0, C::expert_bias, {0.1, -0.2, 0.1});
  expect_row(d, 0, C::aux_actual_overlap, {0, 0, 0});
  expect_row(d, 0, C::valid_token_count, {2, 0, 0});
  // t0: (0.5 - 0.3) / 0.5 = 0.4; t2: (0.6 - 0.2) / 0.6 = 2/3.
  expect_row(d, 0, C::topk_boundary_relative_margin, {(0.4 + 2.0 / 3) / 2, 0, 0});
  // Sequence 1: tokens t1, t3.
  expect_row(d, 1, C::mean_score, {0.25, 0.5, 0.25});
  expect_row(d, 1, C::aux_load, {0.5, 0.5, 0});
  expect_row(d, 1, C::actual_load, {0.5, 0.5, 0});
  expect_row(d, 1, C::aux_actual_overlap, {1, 0, 0});
  expect_row(d, 1, C::valid_token_count, {2, 0, 0});
  // t1: (0.6 - 0.3) / 0.6 = 0.5; t3 ties at the boundary: 0.
  expect_row(d, 1, C::topk_boundary_relative_margin, {0.25, 0, 0});
}

TEST(RouterDiagnostics, PaddingIsZeroedOutOfEveryChannel) {
  Batch x;
  x.scores[2][0] = std::numeric_limits<float>::quiet_NaN();  // padding must not leak
  const at::Tensor padding = at::tensor({0, 0, 1, 0}, at::kInt).to(at::kBool);  // t2
  const at::Tensor d = build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 2, 2, padding);
  EXPECT_FALSE(d.isnan().any().item<bool>());
  // Sequence 0 is t0 alone.
  expect_row(d, 0, C::mean_score, {0.5, 0.3, 0.2});
  expect_row(d, 0, C::aux_load, {1, 0, 0});
  expect_row(d, 0, C::actual_load, {0, 1, 0});
  expect_row(d, 0, C::aux_actual_overlap, {0, 0, 0});
  expect_row(d, 0, C::valid_token_count, {1, 0, 0});
  expect_row(d, 0, C::topk_boundary_relative_margin, {0.4, 0, 0});
  // Sequence 1 is untouched.
  expect_row(d, 1, C::mean_score, {0.25, 0.5, 0.25});
  expect_row(d, 1, C::aux_actual_overlap, {1, 0, 0});
  expect_row(d, 1, C::topk_boundary_relative_margin, {0.25, 0, 0});
}

TEST(RouterDiagnostics, ASequenceWithoutValidTokensIsAllZeros) {
  Batch x;
  const at::Tensor padding = at::tensor({1, 0, 1, 0}, at::kInt).to(at::kBool);  // t0, t2
  const at::Tensor d = build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 2, 2, padding);
  EXPECT_EQ(d[0].abs().sum().item<double>(), 0.0) << d[0];
  EXPECT_EQ(elem0(d, 1, C::valid_token_count), 2.0);
  expect_row(d, 1, C::expert_bias, {0.1, -0.2, 0.1});
}

TEST(RouterDiagnostics, NoBiasGivesAZeroBiasChannel) {
  Batch x;
  const at::Tensor d =
      build_router_diagnostics(x.scores, x.aux, x.actual, at::Tensor(), 2, 2, at::Tensor());
  EXPECT_EQ(d.select(1, channel_index(C::expert_bias)).abs().sum().item<double>(), 0.0);
}

TEST(RouterDiagnostics, TopTwoOverlapAndMarginAndEveryExpertSelected) {
  // s = 1, b = 1, E = 4, top-2: aux {e0, e1}, actual {e0, e2}.
  const at::Tensor scores = at::tensor({0.4, 0.3, 0.2, 0.1}, at::kFloat).reshape({1, 4});
  const at::Tensor aux = at::tensor({1, 1, 0, 0}, at::kInt).to(at::kBool).reshape({1, 4});
  const at::Tensor actual = at::tensor({1, 0, 1, 0}, at::kInt).to(at::kBool).reshape({1, 4});
  const at::Tensor d = build_router_diagnostics(scores, aux, actual, at::Tensor(), 1, 1, {});
  expect_row(d, 0, C::aux_load, {0.5, 0.5, 0, 0});
  expect_row(d, 0, C::actual_load, {0.5, 0, 0.5, 0});
  EXPECT_NEAR(elem0(d, 0, C::aux_actual_overlap), 0.5, 1e-7);
  EXPECT_NEAR(elem0(d, 0, C::topk_boundary_relative_margin), (0.3 - 0.2) / 0.3, 1e-6);
  // k = E: no unselected expert, so no boundary: margin 0, not NaN.
  const at::Tensor all = at::ones({1, 4}, at::kBool);
  const at::Tensor full = build_router_diagnostics(scores, all, all, at::Tensor(), 1, 1, {});
  EXPECT_EQ(elem0(full, 0, C::topk_boundary_relative_margin), 0.0);
  EXPECT_EQ(elem0(full, 0, C::aux_actual_overlap), 1.0);
}

TEST(RouterDiagnostics, RejectsOneExpertAndMismatchedShapes) {
  const at::Tensor one = at::ones({2, 1}, at::kFloat);
  const at::Tensor one_map = at::ones({2, 1}, at::kBool);
  EXPECT_THROW(build_router_diagnostics(one, one_map, one_map, {}, 2, 1, {}),
               std::invalid_argument);
  Batch x;
  EXPECT_THROW(build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 3, 2, {}),
               std::invalid_argument);  // s * b != tokens
  EXPECT_THROW(
      build_router_diagnostics(x.scores, x.aux.narrow(1, 0, 2), x.actual, x.bias, 2, 2, {}),
      std::invalid_argument);
  EXPECT_THROW(build_router_diagnostics(x.scores, x.aux, x.actual, at::zeros({2}), 2, 2, {}),
               std::invalid_argument);
  EXPECT_THROW(
      build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 2, 2, at::zeros({3}, at::kBool)),
      std::invalid_argument);
  EXPECT_THROW(build_router_diagnostics(x.scores, x.aux, x.actual, x.bias, 0, 2, {}),
               std::invalid_argument);
}

}  // namespace
}  // namespace parity
