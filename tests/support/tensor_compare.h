#pragma once
// Relative differences of whole tensors, for comparing one run's outputs with
// another's (dumps, fixtures).
#include <ATen/ATen.h>

#include <algorithm>

#include "harness/base/safetensors.h"

namespace parity::testing {

// max |got - want| / max |want|, in fp64 (so 0 exactly when the values are equal).
inline double max_rel(const at::Tensor& got, const at::Tensor& want) {
  const double scale = std::max(1e-30, want.abs().max().item<double>());
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

// The largest max_rel over want's tensors; 1e300 where got lacks one or holds
// another shape.
inline double max_rel(const safetensors::Contents& got, const safetensors::Contents& want) {
  double worst = 0;
  for (const auto& [name, w] : want.tensors) {
    const at::Tensor* g = got.find(name);
    if (g == nullptr || g->sizes() != w.sizes()) return 1e300;
    worst = std::max(worst, max_rel(*g, w));
  }
  return worst;
}

}  // namespace parity::testing
