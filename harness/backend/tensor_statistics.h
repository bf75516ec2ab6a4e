#pragma once
// What the logical metrics read from one observed tensor, and the dtype they
// accumulate in: the one home of that rule (metrics, backends and kernels follow
// it). Backend::tensor_statistics computes them in one read where a backend can
// (the CUDA backend's fused kernel, cuda/kernels/metric_prepare.h).
#include <ATen/core/Tensor.h>

namespace parity {

// fp64 stays fp64; everything else (fp32, bf16, fp16, integers) accumulates in fp32.
inline at::ScalarType accumulation_dtype(at::ScalarType observed) {
  return observed == at::kDouble ? at::kDouble : at::kFloat;
}

// 0-dim tensors on the observed tensor's device: the first five in its
// accumulation dtype, the counts in fp64. A NaN makes sum_sq, sum, min, max and
// abs_max NaN (ATen's reductions propagate it).
struct TensorStatistics {
  at::Tensor sum_sq, sum, min, max, abs_max;
  at::Tensor nan_count, inf_count;
};

}  // namespace parity
