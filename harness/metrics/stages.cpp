#include "harness/metrics/stages.h"

#include <limits>
#include <map>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"

PARITY_USES_FAULT(cp_population_dropped);
PARITY_USES_FAULT(dp_population_dropped);
PARITY_USES_FAULT(mean_of_means);
PARITY_USES_FAULT(replica_overcount);

namespace parity {

namespace {
AxisMask bit_of(Axis axis) {
  for (std::size_t i = 0; i < kModelAxes.size(); ++i)
    if (kModelAxes[i] == axis) return axis_bit(i);
  return 0;
}
}  // namespace

AxisMask reduction_axes(const AxisPlacements& placements) {
  // Fault replica-overcount: Replica axes are reduced too, so every replica
  // contributes instead of counting once (megatron-reference 3.3, rule 3).
  const bool overcount = fault_active(fault_replica_overcount);
  AxisMask mask = 0;
  for (std::size_t i = 0; i < placements.axes.size(); ++i)
    if (needs_reduction(placements.axes[i]) || overcount) mask |= axis_bit(i);
  return mask;
}

void apply_population_faults(std::vector<at::Tensor>& pairs, std::vector<AxisMask>& masks) {
  if (fault_active(fault_mean_of_means)) {
    // Fault mean-of-means: each contribution turns into (its own mean, 1), so
    // the reduction averages means; an empty one stays (0, 0).
    for (at::Tensor& p : pairs) {
      const at::Tensor count = p[1];
      const at::Tensor has = count > 0;
      p = at::stack({at::where(has, p[0] / count.clamp_min(1), at::zeros_like(count)),
                     has.to(count.scalar_type())});
    }
  }
  AxisMask dropped = 0;
  // Faults cp-/dp-population-dropped: the count is not reduced over that axis
  // (the sum still is), so the mean is off by the axis size.
  if (fault_active(fault_cp_population_dropped)) dropped |= bit_of(Axis::cp);
  if (fault_active(fault_dp_population_dropped)) dropped |= bit_of(Axis::dp);
  if (dropped == 0) return;
  std::vector<at::Tensor> split;
  std::vector<AxisMask> split_masks;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const at::Tensor zero = at::zeros_like(pairs[i][0]);
    split.push_back(at::stack({pairs[i][0], zero}));
    split_masks.push_back(masks[i]);
    split.push_back(at::stack({zero, pairs[i][1]}));
    split_masks.push_back(masks[i] & ~dropped);
  }
  pairs = std::move(split);
  masks = std::move(split_masks);
}

at::Tensor reduction_identity(ReduceOp op, std::int64_t width, at::ScalarType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  const double v = op == ReduceOp::sum ? 0.0 : op == ReduceOp::max ? -inf : inf;
  return at::full({width}, v, at::TensorOptions().dtype(dtype));
}

at::Tensor combine(const std::vector<at::Tensor>& values, ReduceOp op) {
  if (values.empty()) PARITY_FAIL("combine: no values");
  if (values.size() == 1) return values[0];
  const at::Tensor stacked = at::stack(values);
  switch (op) {
    case ReduceOp::sum:
      return stacked.sum(0);
    case ReduceOp::max:
      return stacked.amax(0);
    case ReduceOp::min:
      return stacked.amin(0);
  }
  PARITY_FAIL("combine: unknown reduce op");
}

MetricStep reduce_over_axes(std::vector<at::Tensor> values, std::vector<AxisMask> masks,
                            ReduceOp op, std::function<MetricStep(std::vector<at::Tensor>)> then,
                            std::size_t first_axis) {
  for (std::size_t a = first_axis; a < kModelAxes.size(); ++a) {
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < values.size(); ++i)
      if (masks[i] & axis_bit(a)) which.push_back(i);
    if (which.empty()) continue;
    std::vector<CollectiveRequest> requests;
    requests.reserve(which.size());
    for (std::size_t i : which)
      requests.push_back({values[i], kModelAxes[a], CollectiveKind::all_reduce, op, 0});
    return MetricStep::collect(
        std::move(requests),
        [values = std::move(values), masks = std::move(masks), op, then = std::move(then), a,
         which](std::vector<at::Tensor> done) mutable {
          for (std::size_t k = 0; k < which.size(); ++k) values[which[k]] = std::move(done[k]);
          return reduce_over_axes(std::move(values), std::move(masks), op, std::move(then), a + 1);
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
                          [op, then = std::move(then)](const std::vector<at::Tensor>& reduced) {
                            return then(combine(reduced, op));
                          });
}

}  // namespace parity
