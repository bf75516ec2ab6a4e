#pragma once
// Bias-dropout-add on the GPU in one kernel (cuda/kernels/bias_dropout_add.h),
// differentiable: y = residual + dropout(x + bias) with the mask drawn from the
// rank generator's Philox state; the backward redraws the mask from the same
// key instead of keeping it. Capture-safe: inside a CUDA graph capture the key
// points at the generator's device-side seed and offset (ATen's
// PhiloxCudaState), so each replay draws what an eager step at that generator
// state draws, and a recompute after restoring the generator redraws the mask.
namespace at {
class Tensor;
struct Generator;
}  // namespace at

namespace parity::gpu {

// x, bias (undefined, or one value per element of x's last dim) and residual
// of residual's dtype (fp32, bf16 or fp64), CUDA, x shaped like residual;
// 0 < p < 1. Advances `generator` (a CUDA generator) as one dropout of
// x.numel() elements.
at::Tensor fused_bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                  const at::Tensor& residual, double p, at::Generator& generator);

}  // namespace parity::gpu
