#pragma once
// The four metrics over router_diagnostics observations (megatron-reference.md
// section 3.7; Megatron's layer-router-* diagnostics metrics). Each is a table
// of operations (a statistic of router_statistics.h and how sequences
// aggregate), reported under labels "<layer>/<operation>", "global/<operation>"
// and "worst-layer/<operation>" (docs/metrics.md lists every operation).
//
// Aggregations over the valid sequences (>= 1 valid token) of a layer:
//   mean    (sum, count) of the per-sequence values, SUM-reduced; sum / count
//           (0 with no valid sequence)
//   max/min the extreme per-sequence value, MAX/MIN-reduced (-inf/+inf when none)
//   global  token-weighted sums of the score, aux and actual distributions,
//           SUM-reduced, renormalized, and the statistic computed on them (the
//           global batch's loss, imbalance, ...)
// Labels across layers: "global/<op>" is the op over every layer's sequences
// together for mean, max and min (a layer's sequences are the same population
// in every layer, so a mean equals the mean of the per-layer means) and the
// mean of the per-layer values for global ops; "worst-layer/<op>" is the
// largest per-layer value (the smallest for the boundary margin and for min
// ops). Sites without a layer label are not reported.
//
// Placements: tp and cp must be Replica (the model observes diagnostics only
// when neither splits a sequence: CP = 1 and not SP x TP > 1); dp is Replica or
// Shard (sequences split over DP ranks). Anything else is rejected at prepare
// with std::invalid_argument naming the metric and the site.
//
// prepare compacts a microbatch to sums, counts, maxima and minima (fp64), so
// that microbatches and DP shards merge exactly as the concatenated batch.
#include <memory>
#include <string>

#include "harness/metrics/metric.h"

namespace parity {

enum class RouterMetricFamily : std::int8_t {
  health,                 // layer-router-health: global and worst-layer only
  seq_aux_decomposition,  // layer-router-seq-aux-decomposition
  routing_balance,        // layer-router-routing-balance
  expert_bias,            // layer-router-expert-bias
};

std::unique_ptr<Metric> make_router_metric(RouterMetricFamily family, std::string name,
                                           KindSet kinds);

}  // namespace parity
