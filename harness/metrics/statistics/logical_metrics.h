#pragma once
// Metrics that follow the logical-reduction rule (megatron-reference.md 3.3):
// prepare compacts the local tensor to a fixed-width contribution; the
// contributions are reduced with one op over every non-Replica axis (placeholders
// and empty shards contribute the identity); finalize is local.
//
//   statistic   contribution (accumulation dtype)   op    finalize
//   l2          [sum x^2]                            sum   sqrt
//   max         [max x]                              max   -
//   abs_max     [max |x|]                            max   -
//   min         [min x]                              min   -
//   mean        [sum x, count]                       sum   sum / count
//   rms         [sum x^2, count]                     sum   sqrt(sum / count)
//   nan_count   [#NaN] (fp64)                        sum   -
//   inf_count   [#(+-Inf)] (fp64)                    sum   -
#include <memory>
#include <string>

#include "harness/metrics/metric.h"

namespace parity {

enum class LogicalStatistic : std::int8_t {
  l2,
  max,
  abs_max,
  min,
  mean,
  rms,
  nan_count,
  inf_count
};

std::unique_ptr<Metric> make_logical_metric(LogicalStatistic statistic, std::string name,
                                            KindSet kinds, LabelScope scope);

}  // namespace parity
