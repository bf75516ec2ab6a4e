// The default definitions of Backend's primitive ops: plain, obviously-correct
// ATen compositions with ATen's autograd (no fused kernels, no hand-written
// backward), on whatever device the tensors live. The reference backend keeps
// all of them; the CUDA backend overrides those ATen has one kernel for.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "harness/backend/backend.h"
#include "harness/backend/tensor_statistics.h"

namespace parity {

namespace {

// Statistics and softmax run in fp64 for fp64 inputs, else in fp32.
at::ScalarType compute_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// A keep-mask scaled by 1/(1-p), drawn in fp32 whatever x's dtype (so every
// dtype draws the same masks from the same generator state).
at::Tensor dropout_scale_mask(const at::Tensor& like, double p, at::Generator& generator) {
  at::Tensor keep = at::empty(like.sizes(), like.options().dtype(at::kFloat));
  keep.bernoulli_(1.0 - p, generator);
  return keep.to(like.scalar_type()) / (1.0 - p);
}

}  // namespace

at::Tensor Backend::linear(const at::Tensor& x, const at::Tensor& weight,
                           const at::Tensor& bias) const {
  at::Tensor y = at::matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

at::Tensor Backend::layer_norm(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, double eps) const {
  const auto ct = compute_dtype(x);
  at::Tensor xf = x.to(ct);
  at::Tensor mean = xf.mean({-1}, /*keepdim=*/true);
  at::Tensor centered = xf - mean;
  at::Tensor var = (centered * centered).mean({-1}, /*keepdim=*/true);
  at::Tensor y = centered * at::rsqrt(var + eps) * weight.to(ct);
  if (bias.defined()) y = y + bias.to(ct);
  return y.to(weight.scalar_type());
}

at::Tensor Backend::rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  const auto ct = compute_dtype(x);
  at::Tensor xf = x.to(ct);
  at::Tensor ms = (xf * xf).mean({-1}, /*keepdim=*/true);
  return (xf * at::rsqrt(ms + eps) * weight.to(ct)).to(weight.scalar_type());
}

at::Tensor Backend::causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& q_positions, const at::Tensor& k_positions,
                                     const at::Tensor& q_documents, const at::Tensor& k_documents,
                                     double scale) const {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "causal_attention: q, k, v must be [s, b, heads, head_dim]");
  const auto ct = compute_dtype(q);
  const std::int64_t sq = q.size(0), b = q.size(1), np = q.size(2), hn = q.size(3);
  // [s, b, np, hn] -> [b, np, s, hn]
  at::Tensor qh = q.to(ct).permute({1, 2, 0, 3});
  at::Tensor kh = k.to(ct).permute({1, 2, 0, 3});
  at::Tensor vh = v.to(ct).permute({1, 2, 0, 3});
  at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) * scale;           // [b, np, sq, sk]
  at::Tensor masked = k_positions.view({1, -1}) > q_positions.view({-1, 1});  // [sq, sk]
  if (q_documents.defined())
    masked = masked.logical_or(k_documents.view({1, -1}) != q_documents.view({-1, 1}));
  scores = scores.masked_fill(masked, -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  at::Tensor context = at::matmul(probs, vh);  // [b, np, sq, hn]
  return context.permute({2, 0, 1, 3}).reshape({sq, b, np * hn}).to(q.scalar_type());
}

at::Tensor Backend::gelu(const at::Tensor& x) const {
  return x * 0.5 * (1.0 + at::erf(x * M_SQRT1_2));
}

at::Tensor Backend::swiglu(const at::Tensor& x) const {
  auto halves = x.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

at::Tensor Backend::bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                     const at::Tensor& residual, double p, bool training,
                                     at::Generator& generator) const {
  at::Tensor y = x.to(residual.scalar_type());
  if (bias.defined()) y = y + bias.to(residual.scalar_type());
  if (training && p > 0.0) y = y * dropout_scale_mask(y, p, generator);
  return residual + y;
}

at::Tensor Backend::dropout(const at::Tensor& x, double p, bool training,
                            at::Generator& generator) const {
  if (!training || p <= 0.0) return x;
  return x * dropout_scale_mask(x, p, generator);
}

at::Tensor Backend::embedding(const at::Tensor& ids, const at::Tensor& weight) const {
  std::vector<std::int64_t> shape(ids.sizes().begin(), ids.sizes().end());
  shape.push_back(weight.size(1));
  return weight.index_select(0, ids.reshape({-1})).view(shape);
}

TensorStatistics Backend::tensor_statistics(const at::Tensor& x) const {
  const at::Tensor a = x.to(accumulation_dtype(x.scalar_type()));
  TensorStatistics s;
  s.sum_sq = (a * a).sum();
  s.sum = a.sum();
  s.min = a.min();
  s.max = a.max();
  s.abs_max = a.abs().max();
  s.nan_count = a.isnan().sum().to(at::kDouble);
  s.inf_count = a.isinf().sum().to(at::kDouble);
  return s;
}

at::Tensor Backend::sums_of_squares(const at::Tensor& x, bool per_row) const {
  // Contiguous first, as the metrics do: a strided view would sum in another order.
  const at::Tensor a = x.to(accumulation_dtype(x.scalar_type())).contiguous();
  const std::int64_t k = x.size(-1);
  std::int64_t rows = 1;
  for (std::int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  const at::Tensor matrix = (a * a).reshape({rows, k});
  return per_row ? matrix.sum(1) : matrix.sum(0);
}

}  // namespace parity
