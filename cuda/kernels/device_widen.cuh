#pragma once
// Device-side widen/narrow (nvcc only): __nv_bfloat16 converts exactly to fp32
// and back with round-to-nearest-even, as the host's Bf16 (bf16.h) does. Its
// accumulation type is widen.h's default, fp32.
#include <cuda_bf16.h>

#include "cuda/kernels/widen.h"

namespace parity::kernels {

__device__ inline float widen_device(float x) { return x; }
__device__ inline double widen_device(double x) { return x; }
__device__ inline float widen_device(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ inline T narrow_device(Acc<T> x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 narrow_device<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

}  // namespace parity::kernels
