#pragma once
// Host twins of bias_dropout_add.h's kernels: the same mask (same Philox
// draws) and the same arithmetic, bit for bit. Same arguments, host pointers.
#include <cstdint>

#include "cuda/kernels/bf16.h"
#include "cuda/kernels/dropout_element.h"

namespace parity::kernels {

void bias_dropout_add_twin(const float* x, const float* bias, const float* residual, float* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key);
void bias_dropout_add_twin(const Bf16* x, const Bf16* bias, const Bf16* residual, Bf16* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key);
void bias_dropout_add_twin(const double* x, const double* bias, const double* residual, double* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key);

void bias_dropout_add_backward_twin(const float* grad_y, float* grad_x, std::int64_t n, float p,
                                    DropoutKey key);
void bias_dropout_add_backward_twin(const Bf16* grad_y, Bf16* grad_x, std::int64_t n, float p,
                                    DropoutKey key);
void bias_dropout_add_backward_twin(const double* grad_y, double* grad_x, std::int64_t n, float p,
                                    DropoutKey key);

}  // namespace parity::kernels
