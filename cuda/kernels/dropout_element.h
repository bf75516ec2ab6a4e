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
// Inside a CUDA graph capture the generator's seed and offset live in device
// memory that each replay updates (ATen's PhiloxCudaState): then seed_at and
// offset_at point there and `offset` is the launch's offset within the graph,
// so every replay draws what the eager step at that generator state draws.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::int64_t* seed_at = nullptr;    // captured: the seed, read when the kernel runs
  const std::int64_t* offset_at = nullptr;  // captured: the offset outside the graph
};

// The (seed, offset) values a launch draws with; read where the kernel runs
// (the twin, on the host, reads host pointers alike).
PARITY_HD inline DropoutKey resolved(DropoutKey key) {
  if (key.offset_at != nullptr) {
    key.seed = static_cast<std::uint64_t>(*key.seed_at);
    key.offset = static_cast<std::uint64_t>(*key.offset_at) + key.offset;
    key.seed_at = key.offset_at = nullptr;
  }
  return key;
}

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
