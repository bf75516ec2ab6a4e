#include "cuda/kernels/bias_dropout_add.h"

#include <algorithm>

#include "cuda/kernels/device_widen.cuh"
#include "cuda/kernels/reduction_order.h"

namespace parity::kernels {

namespace {

// Blocks of the elementwise launches: grid-stride beyond this (the result does
// not depend on the grid: every element is computed alone).
constexpr std::int64_t kMaxElementwiseBlocks = 8192;

unsigned elementwise_blocks(std::int64_t groups) {
  return static_cast<unsigned>(std::min(ceil_div(groups, kThreads), kMaxElementwiseBlocks));
}

// Each thread takes groups of 4 elements: one Philox call draws their 4 words.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward(const T* x, const T* bias, const T* residual, T* y, std::int64_t n, std::int64_t cols,
            float p, DropoutKey captured_or_value) {
  const DropoutKey key = resolved(captured_or_value);
  const Acc<T> scale = dropout_scale<Acc<T>>(p);
  const std::int64_t groups = (n + 3) / 4;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups;
       g += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const Philox4x32 draws = philox_group(key.seed, key.offset, static_cast<std::uint64_t>(g));
    for (int k = 0; k < 4 && g * 4 + k < n; ++k) {
      const std::int64_t i = g * 4 + k;
      const Acc<T> b = bias ? widen_device(bias[i % cols]) : Acc<T>(0);
      y[i] = narrow_device<T>(bias_dropout_add_element(widen_device(x[i]), bias ? &b : nullptr,
                                                       widen_device(residual[i]),
                                                       dropout_keep(draws.v[k], p), scale));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward(const T* grad_y, T* grad_x, std::int64_t n, float p, DropoutKey captured_or_value) {
  const DropoutKey key = resolved(captured_or_value);
  const Acc<T> scale = dropout_scale<Acc<T>>(p);
  const std::int64_t groups = (n + 3) / 4;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups;
       g += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const Philox4x32 draws = philox_group(key.seed, key.offset, static_cast<std::uint64_t>(g));
    for (int k = 0; k < 4 && g * 4 + k < n; ++k) {
      const std::int64_t i = g * 4 + k;
      grad_x[i] = narrow_device<T>(widen_device(grad_y[i]) *
                                   (dropout_keep(draws.v[k], p) ? scale : Acc<T>(0)));
    }
  }
}

template <typename T>
cudaError_t forward_launch(const T* x, const T* bias, const T* residual, T* y, std::int64_t n,
                           std::int64_t cols, float p, DropoutKey key, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  forward<T><<<elementwise_blocks((n + 3) / 4), kThreads, 0, stream>>>(x, bias, residual, y, n,
                                                                       cols, p, key);
  return cudaGetLastError();
}

template <typename T>
cudaError_t backward_launch(const T* grad_y, T* grad_x, std::int64_t n, float p, DropoutKey key,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  backward<T><<<elementwise_blocks((n + 3) / 4), kThreads, 0, stream>>>(grad_y, grad_x, n, p, key);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bias_dropout_add(const float* x, const float* bias, const float* residual,
                                    float* y, std::int64_t n, std::int64_t cols, float p,
                                    DropoutKey key, cudaStream_t stream) {
  return forward_launch(x, bias, residual, y, n, cols, p, key, stream);
}
cudaError_t launch_bias_dropout_add(const __nv_bfloat16* x, const __nv_bfloat16* bias,
                                    const __nv_bfloat16* residual, __nv_bfloat16* y, std::int64_t n,
                                    std::int64_t cols, float p, DropoutKey key,
                                    cudaStream_t stream) {
  return forward_launch(x, bias, residual, y, n, cols, p, key, stream);
}
cudaError_t launch_bias_dropout_add(const double* x, const double* bias, const double* residual,
                                    double* y, std::int64_t n, std::int64_t cols, float p,
                                    DropoutKey key, cudaStream_t stream) {
  return forward_launch(x, bias, residual, y, n, cols, p, key, stream);
}
cudaError_t launch_bias_dropout_add_backward(const float* grad_y, float* grad_x, std::int64_t n,
                                             float p, DropoutKey key, cudaStream_t stream) {
  return backward_launch(grad_y, grad_x, n, p, key, stream);
}
cudaError_t launch_bias_dropout_add_backward(const __nv_bfloat16* grad_y, __nv_bfloat16* grad_x,
                                             std::int64_t n, float p, DropoutKey key,
                                             cudaStream_t stream) {
  return backward_launch(grad_y, grad_x, n, p, key, stream);
}
cudaError_t launch_bias_dropout_add_backward(const double* grad_y, double* grad_x, std::int64_t n,
                                             float p, DropoutKey key, cudaStream_t stream) {
  return backward_launch(grad_y, grad_x, n, p, key, stream);
}

}  // namespace parity::kernels
