#pragma once
// A small finite-difference gradient checker (at::autograd::gradcheck is
// Python-only): compares autograd's gradient of a scalar function of fp64 leaf
// tensors with central differences, element by element.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

namespace parity::testing {

// A fixed-weight scalar projection of a tensor, so a check of a non-scalar op
// exercises every output element with a distinct weight.
inline at::Tensor weighted_sum(const at::Tensor& out, std::uint64_t seed = 7) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor w = at::empty(out.sizes(), out.options().dtype(at::kDouble).requires_grad(false));
  w.uniform_(-1.0, 1.0, gen);
  return (out.to(at::kDouble) * w).sum();
}

// f() must return a scalar computed from `leaves` (contiguous fp64 tensors that
// require grad). Checks every element of every leaf.
inline ::testing::AssertionResult check_gradients(const std::function<at::Tensor()>& f,
                                                  const std::vector<at::Tensor>& leaves,
                                                  double eps = 1e-6, double atol = 1e-8,
                                                  double rtol = 1e-6) {
  for (const at::Tensor& l : leaves) {
    if (l.scalar_type() != at::kDouble || !l.is_contiguous() || !l.requires_grad()) {
      return ::testing::AssertionFailure() << "leaves must be contiguous fp64 requiring grad";
    }
    if (l.grad().defined()) l.mutable_grad().zero_();
  }
  f().backward();
  std::vector<at::Tensor> analytic;
  for (const at::Tensor& l : leaves) {
    analytic.push_back(l.grad().defined() ? l.grad().clone() : at::zeros_like(l));
  }
  at::NoGradGuard no_grad;
  double worst = 0.0;
  std::ostringstream failures;
  int failed = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    double* data = leaves[i].data_ptr<double>();
    const double* a = analytic[i].data_ptr<double>();
    for (std::int64_t j = 0; j < leaves[i].numel(); ++j) {
      const double orig = data[j];
      data[j] = orig + eps;
      const double fp = f().item<double>();
      data[j] = orig - eps;
      const double fm = f().item<double>();
      data[j] = orig;
      const double numeric = (fp - fm) / (2 * eps);
      const double err = std::abs(a[j] - numeric);
      worst = std::max(worst, err);
      if (err > atol + rtol * std::abs(numeric)) {
        if (++failed <= 5) {
          failures << "\n  leaf " << i << " element " << j << ": autograd " << a[j]
                   << ", finite difference " << numeric;
        }
      }
    }
  }
  if (failed > 0) {
    return ::testing::AssertionFailure() << failed << " gradient elements differ (worst abs error "
                                         << worst << ")" << failures.str();
  }
  return ::testing::AssertionSuccess() << "max abs error " << worst;
}

// A fresh fp64 leaf with values from N(0, 1) drawn from `seed`.
inline at::Tensor random_leaf(std::vector<std::int64_t> shape, std::uint64_t seed,
                              double scale = 1.0, double shift = 0.0) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor t = at::empty(shape, at::kDouble);
  t.normal_(0.0, 1.0, gen);
  t.mul_(scale).add_(shift);
  t.requires_grad_(true);
  return t;
}

}  // namespace parity::testing
