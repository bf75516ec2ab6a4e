#include "harness/metrics/statistics/dimwise_metrics.h"

#include <cmath>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/metric_registry.h"
#include "harness/metrics/stages.h"

PARITY_USES_FAULT(sqrt_before_sum);

namespace parity {

namespace {

class DimwiseMetric final : public Metric {
 public:
  DimwiseMetric(DimwiseStatistic statistic, std::string name, KindSet kinds, LabelScope scope)
      : Metric(std::move(name), kinds, scope), statistic_(statistic) {}

  Prepared prepare(const MetricInput& input) const override {
    const at::Tensor x = input.tensor.detach();
    Prepared p;
    p.placements = input.placements;
    p.placeholder = input.placeholder;
    p.shape.assign(x.sizes().begin(), x.sizes().end());
    p.batch_dim = input.batch_dim;
    check_placements(input);
    const at::ScalarType dtype = accumulation_dtype(x.scalar_type());
    if (input.placeholder) {
      p.value = at::zeros({0}, at::TensorOptions().dtype(dtype));
      return p;
    }
    // Contiguous first: a reduction over a strided view sums in another order, so the
    // same values in another layout (a replayed graph's static buffer, say) would
    // differ in the last bit from an eager run's (found by the graph_replay property).
    const auto squared = [&] { return elementwise(x.to(dtype).contiguous()); };
    if (const FlatShard* flat = flat_shard(input.placements)) {
      const at::Tensor fx = squared();
      if (x.numel() != flat->end - flat->start)
        fail(input, "holds " + std::to_string(x.numel()) + " elements but its FlatShard interval " +
                        std::to_string(flat->start) + ":" + std::to_string(flat->end) + " has " +
                        std::to_string(flat->end - flat->start));
      const std::int64_t k = flat->logical_shape.back();
      const std::int64_t rows = k == 0 ? 0 : flat->logical_numel() / k;
      const at::Tensor index =
          at::arange(flat->start, flat->end, at::TensorOptions().dtype(at::kLong));
      const bool by_rows = statistic_ != DimwiseStatistic::mean_column_l2;
      const at::Tensor item = by_rows ? at::div(index, k, "floor") : at::remainder(index, k);
      p.value = at::zeros({by_rows ? rows : k}, fx.options()).index_add_(0, item, fx.reshape({-1}));
      return p;
    }
    const std::int64_t k = x.size(-1);
    std::int64_t rows = 1;
    for (std::int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
    const bool per_row = statistic_ != DimwiseStatistic::mean_column_l2;
    if (input.reductions && !needs_width()) {
      // The backend's one pass (Backend::sums_of_squares): the same sums.
      p.value = input.reductions->sums_of_squares(per_row).clone();
    } else {
      const at::Tensor matrix = squared().reshape({rows, k});
      p.value = per_row ? matrix.sum(1) : matrix.sum(0);
    }
    p.reduced_size = static_cast<double>(per_row ? k : rows);
    return p;
  }

  Prepared merge(std::vector<Prepared> microbatches) const override {
    Prepared p = microbatches.front();
    if (p.placeholder) return p;
    const std::int64_t last = static_cast<std::int64_t>(p.shape.size()) - 1;
    const bool batch_is_last = p.batch_dim.value_or(0) == last;
    const bool items_concatenate =
        statistic_ == DimwiseStatistic::mean_column_l2 ? batch_is_last : !batch_is_last;
    std::vector<at::Tensor> values;
    double reduced = 0;
    for (const auto& m : microbatches) {
      if (m.placements.describe() != p.placements.describe() || m.placeholder)
        PARITY_FAIL("metric " + name() +
                    ": microbatches of one site differ in "
                    "placement (" +
                    p.placements.describe() + " vs " + m.placements.describe() + ")");
      values.push_back(m.value);
      reduced += m.reduced_size;
    }
    if (items_concatenate) {
      p.value = at::cat(values);
    } else {
      p.value = at::stack(values).sum(0);  // same items: partial sums add
      p.reduced_size = reduced;
    }
    return p;
  }

  MetricStep start(std::vector<Prepared> values) const override {
    // Stage B requests. A placeholder takes the same stages with an empty
    // tensor (completed locally): its stage-B groups hold only placeholders
    // (they share the Owned coordinate), and its stage-D requests must come in
    // the same round as the owner's, or the batches of the two would differ.
    std::vector<at::Tensor> partial;
    std::vector<AxisMask> split_masks, item_masks;
    std::vector<bool> placeholder;
    for (const auto& v : values) {
      const AxisMask split = splitting_axes(v);
      split_masks.push_back(split);
      item_masks.push_back(reduction_axes(v.placements) & ~split);
      placeholder.push_back(v.placeholder);
      partial.push_back(needs_width() && !v.placeholder
                            ? at::cat({v.value, at::full({1}, v.reduced_size, v.value.options())})
                            : v.value);
    }
    // Fault sqrt-before-sum: row/column sums of squares take their square root
    // before the stage-B sum over the axes that split them.
    const bool sqrt_first = fault_active(fault_sqrt_before_sum) && !needs_width();
    if (sqrt_first)
      for (at::Tensor& q : partial) q = q.sqrt();
    return reduce_over_axes(
        std::move(partial), split_masks, ReduceOp::sum,
        [this, item_masks, placeholder, sqrt_first](std::vector<at::Tensor> complete) mutable {
          std::vector<at::Tensor> pairs;
          for (std::size_t i = 0; i < complete.size(); ++i)
            pairs.push_back(placeholder[i] ? at::zeros({2}, complete[i].options())
                                           : population_pair(complete[i], sqrt_first));
          apply_population_faults(pairs, item_masks);
          return reduce_grouped(
              std::move(pairs), item_masks, ReduceOp::sum,
              [](const at::Tensor& t) { return MetricStep::finished(t[0] / t[1]); });
        });
  }

 private:
  bool needs_width() const { return statistic_ == DimwiseStatistic::entropy; }

  at::Tensor elementwise(const at::Tensor& x) const {
    return statistic_ == DimwiseStatistic::entropy ? at::special_entr(x) : x * x;
  }

  // Stage C: per-item finalize, then (sum, count).
  // `rooted`: the square roots were taken already (fault sqrt-before-sum).
  at::Tensor population_pair(const at::Tensor& complete, bool rooted) const {
    at::Tensor q = complete;
    at::Tensor n;
    if (needs_width()) {
      const double k = complete[-1].item<double>();
      q = complete.narrow(0, 0, complete.size(0) - 1);
      PARITY_CHECK(k >= 2, "metric " + name() +
                               ": normalized entropy needs K >= 2 "
                               "entries in the last dim, got " +
                               std::to_string(k));
      n = q / std::log(k);
    } else {
      n = rooted ? q : q.sqrt();
    }
    return at::stack({n.sum(), at::full({}, static_cast<double>(q.numel()), q.options())});
  }

  static const FlatShard* flat_shard(const AxisPlacements& p) {
    for (const auto& a : p.axes)
      if (const auto* f = std::get_if<FlatShard>(&a)) return f;
    return nullptr;
  }

  // The axes that split the reduced dim(s): stage B. A FlatShard always does.
  AxisMask splitting_axes(const Prepared& v) const {
    const std::int64_t last = static_cast<std::int64_t>(v.shape.size()) - 1;
    const bool columns = statistic_ == DimwiseStatistic::mean_column_l2;
    AxisMask mask = 0;
    for (std::size_t i = 0; i < v.placements.axes.size(); ++i) {
      const Placement& a = v.placements.axes[i];
      if (std::holds_alternative<FlatShard>(a)) mask |= axis_bit(i);
      if (const auto* s = std::get_if<Shard>(&a); s && s->dim) {
        const bool on_last = *s->dim == last;
        if (columns != on_last) mask |= axis_bit(i);
      }
    }
    return mask;
  }

  void check_placements(const MetricInput& input) const {
    const std::int64_t dims = input.tensor.dim();
    if (dims == 0) fail(input, "is a scalar (these metrics need at least one dimension)");
    for (std::size_t i = 0; i < input.placements.axes.size(); ++i) {
      const Placement& a = input.placements.axes[i];
      if (const auto* s = std::get_if<Shard>(&a)) {
        if (!s->dim)
          fail(input, "has " + std::string(to_string(kModelAxes[i])) +
                          "=Shard(?) (these metrics need the dimension of every Shard placement)");
        if (*s->dim < 0 || *s->dim >= dims)
          fail(input, "has " + std::string(to_string(kModelAxes[i])) + "=" + to_string(a) +
                          " outside its " + std::to_string(dims) + " dimensions");
      }
      if (std::holds_alternative<FlatShard>(a) && statistic_ == DimwiseStatistic::entropy)
        fail(input, "is a FlatShard (normalized entropy needs whole items)");
    }
    input.placements.validate();
  }

  [[noreturn]] void fail(const MetricInput& input, const std::string& why) const {
    PARITY_FAIL("metric " + name() + ": site " + input.site.full_name() + " (" +
                input.placements.describe() + ") " + why);
  }

  DimwiseStatistic statistic_;
};

}  // namespace

std::unique_ptr<Metric> make_dimwise_metric(DimwiseStatistic statistic, std::string name,
                                            KindSet kinds, LabelScope scope) {
  return std::make_unique<DimwiseMetric>(statistic, std::move(name), kinds, scope);
}

namespace {
template <DimwiseStatistic S>
std::shared_ptr<const Metric> make_registered(const MetricSpec& spec) {
  return make_dimwise_metric(S, spec.name, KindSet{spec.kind}, spec.scope);
}
}  // namespace

PARITY_REGISTER_STATISTIC({9,
                           "mean-row-l2",
                           "mean over rows of each row's L2 norm",
                           true,
                           {},
                           make_registered<DimwiseStatistic::mean_row_l2>});
PARITY_REGISTER_STATISTIC({10,
                           "mean-column-l2",
                           "mean over columns of each column's L2 norm",
                           true,
                           {},
                           make_registered<DimwiseStatistic::mean_column_l2>});
PARITY_REGISTER_STATISTIC({12,
                           "entropy",
                           "normalized entropy of the routing decision",
                           false,
                           {{SourceKind::router_scores, LabelScope::layer,
                             "layer-router-decision-entropy"}},
                           make_registered<DimwiseStatistic::entropy>});

}  // namespace parity
