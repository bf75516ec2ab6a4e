#pragma once
// The reference backend: every op in plain, obviously-correct ATen CPU ops with
// ATen's autograd (no fused kernels, no hand-written backward). Registered as
// "reference" (transport "gloo") by a static registrar in reference_backend.cpp.
#include "harness/backend/backend.h"

namespace parity::reference {

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string_view transport_name() const override { return "gloo"; }

  at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias) const override;
  at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        double eps) const override;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_positions, const at::Tensor& k_positions,
                              double scale) const override;
  at::Tensor gelu(const at::Tensor& x) const override;
  at::Tensor swiglu(const at::Tensor& x) const override;
  at::Tensor bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                              const at::Tensor& residual, double p, bool training,
                              at::Generator& generator) const override;
  at::Tensor dropout(const at::Tensor& x, double p, bool training,
                     at::Generator& generator) const override;
  at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) const override;

  std::unique_ptr<RngTracker> make_rng_tracker() const override;
  // The CPU emulation of graph phases (reference/graph_emulation.h).
  std::unique_ptr<GraphRunner> make_graph_runner() const override;
};

}  // namespace parity::reference
