#include "harness/metrics/router_statistics.h"

#include <stdexcept>

#include "harness/base/check.h"
#include "harness/observation/router_diagnostic_channels.h"

namespace parity {

namespace {

at::Tensor channel(const at::Tensor& diagnostics, RouterDiagnosticChannel c) {
  return diagnostics.select(1, channel_index(c)).to(at::kDouble);
}

// E * sum(a * b) over experts, per row.
at::Tensor scaled_dot(const at::Tensor& a, const at::Tensor& b) {
  return static_cast<double>(a.size(-1)) * (a * b).sum(-1);
}

// x / d where d > 0, else 0 (degenerate cosines and correlations).
at::Tensor safe_ratio(const at::Tensor& x, const at::Tensor& d) {
  return at::where(d > 0, x / d, at::zeros_like(x));
}

at::Tensor cosine(const at::Tensor& a, const at::Tensor& b) {
  return safe_ratio((a * b).sum(-1), ((a * a).sum(-1) * (b * b).sum(-1)).sqrt());
}

at::Tensor correlation(const at::Tensor& a, const at::Tensor& b) {
  return cosine(a - a.mean(-1, /*keepdim=*/true), b - b.mean(-1, true));
}

}  // namespace

RouterDistributions distributions_of(const at::Tensor& diagnostics) {
  return {channel(diagnostics, RouterDiagnosticChannel::mean_score),
          channel(diagnostics, RouterDiagnosticChannel::aux_load),
          channel(diagnostics, RouterDiagnosticChannel::actual_load),
          channel(diagnostics, RouterDiagnosticChannel::expert_bias)};
}

at::Tensor statistic_of(const RouterDistributions& rows, RouterStatistic statistic) {
  const double experts = static_cast<double>(rows.score.size(-1));
  const double u = 1.0 / experts;
  const at::Tensor& bias = rows.bias;
  switch (statistic) {
    case RouterStatistic::seq_aux_loss:
      return scaled_dot(rows.aux, rows.score);
    case RouterStatistic::aux_load_imbalance:
      return scaled_dot(rows.aux - u, rows.aux - u);
    case RouterStatistic::score_imbalance:
      return scaled_dot(rows.score - u, rows.score - u);
    case RouterStatistic::imbalance_coupling:
      return scaled_dot(rows.aux - u, rows.score - u);
    case RouterStatistic::imbalance_alignment:
      return cosine(rows.aux - u, rows.score - u);
    case RouterStatistic::actual_load_imbalance:
      return scaled_dot(rows.actual - u, rows.actual - u);
    case RouterStatistic::aux_actual_tv:
      return 0.5 * (rows.aux - rows.actual).abs().sum(-1);
    case RouterStatistic::aux_max_over_mean:
      return rows.aux.amax(-1) * experts;
    case RouterStatistic::actual_max_over_mean:
      return rows.actual.amax(-1) * experts;
    case RouterStatistic::actual_inactive_fraction:
      return rows.actual.eq(0).to(at::kDouble).mean(-1);
    case RouterStatistic::bias_mean:
      return bias.mean(-1);
    case RouterStatistic::bias_std:
      return (bias - bias.mean(-1, true)).square().mean(-1).sqrt();
    case RouterStatistic::bias_rms:
      return bias.square().mean(-1).sqrt();
    case RouterStatistic::bias_range:
      return bias.amax(-1) - bias.amin(-1);
    case RouterStatistic::bias_abs_max:
      return bias.abs().amax(-1);
    case RouterStatistic::bias_score_correlation:
      return correlation(bias, rows.score);
    case RouterStatistic::bias_aux_load_correlation:
      return correlation(bias, rows.aux);
    case RouterStatistic::bias_actual_load_correlation:
      return correlation(bias, rows.actual);
    case RouterStatistic::aux_actual_overlap:
    case RouterStatistic::topk_boundary_relative_margin:
      break;
  }
  PARITY_FAIL(
      "router statistic: the overlap and the boundary margin are per-sequence channels, not "
      "functions of the distributions");
}

at::Tensor per_sequence(const at::Tensor& diagnostics, RouterStatistic statistic) {
  switch (statistic) {
    case RouterStatistic::aux_actual_overlap:
      return channel(diagnostics, RouterDiagnosticChannel::aux_actual_overlap).select(1, 0);
    case RouterStatistic::topk_boundary_relative_margin:
      return channel(diagnostics, RouterDiagnosticChannel::topk_boundary_relative_margin)
          .select(1, 0);
    default:
      return statistic_of(distributions_of(diagnostics), statistic);
  }
}

at::Tensor valid_token_counts(const at::Tensor& diagnostics) {
  return channel(diagnostics, RouterDiagnosticChannel::valid_token_count).select(1, 0);
}

}  // namespace parity
