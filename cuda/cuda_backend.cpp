#include "cuda/cuda_backend.h"

#include <ATen/ATen.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cstddef>
#include <type_traits>

#include "cuda/cuda_device.h"
#include "cuda/cuda_graph_runner.h"
#include "cuda/fused_bias_dropout_add.h"
#include "cuda/kernels/dimwise_sums.h"
#include "cuda/kernels/metric_prepare.h"
#include "harness/backend/generator_rng_tracker.h"
#include "harness/backend/registry.h"
#include "harness/backend/tensor_statistics.h"

namespace parity::gpu {
namespace {

// Statistics and softmax in fp64 for fp64 inputs, else in fp32 (as the plain ops).
at::ScalarType compute_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

CudaBackend::CudaBackend() {
  available_ = cuda_unavailable_reason().empty();
  if (!available_) return;  // validation reports it; nothing runs
  device_index_ = rank_device_index();
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index_));
  at::cuda::setCurrentCUDAStream(at::cuda::getStreamFromPool(
      /*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device_index_)));
  // fp32 means fp32: TF32 matmuls would put fp32 runs 1e-3 away from the reference.
  at::globalContext().setAllowTF32CuBLAS(false);
}

at::Device CudaBackend::device() const {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index_));
}

std::string CudaBackend::unavailable_reason() const { return cuda_unavailable_reason(); }

namespace {

// Runs the fused prepare of x (contiguous, on the current stream) and views its
// MetricPrepareResult<Acc> as the 0-dim tensors of TensorStatistics: no copy to
// the host, nothing synchronizes.
template <typename Acc, typename Element>
TensorStatistics fused_statistics(const at::Tensor& x, const Element* data) {
  using Result = kernels::MetricPrepareResult<Acc>;
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(x.device());
  const std::int64_t n = x.numel();
  at::Tensor result = at::empty({static_cast<std::int64_t>(sizeof(Result))}, bytes);
  at::Tensor workspace = at::empty(
      {static_cast<std::int64_t>(kernels::metric_prepare_workspace_bytes<Acc>(n, sizeof(Element)))},
      bytes);
  const cudaError_t err = kernels::launch_metric_prepare(
      data, n, reinterpret_cast<Result*>(result.data_ptr()), workspace.data_ptr(),
      at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "metric prepare kernel: ", cudaGetErrorString(err));
  const at::ScalarType acc = std::is_same<Acc, double>::value ? at::kDouble : at::kFloat;
  const at::Tensor values = result.narrow(0, 0, 5 * sizeof(Acc)).view(acc);
  const at::Tensor counts =
      result.narrow(0, offsetof(Result, nan_count), 2 * sizeof(std::int64_t)).view(at::kLong);
  TensorStatistics s;
  s.sum_sq = values[0];
  s.sum = values[1];
  s.min = values[2];
  s.max = values[3];
  s.abs_max = values[4];
  s.nan_count = counts[0].to(at::kDouble);
  s.inf_count = counts[1].to(at::kDouble);
  return s;
}

}  // namespace

at::Tensor CudaBackend::bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                         const at::Tensor& residual, double p, bool training,
                                         at::Generator& generator) const {
  const at::ScalarType dtype = residual.scalar_type();
  const bool fusable = training && p > 0.0 && p < 1.0 && residual.is_cuda() &&
                       x.sizes() == residual.sizes() && residual.dim() > 0 &&
                       (!bias.defined() || bias.numel() == residual.size(-1)) &&
                       (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kDouble);
  // Without dropout the plain composition is the same arithmetic (and keeps
  // backend_parity's dropout-free comparison on the ops it compares).
  if (!fusable) return Backend::bias_dropout_add(x, bias, residual, p, training, generator);
  return fused_bias_dropout_add(x, bias, residual, p, generator);
}

TensorStatistics CudaBackend::tensor_statistics(const at::Tensor& x) const {
  if (!x.is_cuda()) return Backend::tensor_statistics(x);
  // The kernel reads contiguous memory (docs/kernels.md); a strided view is copied.
  const at::Tensor c = x.contiguous();
  switch (c.scalar_type()) {
    case at::kFloat:
      return fused_statistics<float>(c, c.data_ptr<float>());
    case at::kDouble:
      return fused_statistics<double>(c, c.data_ptr<double>());
    case at::kBFloat16:
      return fused_statistics<float>(c, reinterpret_cast<const __nv_bfloat16*>(c.data_ptr()));
    default:
      return Backend::tensor_statistics(x);
  }
}

std::string CudaBackend::captured_collectives_limit(int ranks_on_host,
                                                    bool ranks_are_threads) const {
  if (!available_ || ranks_on_host <= 1) return {};
  const int gpus = static_cast<int>(c10::cuda::device_count());
  // NCCL (capturable) needs one GPU per rank; device_transport.h.
  if (!ranks_are_threads && gpus >= ranks_on_host) return {};
  return std::to_string(ranks_on_host) + (ranks_are_threads ? " thread" : " process") +
         " ranks share " + std::to_string(gpus) +
         " GPU(s), so their collectives go through the host, which a CUDA graph cannot capture";
}

at::Tensor CudaBackend::linear(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias) const {
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

at::Tensor CudaBackend::layer_norm(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& bias, double eps) const {
  const auto ct = compute_dtype(x);
  const std::int64_t h = x.size(-1);
  at::Tensor y = at::layer_norm(x.to(ct), {h}, weight.to(ct),
                                bias.defined() ? bias.to(ct) : at::Tensor(), eps);
  return y.to(weight.scalar_type());
}

at::Tensor CudaBackend::rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  const auto ct = compute_dtype(x);
  const std::int64_t h = x.size(-1);
  return at::rms_norm(x.to(ct), {h}, weight.to(ct), eps).to(weight.scalar_type());
}

at::Tensor CudaBackend::causal_attention(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& q_positions,
                                         const at::Tensor& k_positions,
                                         const at::Tensor& q_documents,
                                         const at::Tensor& k_documents, double scale) const {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "causal_attention: q, k, v must be [s, b, heads, head_dim]");
  const auto ct = compute_dtype(q);
  const std::int64_t sq = q.size(0), b = q.size(1), np = q.size(2), hn = q.size(3);
  // [s, b, np, hn] -> [b, np, s, hn]; fp32 (fp64) inputs as the plain op computes.
  at::Tensor qh = q.to(ct).permute({1, 2, 0, 3});
  at::Tensor kh = k.to(ct).permute({1, 2, 0, 3});
  at::Tensor vh = v.to(ct).permute({1, 2, 0, 3});
  // Global positions (CP chunks): query i sees key j iff k_pos[j] <= q_pos[i].
  at::Tensor allowed = k_positions.view({1, -1}) <= q_positions.view({-1, 1});  // [sq, sk]
  // Packed sequences: only keys of the query's document (cu_seqlens).
  if (q_documents.defined())
    allowed = allowed.logical_and(k_documents.view({1, -1}) == q_documents.view({-1, 1}));
  at::Tensor context = at::scaled_dot_product_attention(qh, kh, vh, allowed, /*dropout_p=*/0.0,
                                                        /*is_causal=*/false, scale);
  return context.permute({2, 0, 1, 3}).reshape({sq, b, np * hn}).to(q.scalar_type());
}

at::Tensor CudaBackend::gelu(const at::Tensor& x) const { return at::gelu(x); }

at::Tensor CudaBackend::embedding(const at::Tensor& ids, const at::Tensor& weight) const {
  return at::embedding(weight, ids);
}

std::unique_ptr<RngTracker> CudaBackend::make_rng_tracker() const {
  const auto index = static_cast<c10::DeviceIndex>(device_index_);
  return make_generator_rng_tracker(
      [index] { return at::make_generator<at::CUDAGeneratorImpl>(index); });
}

std::unique_ptr<GraphRunner> CudaBackend::make_graph_runner() const {
  return std::make_unique<CudaGraphRunner>(static_cast<c10::DeviceIndex>(device_index_));
}

namespace {
const BackendRegistrar kRegistrar("cuda", [] { return std::make_unique<CudaBackend>(); });
}  // namespace

namespace {

template <typename Acc, typename Element>
at::Tensor fused_sums_of_squares(const at::Tensor& x, const Element* data, std::int64_t rows,
                                 std::int64_t cols, bool per_row) {
  const at::ScalarType acc = std::is_same<Acc, double>::value ? at::kDouble : at::kFloat;
  at::Tensor out = at::empty({per_row ? rows : cols}, x.options().dtype(acc));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  cudaError_t err;
  if (per_row) {
    err = kernels::launch_row_sums_of_squares(data, rows, cols, out.data_ptr<Acc>(), stream);
  } else {
    const at::Tensor workspace = at::empty(
        {static_cast<std::int64_t>(kernels::column_sums_workspace_bytes<Acc>(rows, cols))},
        x.options().dtype(at::kByte));
    err = kernels::launch_column_sums_of_squares(data, rows, cols, out.data_ptr<Acc>(),
                                                 workspace.data_ptr(), stream);
  }
  TORCH_CHECK(err == cudaSuccess, "sums of squares kernel: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

at::Tensor CudaBackend::sums_of_squares(const at::Tensor& x, bool per_row) const {
  if (!x.is_cuda() || x.dim() == 0) return Backend::sums_of_squares(x, per_row);
  const at::Tensor c = x.contiguous();
  const std::int64_t cols = c.size(-1);
  const std::int64_t rows = cols == 0 ? c.numel() : c.numel() / cols;
  if (cols == 0) return Backend::sums_of_squares(x, per_row);  // nothing to read
  switch (c.scalar_type()) {
    case at::kFloat:
      return fused_sums_of_squares<float>(c, c.data_ptr<float>(), rows, cols, per_row);
    case at::kDouble:
      return fused_sums_of_squares<double>(c, c.data_ptr<double>(), rows, cols, per_row);
    case at::kBFloat16:
      return fused_sums_of_squares<float>(c, reinterpret_cast<const __nv_bfloat16*>(c.data_ptr()),
                                          rows, cols, per_row);
    default:
      return Backend::sums_of_squares(x, per_row);
  }
}

}  // namespace parity::gpu
