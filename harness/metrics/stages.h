#pragma once
// Building blocks metric programs share: reduction identities, local
// combination, and "reduce these values over their axes, one round per axis".
#include <cstdint>
#include <functional>
#include <vector>

#include "harness/metrics/metric.h"

namespace parity {

// Bit i set = reduce over kModelAxes[i] (tp, cp, dp).
using AxisMask = unsigned;
inline constexpr AxisMask axis_bit(std::size_t index) { return 1u << index; }

// The axes a logical reduction reduces over: every axis that is not Replica.
AxisMask reduction_axes(const AxisPlacements& placements);

// 0 for sum, -inf for max, +inf for min; `width` elements of `dtype`.
at::Tensor reduction_identity(ReduceOp op, std::int64_t width, at::ScalarType dtype);

// Combines equal-shape tensors elementwise with `op` (sum, max, min).
at::Tensor combine(const std::vector<at::Tensor>& values, ReduceOp op);

// Reduces values[i] with `op` over the axes in masks[i], one round per axis in
// the order tp, cp, dp (an axis with no value to reduce costs no round), then
// returns then(reduced values). A reduced axis is Replica afterwards.
MetricStep reduce_over_axes(std::vector<at::Tensor> values, std::vector<AxisMask> masks,
                            ReduceOp op, std::function<MetricStep(std::vector<at::Tensor>)> then,
                            std::size_t first_axis = 0);

// Mean-type (sum, count) pairs just before their cross-rank reduction, the one
// place the population rule can go wrong: the code-path faults mean-of-means,
// cp-population-dropped and dp-population-dropped deviate here. With none of
// them switched on, pairs and masks are left as they are.
void apply_population_faults(std::vector<at::Tensor>& pairs, std::vector<AxisMask>& masks);

// Groups values by mask (ascending), combines each group locally with `op`,
// reduces each group over its axes, combines the groups, and returns
// then(total). Every rank holding the same masks issues the same requests.
MetricStep reduce_grouped(std::vector<at::Tensor> values, const std::vector<AxisMask>& masks,
                          ReduceOp op, std::function<MetricStep(at::Tensor)> then);

}  // namespace parity
