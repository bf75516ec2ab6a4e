// The training step's optimizer (harness/model/optimizer.h): Adam is
// torch.optim.Adam's update with bias correction, step by step; under the
// distributed optimizer each DP rank updates its FlatShard ranges with the same
// arithmetic, so the split update equals the whole one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/model/optimizer.h"

namespace parity {
namespace {

std::vector<Parameter> parameters(std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<Parameter> out;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
           {"a.weight", {3, 4}}, {"b.bias", {5}}, {"c.weight", {2, 3}}}) {
    Parameter p;
    p.name = name;
    p.value = at::randn(shape, at::kDouble).requires_grad_(true);
    out.push_back(std::move(p));
  }
  return out;
}

void set_gradients(std::vector<Parameter>& params, int step) {
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].value.mutable_grad() =
        at::sin(at::arange(params[i].value.numel(), at::kDouble) * (step + 1) + double(i))
            .view(params[i].value.sizes());
}

TEST(Optimizer, AdamIsTorchAdamWithBiasCorrection) {
  std::vector<Parameter> params = parameters(3);
  std::vector<at::Tensor> expected, m, v;
  for (const Parameter& p : params) {
    expected.push_back(p.value.detach().clone());
    m.push_back(at::zeros_like(expected.back()));
    v.push_back(at::zeros_like(expected.back()));
  }
  OptimizerSettings s;
  s.kind = OptimizerKind::adam;
  s.lr = 0.05;
  Optimizer adam(s, params, 0, 1);
  for (int step = 0; step < 3; ++step) {
    set_gradients(params, step);
    adam.step(params, nullptr);
    const double t = step + 1;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = params[i].value.grad();
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      const at::Tensor m_hat = m[i] / (1 - std::pow(0.9, t));
      const at::Tensor v_hat = v[i] / (1 - std::pow(0.999, t));
      expected[i] = expected[i] - 0.05 * m_hat / (v_hat.sqrt() + 1e-8);
      EXPECT_TRUE(at::allclose(params[i].value.detach(), expected[i], 1e-12, 1e-14))
          << params[i].name << " step " << step;
      EXPECT_TRUE(at::allclose(adam.moment(0, i), m[i], 1e-12, 1e-14));
    }
  }
  EXPECT_EQ(adam.steps(), 3);
  // The step count is the bias correction's t: restarting it changes the update.
  std::vector<Parameter> restarted = parameters(3), continued = parameters(3);
  Optimizer a(s, restarted, 0, 1), b(s, continued, 0, 1);
  for (int step = 0; step < 2; ++step) {
    set_gradients(restarted, step);
    set_gradients(continued, step);
    a.step(restarted, nullptr);
    b.step(continued, nullptr);
  }
  a.set_steps(0);
  set_gradients(restarted, 2);
  set_gradients(continued, 2);
  a.step(restarted, nullptr);
  b.step(continued, nullptr);
  EXPECT_FALSE(at::allclose(restarted[0].value, continued[0].value, 1e-9, 0));
}

TEST(Optimizer, TheDistributedAdamOnOneRankIsThePlainAdam) {
  std::vector<Parameter> plain = parameters(5), split = parameters(5);
  OptimizerSettings s;
  s.kind = OptimizerKind::adam;
  s.lr = 0.1;
  Optimizer whole(s, plain, 0, 1);
  s.distributed = true;
  Optimizer flat(s, split, 0, 1);
  ASSERT_NE(flat.layout(), nullptr);
  for (int step = 0; step < 3; ++step) {
    set_gradients(plain, step);
    set_gradients(split, step);
    whole.step(plain, nullptr);
    flat.step(split, nullptr);
  }
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::equal(plain[i].value, split[i].value)) << plain[i].name;
    // The flat shard's moments, per parameter at its range, are the whole ones.
    EXPECT_TRUE(at::equal(flat.moment(1, i), whole.moment(1, i).reshape({-1})));
  }
  EXPECT_EQ(flat.flat_moment(0).numel(), 12 + 5 + 6);
}

TEST(Optimizer, SgdIsPlainSgdAndCountsItsSteps) {
  std::vector<Parameter> params = parameters(7);
  const at::Tensor before = params[1].value.detach().clone();
  OptimizerSettings s;
  s.lr = 0.25;
  Optimizer sgd(s, params, 0, 1);
  EXPECT_TRUE(sgd.moment_names().empty());
  set_gradients(params, 0);
  sgd.step(params, nullptr);
  EXPECT_TRUE(at::equal(params[1].value, before - 0.25 * params[1].value.grad()));
  EXPECT_EQ(sgd.steps(), 1);
  s.lr = 0;  // no update, no step
  Optimizer frozen(s, params, 0, 1);
  frozen.step(params, nullptr);
  EXPECT_EQ(frozen.steps(), 0);
}

}  // namespace
}  // namespace parity
