#pragma once
// Bias-dropout-add (dropout_element.h) on n contiguous elements of a
// [n / cols, cols] view: bias (nullable) has cols elements and broadcasts over
// the rows. The mask is drawn from Philox4x32-10 under `key` (philox.h), so
// the backward regenerates it from the same key instead of storing it, and a
// recomputation under the same key reproduces it exactly. p in [0, 1]; p == 0
// keeps every element (scale 1: y = residual + x + bias). grad_x may alias
// grad_y; y may alias residual or x. Non-contiguous inputs are copied
// contiguous by the caller. A LibTorch caller passes data_ptr(), numel(), the
// current stream and the generator's (seed, offset), then advances the offset
// by dropout_offset_increment(n).
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels/dropout_element.h"

namespace parity::kernels {

// Philox counters one launch over n elements uses (one per 4 elements).
inline std::uint64_t dropout_offset_increment(std::int64_t n) {
  return static_cast<std::uint64_t>((n + 3) / 4);
}

cudaError_t launch_bias_dropout_add(const float* x, const float* bias, const float* residual,
                                    float* y, std::int64_t n, std::int64_t cols, float p,
                                    DropoutKey key, cudaStream_t stream);
cudaError_t launch_bias_dropout_add(const __nv_bfloat16* x, const __nv_bfloat16* bias,
                                    const __nv_bfloat16* residual, __nv_bfloat16* y, std::int64_t n,
                                    std::int64_t cols, float p, DropoutKey key,
                                    cudaStream_t stream);
cudaError_t launch_bias_dropout_add(const double* x, const double* bias, const double* residual,
                                    double* y, std::int64_t n, std::int64_t cols, float p,
                                    DropoutKey key, cudaStream_t stream);

cudaError_t launch_bias_dropout_add_backward(const float* grad_y, float* grad_x, std::int64_t n,
                                             float p, DropoutKey key, cudaStream_t stream);
cudaError_t launch_bias_dropout_add_backward(const __nv_bfloat16* grad_y, __nv_bfloat16* grad_x,
                                             std::int64_t n, float p, DropoutKey key,
                                             cudaStream_t stream);
cudaError_t launch_bias_dropout_add_backward(const double* grad_y, double* grad_x, std::int64_t n,
                                             float p, DropoutKey key, cudaStream_t stream);

}  // namespace parity::kernels
