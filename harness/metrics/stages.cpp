#include "harness/metrics/stages.h"

#include <limits>
#include <map>
#include <stdexcept>

namespace parity {

AxisMask reduction_axes(const AxisPlacements& placements) {
  AxisMask mask = 0;
  for (std::size_t i = 0; i < placements.axes.size(); ++i)
    if (needs_reduction(placements.axes[i])) mask |= axis_bit(i);
  return mask;
}

at::Tensor reduction_identity(ReduceOp op, std::int64_t width, at::ScalarType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  const double v = op == ReduceOp::sum ? 0.0 : op == ReduceOp::max ? -inf : inf;
  return at::full({width}, v, at::TensorOptions().dtype(dtype));
}

at::Tensor combine(const std::vector<at::Tensor>& values, ReduceOp op) {
  if (values.empty()) throw std::invalid_argument("combine: no values");
  if (values.size() == 1) return values[0];
  const at::Tensor stacked = at::stack(values);
  switch (op) {
    case ReduceOp::sum: return stacked.sum(0);
    case ReduceOp::max: return stacked.amax(0);
    case ReduceOp::min: return stacked.amin(0);
  }
  throw std::invalid_argument("combine: unknown reduce op");
}

MetricStep reduce_over_axes(std::vector<at::Tensor> values, std::vector<AxisMask> masks,
                            ReduceOp op,
                            std::function<MetricStep(std::vector<at::Tensor>)> then,
                            std::size_t first_axis) {
  for (std::size_t a = first_axis; a < kModelAxes.size(); ++a) {
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < values.size(); ++i)
      if (masks[i] & axis_bit(a)) which.push_back(i);
    if (which.empty()) continue;
    std::vector<CollectiveRequest> requests;
    for (std::size_t i : which)
      requests.push_back({values[i], kModelAxes[a], CollectiveKind::all_reduce, op, 0});
    return MetricStep::collect(
        std::move(requests),
        [values = std::move(values), masks = std::move(masks), op, then = std::move(then), a,
         which](std::vector<at::Tensor> done) mutable {
          for (std::size_t k = 0; k < which.size(); ++k) values[which[k]] = std::move(done[k]);
          return reduce_over_axes(std::move(values), std::move(masks), op, std::move(then),
                                  a + 1);
        });
  }
  return then(std::move(values));
}

MetricStep reduce_grouped(std::vector<at::Tensor> values, const std::vector<AxisMask>& masks,
                          ReduceOp op, std::function<MetricStep(at::Tensor)> then) {
  std::map<AxisMask, std::vector<at::Tensor>> groups;
  for (std::size_t i = 0; i < values.size(); ++i) groups[masks[i]].push_back(values[i]);
  std::vector<at::Tensor> partial;
  std::vector<AxisMask> group_masks;
  for (auto& [mask, members] : groups) {
    partial.push_back(combine(members, op));
    group_masks.push_back(mask);
  }
  return reduce_over_axes(std::move(partial), std::move(group_masks), op,
                          [op, then = std::move(then)](std::vector<at::Tensor> reduced) {
                            return then(combine(reduced, op));
                          });
}

}  // namespace parity

