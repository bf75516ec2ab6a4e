#include "cuda/fused_bias_dropout_add.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <mutex>

#include "cuda/kernels/bias_dropout_add.h"

namespace parity::gpu {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The key travels through the autograd context as four integers.
void save_key(AutogradContext* ctx, const kernels::DropoutKey& key) {
  ctx->saved_data["seed"] = static_cast<std::int64_t>(key.seed);
  ctx->saved_data["offset"] = static_cast<std::int64_t>(key.offset);
  ctx->saved_data["seed_at"] = reinterpret_cast<std::int64_t>(key.seed_at);
  ctx->saved_data["offset_at"] = reinterpret_cast<std::int64_t>(key.offset_at);
}

kernels::DropoutKey saved_key(AutogradContext* ctx) {
  kernels::DropoutKey key;
  key.seed = static_cast<std::uint64_t>(ctx->saved_data["seed"].toInt());
  key.offset = static_cast<std::uint64_t>(ctx->saved_data["offset"].toInt());
  key.seed_at = reinterpret_cast<const std::int64_t*>(ctx->saved_data["seed_at"].toInt());
  key.offset_at = reinterpret_cast<const std::int64_t*>(ctx->saved_data["offset_at"].toInt());
  return key;
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T>
T* mut(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

void check(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

struct FusedBiasDropoutAdd : public torch::autograd::Function<FusedBiasDropoutAdd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            const at::Tensor& residual, double p, const kernels::DropoutKey& key) {
    const at::Tensor xc = x.contiguous(), rc = residual.contiguous();
    const at::Tensor bc = bias.defined() ? bias.contiguous() : bias;
    at::Tensor y = at::empty_like(rc);
    const std::int64_t n = y.numel();
    const std::int64_t cols = bc.defined() ? bc.numel() : 1;
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    const float fp = static_cast<float>(p);
    switch (y.scalar_type()) {
      case at::kFloat:
        check(kernels::launch_bias_dropout_add(ptr<float>(xc), ptr<float>(bc), ptr<float>(rc),
                                               mut<float>(y), n, cols, fp, key, stream),
              "bias-dropout-add kernel");
        break;
      case at::kDouble:
        check(kernels::launch_bias_dropout_add(ptr<double>(xc), ptr<double>(bc), ptr<double>(rc),
                                               mut<double>(y), n, cols, fp, key, stream),
              "bias-dropout-add kernel");
        break;
      default:
        check(kernels::launch_bias_dropout_add(ptr<__nv_bfloat16>(xc), ptr<__nv_bfloat16>(bc),
                                               ptr<__nv_bfloat16>(rc), mut<__nv_bfloat16>(y), n,
                                               cols, fp, key, stream),
              "bias-dropout-add kernel");
    }
    save_key(ctx, key);
    ctx->saved_data["p"] = p;
    ctx->saved_data["has_bias"] = bc.defined();
    ctx->saved_data["cols"] = cols;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gy = grads[0].contiguous();
    at::Tensor gx = at::empty_like(gy);
    const std::int64_t n = gy.numel();
    const kernels::DropoutKey key = saved_key(ctx);
    const float p = static_cast<float>(ctx->saved_data["p"].toDouble());
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    switch (gy.scalar_type()) {
      case at::kFloat:
        check(kernels::launch_bias_dropout_add_backward(ptr<float>(gy), mut<float>(gx), n, p, key,
                                                        stream),
              "bias-dropout-add backward kernel");
        break;
      case at::kDouble:
        check(kernels::launch_bias_dropout_add_backward(ptr<double>(gy), mut<double>(gx), n, p, key,
                                                        stream),
              "bias-dropout-add backward kernel");
        break;
      default:
        check(kernels::launch_bias_dropout_add_backward(ptr<__nv_bfloat16>(gy),
                                                        mut<__nv_bfloat16>(gx), n, p, key, stream),
              "bias-dropout-add backward kernel");
    }
    // The bias broadcasts over every row: its gradient is the column sum of dx.
    const at::Tensor gbias = ctx->saved_data["has_bias"].toBool()
                                 ? gx.reshape({-1, ctx->saved_data["cols"].toInt()}).sum(0)
                                 : at::Tensor();
    return {gx, gbias, grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                  const at::Tensor& residual, double p, at::Generator& generator) {
  TORCH_CHECK(
      residual.is_cuda() && x.sizes() == residual.sizes() &&
          (!bias.defined() || bias.numel() == residual.size(-1)),
      "fused_bias_dropout_add: x shaped like residual on the GPU, bias per last-dim element");
  const at::ScalarType dtype = residual.scalar_type();
  kernels::DropoutKey key;
  {
    auto* gen = at::check_generator<at::CUDAGeneratorImpl>(generator);
    std::lock_guard<std::mutex> lock(gen->mutex_);
    const at::PhiloxCudaState state =
        gen->philox_cuda_state(kernels::dropout_offset_increment(residual.numel()));
    if (state.captured_) {
      key.offset = state.offset_intragraph_;
      key.seed_at = state.seed_.ptr;
      key.offset_at = state.offset_.ptr;
    } else {
      key.seed = state.seed_.val;
      key.offset = state.offset_.val;
    }
  }
  return FusedBiasDropoutAdd::apply(x.to(dtype), bias.defined() ? bias.to(dtype) : bias, residual,
                                    p, key);
}

}  // namespace parity::gpu
