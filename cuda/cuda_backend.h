#pragma once
// The CUDA backend: the same model (harness/model, written once) on CUDA
// tensors. Ops are LibTorch's CUDA ATen kernels, fused where ATen has one
// kernel for the op (linear with its bias epilogue, layer_norm, rms_norm,
// scaled-dot-product attention, gelu, embedding); the others keep the
// interface's plain compositions (harness/backend/plain_ops.cpp), which run on
// the device as they are. Dropout masks come from the device's Philox
// generators (one pair per rank, snapshotted and restored for recompute),
// graphs are real CUDA graphs (cuda_graph_runner.h), collectives go through
// transport "cuda" (device_transport.h: NCCL with one rank per GPU, the host
// otherwise). Registered as "cuda"; unavailable (exit 2) without a GPU.
#include "harness/backend/backend.h"

namespace parity::gpu {

class CudaBackend final : public Backend {
 public:
  // Binds the calling thread (a rank thread) to the rank's device and to a
  // stream of its own, so thread ranks sharing a GPU never serialize on the
  // legacy default stream and a capture on one rank thread (thread-local
  // capture mode) is not invalidated by another's work.
  CudaBackend();

  std::string_view name() const override { return "cuda"; }
  std::string_view transport_name() const override { return "cuda"; }
  at::Device device() const override;
  std::string unavailable_reason() const override;
  std::string captured_collectives_limit(int ranks_on_host, bool ranks_are_threads) const override;

  at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias) const override;
  at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        double eps) const override;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_positions, const at::Tensor& k_positions,
                              const at::Tensor& q_documents, const at::Tensor& k_documents,
                              double scale) const override;
  at::Tensor gelu(const at::Tensor& x) const override;
  at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) const override;
  // Training with dropout on a fp32, bf16 or fp64 residual on the GPU: one
  // kernel with the mask from the generator's Philox state, redrawn in the
  // backward (fused_bias_dropout_add.h); otherwise the plain composition.
  at::Tensor bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                              const at::Tensor& residual, double p, bool training,
                              at::Generator& generator) const override;
  // The fused one-read kernel (cuda/kernels/metric_prepare.h) on the rank's
  // stream for fp32, bf16 and fp64 CUDA tensors; the default otherwise.
  TensorStatistics tensor_statistics(const at::Tensor& x) const override;
  // The deterministic row/column kernel (cuda/kernels/dimwise_sums.h); the
  // default for tensors it does not take.
  at::Tensor sums_of_squares(const at::Tensor& x, bool per_row) const override;

  std::unique_ptr<RngTracker> make_rng_tracker() const override;
  std::unique_ptr<GraphRunner> make_graph_runner() const override;

 private:
  int device_index_ = 0;
  bool available_ = false;
};

}  // namespace parity::gpu
