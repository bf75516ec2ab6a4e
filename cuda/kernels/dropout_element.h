#pragma once
// Bias-dropout-add, element by element, shared by kernel and twin:
//   y = residual + dropout(x + bias), dropout(v) = v * (keep ? scale : 0)
// computed in the accumulation type (fp32 for bf16/fp32, fp64 for fp64) and
// rounded once to the element type. Multiplying by 0 (not selecting 0) keeps
// the reference's NaN semantics: a dropped NaN or Inf gives NaN, as
// harness/backend/plain_ops.cpp's y * mask does. Backward: dx = dy * (keep ? scale : 0).
#include <cstdint>

#include "cuda/kernels/host_device.h"
#include "cuda/kernels/philox.h"

namespace parity::kernels {

// The Philox key of one dropout launch: the rank tracker's (seed, offset).
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};

// 1 / (1 - p) in Acc; 0 for p >= 1 (everything is dropped).
template <typename Acc>
PARITY_HD inline Acc dropout_scale(float p) {
  return p >= 1.0f ? Acc(0) : Acc(1) / (Acc(1) - Acc(p));
}

// Element i's keep flag under `key`.
PARITY_HD inline bool dropout_keeps(DropoutKey key, std::int64_t i, float p) {
  const Philox4x32 draws = philox_group(key.seed, key.offset, static_cast<std::uint64_t>(i) / 4);
  return dropout_keep(draws.v[i % 4], p);
}

template <typename Acc>
PARITY_HD inline Acc bias_dropout_add_element(Acc x, const Acc* bias, Acc residual, bool keep,
                                              Acc scale) {
  const Acc v = bias ? x + *bias : x;
  return residual + v * (keep ? scale : Acc(0));
}

}  // namespace parity::kernels
