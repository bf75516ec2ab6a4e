#include "harness/model/router_diagnostics.h"
#include "harness/base/check.h"

#include <limits>
#include <stdexcept>
#include <string>

namespace parity {

namespace {

std::string shape_text(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

void validate(const at::Tensor& scores, const at::Tensor& aux_map, const at::Tensor& actual_map,
              const at::Tensor& expert_bias, std::int64_t s, std::int64_t b,
              const at::Tensor& padding_mask) {
  auto fail = [](const std::string& what) { PARITY_FAIL("build_router_diagnostics: " + what); };
  if (s <= 0 || b <= 0)
    fail("needs a positive sequence length and batch size (s = " + std::to_string(s) +
         ", b = " + std::to_string(b) + ")");
  if (!scores.defined() || scores.dim() != 2 || scores.size(0) != s * b || scores.size(1) < 2)
    fail("scores must be [s*b, E] = [" + std::to_string(s * b) + ", E] with E >= 2, not " +
         (scores.defined() ? shape_text(scores) : std::string("undefined")));
  for (const auto& [name, map] :
       {std::pair<const char*, const at::Tensor&>{"aux_map", aux_map}, {"actual_map", actual_map}})
    if (!map.defined() || map.sizes() != scores.sizes())
      fail(std::string(name) + " must have the scores' shape " + shape_text(scores) + ", not " +
           (map.defined() ? shape_text(map) : std::string("undefined")));
  if (expert_bias.defined() && (expert_bias.dim() != 1 || expert_bias.size(0) != scores.size(1)))
    fail("expert_bias must be [E] = [" + std::to_string(scores.size(1)) + "], not " +
         shape_text(expert_bias));
  if (padding_mask.defined() && padding_mask.numel() != s * b)
    fail("padding_mask must hold s*b = " + std::to_string(s * b) + " elements, not " +
         std::to_string(padding_mask.numel()));
}

}  // namespace

at::Tensor build_router_diagnostics(const at::Tensor& scores, const at::Tensor& aux_map,
                                    const at::Tensor& actual_map, const at::Tensor& expert_bias,
                                    std::int64_t s, std::int64_t b,
                                    const at::Tensor& padding_mask) {
  validate(scores, aux_map, actual_map, expert_bias, s, b, padding_mask);
  at::NoGradGuard no_grad;
  const std::int64_t e = scores.size(1);
  const auto f32 = scores.options().dtype(at::kFloat);
  // [s, b] so that summing over dim 0 gives one value per sequence.
  const at::Tensor valid = padding_mask.defined()
                               ? padding_mask.to(at::kBool).reshape({s, b}).logical_not()
                               : at::ones({s, b}, scores.options().dtype(at::kBool));
  const at::Tensor valid_e = valid.unsqueeze(-1);
  // where(), not a product: a padding token's score must not leak a NaN in.
  const at::Tensor score =
      at::where(valid_e, scores.detach().to(at::kFloat).reshape({s, b, e}), at::zeros({}, f32));
  const at::Tensor aux = aux_map.to(at::kBool).reshape({s, b, e}).logical_and(valid_e);
  const at::Tensor actual = actual_map.to(at::kBool).reshape({s, b, e}).logical_and(valid_e);

  const at::Tensor count = valid.sum(0).to(at::kFloat);  // [b]
  const at::Tensor mean_score = score.sum(0) / count.clamp_min(1).unsqueeze(-1);
  const at::Tensor aux_counts = aux.sum(0).to(at::kFloat);  // [b, E]
  const at::Tensor actual_counts = actual.sum(0).to(at::kFloat);
  const at::Tensor aux_total = aux_counts.sum(-1, /*keepdim=*/true);
  const at::Tensor aux_load = aux_counts / aux_total.clamp_min(1);
  const at::Tensor actual_load = actual_counts / actual_counts.sum(-1, true).clamp_min(1);
  const at::Tensor overlap = aux.logical_and(actual).sum(at::IntArrayRef{0, 2}).to(at::kFloat) /
                             aux_total.squeeze(-1).clamp_min(1);

  // The top-k boundary of each valid token's unbiased selection.
  const at::Tensor has_boundary =
      aux.any(-1).logical_and(aux.logical_not().any(-1)).logical_and(valid);  // [s, b]
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor floor = score.masked_fill(aux.logical_not(), inf).amin(-1);
  at::Tensor ceiling = score.masked_fill(aux, -inf).amax(-1);
  // Tokens without a boundary get equal finite sentinels: margin 0, no inf or NaN.
  floor = at::where(has_boundary, floor, at::ones_like(floor));
  ceiling = at::where(has_boundary, ceiling, floor);
  const at::Tensor relative =
      (floor - ceiling).clamp_min(0) / floor.clamp_min(std::numeric_limits<float>::epsilon());
  const at::Tensor margin =
      relative.sum(0) / has_boundary.sum(0).to(at::kFloat).clamp_min(1);  // [b]

  at::Tensor out = at::zeros({b, kRouterDiagnosticChannelCount, e}, f32);
  auto channel = [&](RouterDiagnosticChannel c) { return out.select(1, channel_index(c)); };
  auto element0 = [&](RouterDiagnosticChannel c) { return channel(c).select(1, 0); };
  channel(RouterDiagnosticChannel::mean_score).copy_(mean_score);
  channel(RouterDiagnosticChannel::aux_load).copy_(aux_load);
  channel(RouterDiagnosticChannel::actual_load).copy_(actual_load);
  if (expert_bias.defined())  // a sequence without valid tokens keeps all zeros
    channel(RouterDiagnosticChannel::expert_bias)
        .copy_(at::where((count > 0).unsqueeze(-1), expert_bias.detach().to(at::kFloat),
                         at::zeros({}, f32)));
  element0(RouterDiagnosticChannel::aux_actual_overlap).copy_(overlap);
  element0(RouterDiagnosticChannel::valid_token_count).copy_(count);
  element0(RouterDiagnosticChannel::topk_boundary_relative_margin).copy_(margin);
  return out;
}

}  // namespace parity
