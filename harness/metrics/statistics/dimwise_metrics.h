#pragma once
// Staged (non-logical) metrics, megatron-reference.md section 3.4. An "item" is
// a row (all leading indices; the reduced dim is the last one) or a column (an
// index of the last dim; the reduced dims are all leading ones).
//
//   stage A (prepare, local): q[item] = sum over the reduced dim(s) of f(x)
//   stage B: all-reduce SUM of q over the axes that split the reduced dim(s)
//            (rows: Shard(last dim), FlatShard; columns: Shard(leading dim),
//            FlatShard) -> complete q per local item
//   stage C (local): n = g(q); pair = (sum n, number of items)
//   stage D: all-reduce SUM of the pair over the remaining non-Replica axes
//            (those that distribute the items, and Owned)
//   finalize: sum / count
//
//   statistic         items    f(x)        g(q)
//   mean_row_l2       rows     x^2         sqrt(q)
//   mean_column_l2    columns  x^2         sqrt(q)
//   entropy           rows     entr(x)     q / ln K  (K = full last dim, >= 2;
//                                                     inputs are distributions)
// Shard(unknown) is rejected (these metrics need the dimension); scalars are
// rejected; entropy rejects FlatShard. Placeholders contribute (0, 0) at stage D
// (they pass stage B with an empty tensor, so their rounds match the owner's).
// Microbatches of one site merge as a concatenation along their batch dim:
// items concatenate when the batch dim is an item dim, partial sums add otherwise.
#include <memory>
#include <string>

#include "harness/metrics/metric.h"

namespace parity {

enum class DimwiseStatistic : std::int8_t { mean_row_l2, mean_column_l2, entropy };

std::unique_ptr<Metric> make_dimwise_metric(DimwiseStatistic statistic, std::string name,
                                            KindSet kinds, LabelScope scope);

}  // namespace parity
