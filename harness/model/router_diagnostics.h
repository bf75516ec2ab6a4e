#pragma once
// The router's compact per-sequence summary, the tensor of a router_diagnostics
// observation (megatron-reference.md section 3.7; Megatron's
// build_router_diagnostics). Its channel layout lives in
// harness/observation/router_diagnostic_channels.h, shared with the metrics.
#include <cstdint>

#include <ATen/ATen.h>

#include "harness/observation/router_diagnostic_channels.h"

namespace parity {

// Builds float32 [b, kRouterDiagnosticChannelCount, E], one row of channels per
// local sequence. Tokens are flattened from [s, b] row-major: token
// t = si * b + bi belongs to sequence bi.
//
//   scores        [s*b, E], each token's normalized scores over the experts
//   aux_map       bool [s*b, E], the unbiased top-k selection (the aux loss's)
//   actual_map    bool [s*b, E], the dispatched selection: after the expert bias,
//                 forced balancing and capacity dropping
//   expert_bias   [E], or undefined when the router has no bias
//   padding_mask  bool [s*b] (true = padding), or undefined (every token valid)
//
// Padding tokens are zeroed out of every channel: they add nothing to a score,
// a count or a margin. For sequence bi with n valid tokens:
//   mean_score     sum of the valid tokens' scores / n
//   aux_load       per expert, aux_map assignments of the valid tokens divided
//                  by the total aux_map assignments of the valid tokens (n * k
//                  for top-k), so the channel sums to 1
//   actual_load    the same with actual_map and its own total (the dispatched
//                  assignments of the valid tokens; dropped ones are not in it),
//                  so it sums to 1 unless every assignment was dropped (then 0)
//   expert_bias    the bias vector (0 when undefined)
//   element 0 of aux_actual_overlap: valid assignments in both maps / valid
//                  aux_map assignments
//   element 0 of valid_token_count: n
//   element 0 of topk_boundary_relative_margin: the mean, over the valid tokens
//                  whose aux_map row has both a selected and an unselected
//                  expert, of max(0, min selected score - max unselected score)
//                  / min selected score (the floor's denominator clamped at fp32
//                  epsilon); 0 when no token has such a boundary
// A sequence with n = 0 yields all zeros (count 0, no bias): the metrics skip
// it, and nothing of it can look like a routed sequence.
//
// Throws std::invalid_argument when s or b is not positive, scores is not
// [s*b, E] with E >= 2, a map's shape differs from scores', expert_bias is not
// [E], or padding_mask does not hold s*b elements.
at::Tensor build_router_diagnostics(const at::Tensor& scores, const at::Tensor& aux_map,
                                    const at::Tensor& actual_map, const at::Tensor& expert_bias,
                                    std::int64_t s, std::int64_t b, const at::Tensor& padding_mask);

}  // namespace parity
