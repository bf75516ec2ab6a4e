#pragma once
// The layout of a router_diagnostics observation (megatron-reference.md
// section 3.7): a float32 tensor [b, kRouterDiagnosticChannelCount, E], one
// row of channels per local sequence, E experts per channel.
//
// This is the one home of the layout. The model builds the tensor
// (harness/model/router_diagnostics.h) and the router metrics read it
// (harness/metrics/statistics/router_metrics.h); metrics never include the model, so the
// layout sits on the observation floor below both, beside the source kind it
// describes.
#include <cstdint>

namespace parity {

enum class RouterDiagnosticChannel : std::int64_t {
  mean_score = 0,                     // mean normalized score per expert over the valid tokens
  aux_load = 1,                       // unbiased top-k assignments per expert / their total
  actual_load = 2,                    // dispatched assignments per expert / their total
  expert_bias = 3,                    // the expert-selection bias vector (0 without one)
  aux_actual_overlap = 4,             // element 0: |aux and actual| / |aux|
  valid_token_count = 5,              // element 0: the sequence's non-padding tokens
  topk_boundary_relative_margin = 6,  // element 0: see build_router_diagnostics
};
inline constexpr std::int64_t kRouterDiagnosticChannelCount = 7;

// The channel's index along dim 1 of the diagnostics tensor.
constexpr std::int64_t channel_index(RouterDiagnosticChannel channel) {
  return static_cast<std::int64_t>(channel);
}

}  // namespace parity
