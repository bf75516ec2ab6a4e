#pragma once
// Random inputs for the kernel tests: normal values with NaN and Inf injected
// at random places, as fp64, converted to the element type under test by ATen.
#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <random>

namespace parity::kernels::testing {

// n values ~ N(mean, 1); with `specials`, about 1 in 97 is NaN, +Inf or -Inf.
inline at::Tensor random_values(std::int64_t n, std::uint64_t seed, bool specials,
                                double mean = 0.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, 1.0);
  std::uniform_int_distribution<int> pick(0, 96);
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
  double* p = t.data_ptr<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    const int k = specials ? pick(rng) : 3;
    p[i] = k == 0   ? std::numeric_limits<double>::quiet_NaN()
           : k == 1 ? std::numeric_limits<double>::infinity()
           : k == 2 ? -std::numeric_limits<double>::infinity()
                    : normal(rng);
  }
  return t;
}

}  // namespace parity::kernels::testing
