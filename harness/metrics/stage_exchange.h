#pragma once
// Metrics under pipeline parallelism. A stage observes only the layers it
// builds (the logits on the last stage), yet a metric's `global` label spans
// every layer and a run reports every label on every rank. Before a step's
// programs run, the stages of one (tp, cp, dp) slice exchange their prepared
// values over the pp group: afterwards each holds what a rank without PP holds
// for its slice, so every stage runs the same programs (symmetric collectives)
// and reports the single-rank run's values. The values are small (a metric's
// compacted state per site and microbatch), so the exchange is one all-gather
// of their bytes per step.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

#include "harness/metrics/metric.h"

namespace parity {

class Communicator;

// One site's microbatch values of one metric (the metric's index in the collector).
struct PreparedEntry {
  std::size_t metric = 0;
  MetricSite site;
  std::vector<Prepared> microbatches;
};

// Bytes (uint8, 1-D, on the CPU) of `entries`: their sites, placements and
// shapes as JSON, their tensors' bytes after it.
at::Tensor encode_prepared(const std::vector<PreparedEntry>& entries);
// The inverse; tensors are placed on `device`. Throws std::runtime_error on
// bytes encode_prepared did not write.
std::vector<PreparedEntry> decode_prepared(const at::Tensor& bytes, at::Device device);

// Every stage's entries, in stage order (this stage's own included as given):
// their bytes all-gathered over `pp` (all_gather_bytes).
std::vector<PreparedEntry> gather_across_stages(Communicator& pp,
                                                const std::vector<PreparedEntry>& mine,
                                                at::Device device);

}  // namespace parity
