#include "cuda/kernels/bias_dropout_add_twin.h"

#include "cuda/kernels/widen.h"

namespace parity::kernels {

namespace {

template <typename T>
void forward(const T* x, const T* bias, const T* residual, T* y, std::int64_t n, std::int64_t cols,
             float p, DropoutKey captured_or_value) {
  const DropoutKey key = resolved(captured_or_value);
  const Acc<T> scale = dropout_scale<Acc<T>>(p);
  for (std::int64_t i = 0; i < n; ++i) {
    const Acc<T> b = bias ? widen(bias[i % cols]) : Acc<T>(0);
    y[i] = narrow<T>(bias_dropout_add_element(widen(x[i]), bias ? &b : nullptr, widen(residual[i]),
                                              dropout_keeps(key, i, p), scale));
  }
}

template <typename T>
void backward(const T* grad_y, T* grad_x, std::int64_t n, float p, DropoutKey captured_or_value) {
  const DropoutKey key = resolved(captured_or_value);
  const Acc<T> scale = dropout_scale<Acc<T>>(p);
  for (std::int64_t i = 0; i < n; ++i)
    grad_x[i] = narrow<T>(widen(grad_y[i]) * (dropout_keeps(key, i, p) ? scale : Acc<T>(0)));
}

}  // namespace

void bias_dropout_add_twin(const float* x, const float* bias, const float* residual, float* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key) {
  forward(x, bias, residual, y, n, cols, p, key);
}
void bias_dropout_add_twin(const Bf16* x, const Bf16* bias, const Bf16* residual, Bf16* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key) {
  forward(x, bias, residual, y, n, cols, p, key);
}
void bias_dropout_add_twin(const double* x, const double* bias, const double* residual, double* y,
                           std::int64_t n, std::int64_t cols, float p, DropoutKey key) {
  forward(x, bias, residual, y, n, cols, p, key);
}
void bias_dropout_add_backward_twin(const float* grad_y, float* grad_x, std::int64_t n, float p,
                                    DropoutKey key) {
  backward(grad_y, grad_x, n, p, key);
}
void bias_dropout_add_backward_twin(const Bf16* grad_y, Bf16* grad_x, std::int64_t n, float p,
                                    DropoutKey key) {
  backward(grad_y, grad_x, n, p, key);
}
void bias_dropout_add_backward_twin(const double* grad_y, double* grad_x, std::int64_t n, float p,
                                    DropoutKey key) {
  backward(grad_y, grad_x, n, p, key);
}

}  // namespace parity::kernels
