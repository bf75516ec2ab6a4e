#include "harness/metrics/statistics/logical_metrics.h"

#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/metric_registry.h"
#include "harness/metrics/stages.h"

PARITY_USES_FAULT(prepare_aliases_buffer);
PARITY_USES_FAULT(sqrt_before_sum);

namespace parity {

namespace {

class LogicalReductionMetric final : public Metric {
 public:
  LogicalReductionMetric(LogicalStatistic statistic, std::string name, KindSet kinds,
                         LabelScope scope)
      : Metric(std::move(name), kinds, scope), statistic_(statistic) {}

  Prepared prepare(const MetricInput& input) const override {
    const at::Tensor x = input.tensor.detach();
    const at::ScalarType dtype = contribution_dtype(accumulation_dtype(x.scalar_type()));
    Prepared p;
    p.placements = input.placements;
    p.placeholder = input.placeholder;
    p.shape.assign(x.sizes().begin(), x.sizes().end());
    p.batch_dim = input.batch_dim;
    // A Prepared value owns its storage: the shared statistics are cloned.
    if (input.placeholder || x.numel() == 0)
      p.value = identity(dtype);
    else if (input.reductions)
      p.value = from_statistics(input.reductions->statistics(), x.numel()).to(dtype).clone();
    else
      p.value = contribution(x.to(accumulation_dtype(x.scalar_type()))).to(dtype);
    // Fault prepare-aliases-buffer: max/min keep a view of the extreme element
    // instead of a copy (a graph's static buffer is overwritten before finalize).
    if (fault_active(fault_prepare_aliases_buffer) && !input.placeholder && x.numel() > 0 &&
        x.scalar_type() == dtype &&
        (statistic_ == LogicalStatistic::max || statistic_ == LogicalStatistic::min)) {
      const at::Tensor flat = x.reshape({-1});
      p.value = flat.narrow(0,
                            (statistic_ == LogicalStatistic::max ? flat.argmax() : flat.argmin())
                                .item<std::int64_t>(),
                            1);
    }
    return p;
  }

  Prepared merge(std::vector<Prepared> microbatches) const override {
    std::vector<at::Tensor> values;
    values.reserve(microbatches.size());
    for (const auto& m : microbatches) values.push_back(m.value);
    Prepared p = microbatches.front();
    p.value = combine(values, op());
    return p;
  }

  MetricStep start(std::vector<Prepared> values) const override {
    std::vector<at::Tensor> contributions;
    std::vector<AxisMask> masks;
    for (const auto& v : values) {
      contributions.push_back(v.value);
      masks.push_back(reduction_axes(v.placements));
    }
    // Fault sqrt-before-sum: l2/rms take the square root of each partial sum
    // of squares before the cross-rank sum (squared back before finalize, so
    // one contributor still gives the right value).
    const bool sqrt_first =
        fault_active(fault_sqrt_before_sum) &&
        (statistic_ == LogicalStatistic::l2 || statistic_ == LogicalStatistic::rms);
    if (sqrt_first)
      for (at::Tensor& c : contributions) c = with_first(c, c[0].sqrt());
    if (width() == 2) apply_population_faults(contributions, masks);
    return reduce_grouped(std::move(contributions), masks, op(),
                          [this, sqrt_first](at::Tensor total) {
                            if (sqrt_first) total = with_first(total, total[0] * total[0]);
                            return MetricStep::finished(finalize(total));
                          });
  }

 private:
  ReduceOp op() const {
    switch (statistic_) {
      case LogicalStatistic::max:
      case LogicalStatistic::abs_max:
        return ReduceOp::max;
      case LogicalStatistic::min:
        return ReduceOp::min;
      default:
        return ReduceOp::sum;
    }
  }
  std::int64_t width() const {
    return statistic_ == LogicalStatistic::mean || statistic_ == LogicalStatistic::rms ? 2 : 1;
  }
  at::ScalarType contribution_dtype(at::ScalarType accumulation) const {
    return statistic_ == LogicalStatistic::nan_count || statistic_ == LogicalStatistic::inf_count
               ? at::kDouble
               : accumulation;
  }
  at::Tensor identity(at::ScalarType dtype) const {
    return reduction_identity(op(), width(), dtype);
  }
  // x: non-empty, in the accumulation dtype.
  at::Tensor contribution(const at::Tensor& x) const {
    const at::Tensor count = at::full({}, static_cast<double>(x.numel()), x.options());
    switch (statistic_) {
      case LogicalStatistic::l2:
        return (x * x).sum().reshape({1});
      case LogicalStatistic::max:
        return x.max().reshape({1});
      case LogicalStatistic::abs_max:
        return x.abs().max().reshape({1});
      case LogicalStatistic::min:
        return x.min().reshape({1});
      case LogicalStatistic::mean:
        return at::stack({x.sum(), count});
      case LogicalStatistic::rms:
        return at::stack({(x * x).sum(), count});
      case LogicalStatistic::nan_count:
        return x.isnan().sum().to(at::kDouble).reshape({1});
      case LogicalStatistic::inf_count:
        return x.isinf().sum().to(at::kDouble).reshape({1});
    }
    PARITY_FAIL("unknown statistic");
  }
  // contribution() from the observation's one-read statistics (the same
  // reductions, so the same values on the reference).
  at::Tensor from_statistics(const TensorStatistics& s, std::int64_t numel) const {
    const auto count = [&](const at::Tensor& like) {
      return at::full({}, static_cast<double>(numel), like.options());
    };
    switch (statistic_) {
      case LogicalStatistic::l2:
        return s.sum_sq.reshape({1});
      case LogicalStatistic::max:
        return s.max.reshape({1});
      case LogicalStatistic::abs_max:
        return s.abs_max.reshape({1});
      case LogicalStatistic::min:
        return s.min.reshape({1});
      case LogicalStatistic::mean:
        return at::stack({s.sum, count(s.sum)});
      case LogicalStatistic::rms:
        return at::stack({s.sum_sq, count(s.sum_sq)});
      case LogicalStatistic::nan_count:
        return s.nan_count.reshape({1});
      case LogicalStatistic::inf_count:
        return s.inf_count.reshape({1});
    }
    PARITY_FAIL("unknown statistic");
  }
  // `t` with its first element replaced by `first` (a 0-dim tensor).
  static at::Tensor with_first(const at::Tensor& t, const at::Tensor& first) {
    at::Tensor out = t.clone();
    out[0] = first;
    return out;
  }
  at::Tensor finalize(const at::Tensor& t) const {
    switch (statistic_) {
      case LogicalStatistic::l2:
        return t[0].sqrt();
      case LogicalStatistic::mean:
        return t[0] / t[1];
      case LogicalStatistic::rms:
        return (t[0] / t[1]).sqrt();
      default:
        return t[0];
    }
  }

  LogicalStatistic statistic_;
};

}  // namespace

std::unique_ptr<Metric> make_logical_metric(LogicalStatistic statistic, std::string name,
                                            KindSet kinds, LabelScope scope) {
  return std::make_unique<LogicalReductionMetric>(statistic, std::move(name), kinds, scope);
}

namespace {
template <LogicalStatistic S>
std::shared_ptr<const Metric> make_registered(const MetricSpec& spec) {
  return make_logical_metric(S, spec.name, KindSet{spec.kind}, spec.scope);
}
}  // namespace

PARITY_REGISTER_STATISTIC({1,
                           "l2",
                           "L2 norm",
                           true,
                           {{SourceKind::mtp_logits, LabelScope::global},
                            {SourceKind::router_logits, LabelScope::layer}},
                           make_registered<LogicalStatistic::l2>});
PARITY_REGISTER_STATISTIC({2,
                           "max",
                           "maximum",
                           true,
                           {{SourceKind::router_logits, LabelScope::layer}},
                           make_registered<LogicalStatistic::max>});
PARITY_REGISTER_STATISTIC(
    {3, "abs-max", "largest absolute value", true, {}, make_registered<LogicalStatistic::abs_max>});
PARITY_REGISTER_STATISTIC({4, "min", "minimum", true, {}, make_registered<LogicalStatistic::min>});
PARITY_REGISTER_STATISTIC({5, "mean", "mean", true, {}, make_registered<LogicalStatistic::mean>});
PARITY_REGISTER_STATISTIC(
    {6, "rms", "root mean square", true, {}, make_registered<LogicalStatistic::rms>});
PARITY_REGISTER_STATISTIC({7,
                           "nan-count",
                           "number of NaN elements",
                           true,
                           {},
                           make_registered<LogicalStatistic::nan_count>});
PARITY_REGISTER_STATISTIC({8,
                           "inf-count",
                           "number of infinite elements",
                           true,
                           {},
                           make_registered<LogicalStatistic::inf_count>});

}  // namespace parity
