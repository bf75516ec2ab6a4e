#pragma once
// The statistics of router diagnostics (megatron-reference.md section 3.7),
// over E experts with u = 1/E. Each is computed per row of distributions: a
// sequence's channels, or a whole batch's renormalized token-weighted sums
// (the "global" aggregation of router_metrics.h). Balanced routing (every
// distribution uniform) gives losses and max-over-mean 1, imbalances and
// gaps 0.
#include <cstdint>

#include <ATen/ATen.h>

namespace parity {

enum class RouterStatistic : std::int8_t {
  seq_aux_loss,              // E * sum(aux * score): the sequence-level aux loss
  aux_load_imbalance,        // E * sum((aux - u)^2)
  score_imbalance,           // E * sum((score - u)^2)
  imbalance_coupling,        // E * sum((aux - u) * (score - u))
  imbalance_alignment,       // cosine of (aux - u) and (score - u); 0 if either is 0
  actual_load_imbalance,     // E * sum((actual - u)^2)
  aux_actual_tv,             // total variation: sum(|aux - actual|) / 2
  aux_max_over_mean,         // E * max(aux)
  actual_max_over_mean,      // E * max(actual)
  actual_inactive_fraction,  // fraction of experts with actual == 0
  bias_mean,                 // of the bias vector over experts
  bias_std,                  // population standard deviation
  bias_rms,
  bias_range,  // max - min
  bias_abs_max,
  bias_score_correlation,  // Pearson over experts; 0 if either side is constant
  bias_aux_load_correlation,
  bias_actual_load_correlation,
  aux_actual_overlap,             // the sequence's channel (no batch form)
  topk_boundary_relative_margin,  // the sequence's channel (no batch form)
};

// Rows of distributions over experts, each [n, E] in fp64.
struct RouterDistributions {
  at::Tensor score;
  at::Tensor aux;
  at::Tensor actual;
  at::Tensor bias;  // may be undefined where no statistic needs it
};

// The distributions of diagnostics [b, 7, E] (any float dtype), one row per
// sequence, in fp64.
RouterDistributions distributions_of(const at::Tensor& diagnostics);

// `statistic` per row: [n] in fp64. aux_actual_overlap and
// topk_boundary_relative_margin are scalar channels, not functions of the
// distributions: they throw std::invalid_argument here (see per_sequence).
at::Tensor statistic_of(const RouterDistributions& rows, RouterStatistic statistic);

// `statistic` of every sequence of diagnostics [b, 7, E]: [b] in fp64,
// sequences without valid tokens included (callers mask them out).
at::Tensor per_sequence(const at::Tensor& diagnostics, RouterStatistic statistic);

// The valid-token count of every sequence: [b] in fp64.
at::Tensor valid_token_counts(const at::Tensor& diagnostics);

}  // namespace parity
