#include "harness/metrics/statistics/router_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <variant>
#include <vector>

#include "harness/base/check.h"
#include "harness/metrics/metric_registry.h"
#include "harness/metrics/router_statistics.h"
#include "harness/metrics/stages.h"
#include "harness/observation/router_diagnostic_channels.h"

namespace parity {

namespace {

enum class Aggregation : std::int8_t {
  mean,               // over valid sequences
  max,                // over valid sequences
  min,                // over valid sequences
  global,             // of the batch's renormalized token-weighted distributions
  mean_minus_global,  // mean - global: how far sequences sit from the batch
};

struct Operation {
  const char* name;  // the label's last part (Megatron's operation names)
  RouterStatistic statistic;
  Aggregation aggregation;
  bool worst_is_min = false;  // "worst-layer" is the smallest per-layer value
};

struct Family {
  std::vector<Operation> operations;
  bool layer_labels;        // "<layer>/<op>" for every layer
  bool worst_layer_labels;  // "worst-layer/<op>"
};

// Megatron's four operation tables (core/tensor_metrics/router.py).
Family family_of(RouterMetricFamily family) {
  using S = RouterStatistic;
  using A = Aggregation;
  switch (family) {
    case RouterMetricFamily::health:
      return {{{"seq-loss", S::seq_aux_loss, A::mean},
               {"seq-assignment-imbalance", S::aux_load_imbalance, A::mean},
               {"seq-score-imbalance", S::score_imbalance, A::mean},
               {"global-batch-loss", S::seq_aux_loss, A::global},
               {"seq-global-loss-gap", S::seq_aux_loss, A::mean_minus_global},
               {"global-aux-max-over-mean", S::aux_max_over_mean, A::global},
               {"global-actual-imbalance", S::actual_load_imbalance, A::global},
               {"global-actual-max-over-mean", S::actual_max_over_mean, A::global},
               {"topk-boundary-relative-margin", S::topk_boundary_relative_margin, A::mean,
                /*worst_is_min=*/true}},
              /*layer_labels=*/false,
              /*worst_layer_labels=*/true};
    case RouterMetricFamily::seq_aux_decomposition:
      return {{{"loss-mean", S::seq_aux_loss, A::mean},
               {"loss-max", S::seq_aux_loss, A::max},
               {"assignment-imbalance-mean", S::aux_load_imbalance, A::mean},
               {"score-imbalance-mean", S::score_imbalance, A::mean},
               {"imbalance-coupling-mean", S::imbalance_coupling, A::mean},
               {"imbalance-alignment-mean", S::imbalance_alignment, A::mean}},
              true,
              false};
    case RouterMetricFamily::routing_balance:
      return {{{"actual-imbalance-mean", S::actual_load_imbalance, A::mean},
               {"actual-imbalance-max", S::actual_load_imbalance, A::max},
               {"aux-actual-tv-mean", S::aux_actual_tv, A::mean},
               {"topk-overlap-mean", S::aux_actual_overlap, A::mean},
               {"topk-overlap-min", S::aux_actual_overlap, A::min, true},
               {"aux-max-over-mean", S::aux_max_over_mean, A::mean},
               {"actual-max-over-mean", S::actual_max_over_mean, A::mean},
               {"actual-inactive-fraction", S::actual_inactive_fraction, A::mean},
               {"global-actual-imbalance", S::actual_load_imbalance, A::global},
               {"global-aux-actual-tv", S::aux_actual_tv, A::global},
               {"global-aux-max-over-mean", S::aux_max_over_mean, A::global},
               {"global-actual-max-over-mean", S::actual_max_over_mean, A::global}},
              true,
              false};
    case RouterMetricFamily::expert_bias:
      return {{{"mean", S::bias_mean, A::mean},
               {"std", S::bias_std, A::mean},
               {"rms", S::bias_rms, A::mean},
               {"range", S::bias_range, A::mean},
               {"abs-max", S::bias_abs_max, A::mean},
               {"score-correlation", S::bias_score_correlation, A::mean},
               {"aux-load-correlation", S::bias_aux_load_correlation, A::mean},
               {"actual-load-correlation", S::bias_actual_load_correlation, A::mean}},
              true,
              false};
  }
  PARITY_FAIL("unknown router metric family");
}

bool has_sum_slot(const Operation& op) {
  return op.aggregation == Aggregation::mean || op.aggregation == Aggregation::mean_minus_global;
}

// A layer's contribution: three fp64 blocks, each merged with its own op.
//   sums    [one per mean-type op..., valid sequences, sum_j n_j score_j (E),
//            sum_j n_j aux_j (E), sum_j n_j actual_j (E)]      SUM
//   maxima  [one per max op]                                    MAX
//   minima  [one per min op]                                    MIN
// Prepared::value is their concatenation; the stacked form (start) has one
// row per layer.
struct Blocks {
  at::Tensor sums, maxima, minima;
};

class Layout {
 public:
  Layout(const std::vector<Operation>& ops, std::int64_t experts) : experts_(experts) {
    for (const Operation& op : ops) {
      if (has_sum_slot(op))
        slot_.push_back(sums_++);
      else if (op.aggregation == Aggregation::max)
        slot_.push_back(maxima_++);
      else if (op.aggregation == Aggregation::min)
        slot_.push_back(minima_++);
      else
        slot_.push_back(-1);
    }
  }
  std::int64_t experts() const { return experts_; }
  std::int64_t slot(std::size_t op) const { return slot_[op]; }
  std::int64_t count_index() const { return sums_; }
  std::int64_t distribution_offset(int which) const { return sums_ + 1 + which * experts_; }
  std::int64_t sum_width() const { return sums_ + 1 + 3 * experts_; }

  Blocks split(const at::Tensor& value) const {
    return {value.narrow(0, 0, sum_width()), value.narrow(0, sum_width(), maxima_),
            value.narrow(0, sum_width() + maxima_, minima_)};
  }
  static at::Tensor join(const Blocks& b) { return at::cat({b.sums, b.maxima, b.minima}); }

 private:
  std::int64_t experts_;
  std::vector<std::int64_t> slot_;  // per op: index in its block (-1: global ops)
  std::int64_t sums_ = 0, maxima_ = 0, minima_ = 0;
};

Blocks combine(const Blocks& a, const Blocks& b) {
  return {a.sums + b.sums, at::maximum(a.maxima, b.maxima), at::minimum(a.minima, b.minima)};
}

// A 1-D fp64 tensor of 0-dim values (empty when there are none).
at::Tensor vector_of(const std::vector<at::Tensor>& scalars) {
  if (scalars.empty()) return at::empty({0}, at::kDouble);
  return at::stack(scalars).to(at::kDouble);
}

// The largest (smallest) value; NaN when any is NaN, like a tensor amax.
double extreme(const std::vector<double>& values, bool smallest) {
  double out =
      smallest ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  for (double v : values) {
    if (std::isnan(v)) return v;
    out = smallest ? std::min(out, v) : std::max(out, v);
  }
  return out;
}

class RouterDiagnosticsMetric final : public Metric {
 public:
  RouterDiagnosticsMetric(RouterMetricFamily family, std::string name, KindSet kinds)
      : Metric(std::move(name), kinds, LabelScope::layer_rollup), family_(family_of(family)) {}

  Prepared prepare(const MetricInput& input) const override {
    check_placements(input);
    const at::Tensor d = input.tensor.detach();
    if (d.dim() != 3 || d.size(1) != kRouterDiagnosticChannelCount || d.size(2) < 2)
      PARITY_FAIL("metric " + name() + ": site " + input.site.full_name() +
                  ": router diagnostics must be [b, " +
                  std::to_string(kRouterDiagnosticChannelCount) + ", E] with E >= 2");
    Prepared p;
    p.placements = input.placements;
    p.shape.assign(d.sizes().begin(), d.sizes().end());
    p.batch_dim = input.batch_dim;
    p.value = Layout::join(contribution(d.to(at::kDouble)));
    return p;
  }

  Prepared merge(std::vector<Prepared> microbatches) const override {
    Prepared p = microbatches.front();
    const Layout layout = layout_of(p);
    Blocks total = layout.split(p.value);
    for (std::size_t i = 1; i < microbatches.size(); ++i)
      total = combine(total, layout.split(microbatches[i].value));
    p.value = Layout::join(total);
    return p;
  }

  MetricStep start(std::vector<Prepared> values) const override {
    std::map<std::string, Blocks> layers;  // sorted: every rank stacks the same rows
    std::optional<AxisMask> mask;
    std::optional<Layout> layout;
    for (const Prepared& v : values) {
      if (v.layer.empty()) continue;
      if (!layout) layout.emplace(layout_of(v));
      PARITY_CHECK(layout_of(v).experts() == layout->experts(),
                   "metric " + name() + ": layers with different expert counts");
      const AxisMask m = reduction_axes(v.placements);
      if (mask && *mask != m)
        PARITY_FAIL("metric " + name() + ": sites with different placements (" +
                    v.placements.describe() + ")");
      mask = m;
      const Blocks b = layout->split(v.value);
      auto [it, inserted] = layers.try_emplace(v.layer, b);
      if (!inserted) it->second = combine(it->second, b);
    }
    if (layers.empty()) return MetricStep::finished_named(at::empty({0}, at::kDouble), {});
    std::vector<std::string> names;
    std::vector<at::Tensor> sums, maxima, minima;
    for (const auto& [layer, b] : layers) {
      names.push_back(layer);
      sums.push_back(b.sums);
      maxima.push_back(b.maxima);
      minima.push_back(b.minima);
    }
    return reduce({at::stack(sums), at::stack(maxima), at::stack(minima)}, *mask, 0,
                  [this, names, layout = *layout](const Blocks& reduced) {
                    return finalize(names, layout, reduced);
                  });
  }

 private:
  using Then = std::function<MetricStep(const Blocks&)>;

  void check_placements(const MetricInput& input) const {
    const AxisPlacements& p = input.placements;
    const bool dp_ok = is_replica(p.at(Axis::dp)) || std::holds_alternative<Shard>(p.at(Axis::dp));
    if (!is_replica(p.at(Axis::tp)) || !is_replica(p.at(Axis::cp)) || !dp_ok)
      PARITY_FAIL(
          "metric " + name() + ": site " + input.site.full_name() +
          ": router diagnostics summarize whole sequences, so tp and cp must be Replica and dp "
          "Replica or Shard, not " +
          p.describe() + " (the model observes them only with CP = 1 and without SP x TP > 1)");
  }

  Layout layout_of(const Prepared& p) const { return Layout(family_.operations, p.shape.at(2)); }

  // One microbatch's blocks from its fp64 diagnostics [b, 7, E].
  Blocks contribution(const at::Tensor& d) const {
    const at::Tensor tokens = valid_token_counts(d);  // [b]
    const at::Tensor valid = tokens > 0;
    std::vector<at::Tensor> sums, maxima, minima;
    const double inf = std::numeric_limits<double>::infinity();
    for (const Operation& op : family_.operations) {
      if (op.aggregation == Aggregation::global) continue;
      const at::Tensor x = per_sequence(d, op.statistic).masked_select(valid);
      if (has_sum_slot(op))
        sums.push_back(x.sum());
      else if (op.aggregation == Aggregation::max)
        maxima.push_back(x.numel() ? x.amax() : at::scalar_tensor(-inf, at::kDouble));
      else
        minima.push_back(x.numel() ? x.amin() : at::scalar_tensor(inf, at::kDouble));
    }
    sums.push_back(valid.sum().to(at::kDouble));
    const RouterDistributions rows = distributions_of(d);
    const at::Tensor weight = tokens.unsqueeze(-1);
    for (const at::Tensor* dist : {&rows.score, &rows.aux, &rows.actual})
      sums.push_back((*dist * weight).sum(0));  // [E] each
    std::vector<at::Tensor> flat;
    flat.reserve(sums.size());
    for (const at::Tensor& s : sums) flat.push_back(s.reshape({-1}).to(at::kDouble));
    return {at::cat(flat), vector_of(maxima), vector_of(minima)};
  }

  // Reduces the stacked blocks over the axes of `mask`, one round per axis
  // (tp, cp, dp), all three blocks in the round's requests.
  static MetricStep reduce(Blocks blocks, AxisMask mask, std::size_t axis, const Then& then) {
    while (axis < kModelAxes.size() && !(mask & axis_bit(axis))) ++axis;
    if (axis == kModelAxes.size()) return then(blocks);
    const Axis a = kModelAxes[axis];
    return MetricStep::collect({{blocks.sums, a, CollectiveKind::all_reduce, ReduceOp::sum},
                                {blocks.maxima, a, CollectiveKind::all_reduce, ReduceOp::max},
                                {blocks.minima, a, CollectiveKind::all_reduce, ReduceOp::min}},
                               [mask, axis, then](std::vector<at::Tensor> done) {
                                 return reduce({done[0], done[1], done[2]}, mask, axis + 1, then);
                               });
  }

  // The renormalized token-weighted distributions of one layer's sums row, as
  // [1, E] rows (a zero distribution stays zero).
  static RouterDistributions batch_distributions(const at::Tensor& sums, const Layout& layout) {
    auto part = [&](int which) {
      const at::Tensor w = sums.narrow(0, layout.distribution_offset(which), layout.experts());
      return (w / w.sum().clamp_min(1)).unsqueeze(0);
    };
    return {part(0), part(1), part(2), at::Tensor()};
  }

  MetricStep finalize(const std::vector<std::string>& layers, const Layout& layout,
                      const Blocks& reduced) const {
    const at::Tensor sums = reduced.sums.contiguous();
    const at::Tensor maxima = reduced.maxima.contiguous();
    const at::Tensor minima = reduced.minima.contiguous();
    const std::int64_t count_index = layout.count_index();
    std::vector<RouterDistributions> batches;
    for (std::size_t l = 0; l < layers.size(); ++l)
      batches.push_back(batch_distributions(sums[l], layout));
    auto sum_at = [&](std::size_t l, std::int64_t i) { return sums[l][i].item<double>(); };
    std::vector<std::string> labels;
    std::vector<double> values;
    auto put = [&](const std::string& label, double v) {
      labels.push_back(label);
      values.push_back(v);
    };
    for (std::size_t o = 0; o < family_.operations.size(); ++o) {
      const Operation& op = family_.operations[o];
      const std::int64_t slot = layout.slot(o);
      auto batch_value = [&](std::size_t l) {
        return statistic_of(batches[l], op.statistic)[0].item<double>();
      };
      std::vector<double> per_layer;
      double global = 0;
      double total = 0, count = 0;
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const double n = sum_at(l, count_index);
        double v = 0;
        switch (op.aggregation) {
          case Aggregation::mean:
            v = sum_at(l, slot) / std::max(n, 1.0);
            break;
          case Aggregation::max:
            v = maxima[l][slot].item<double>();
            break;
          case Aggregation::min:
            v = minima[l][slot].item<double>();
            break;
          case Aggregation::global:
            v = batch_value(l);
            break;
          case Aggregation::mean_minus_global:
            v = sum_at(l, slot) / std::max(n, 1.0) - batch_value(l);
            break;
        }
        per_layer.push_back(v);
        total += has_sum_slot(op) ? sum_at(l, slot) : 0;
        count += n;
      }
      switch (op.aggregation) {
        // Every layer's sequences together.
        case Aggregation::mean:
          global = total / std::max(count, 1.0);
          break;
        case Aggregation::max:
          global = extreme(per_layer, false);
          break;
        case Aggregation::min:
          global = extreme(per_layer, true);
          break;
        // Batch-level values do not pool across layers: the mean over layers.
        case Aggregation::global:
        case Aggregation::mean_minus_global: {
          for (double v : per_layer) global += v;
          global /= static_cast<double>(per_layer.size());
          break;
        }
      }
      if (family_.layer_labels)
        for (std::size_t l = 0; l < layers.size(); ++l)
          put(layers[l] + "/" + op.name, per_layer[l]);
      put(std::string("global/") + op.name, global);
      if (family_.worst_layer_labels)
        put(std::string("worst-layer/") + op.name, extreme(per_layer, op.worst_is_min));
    }
    return MetricStep::finished_named(at::tensor(values, at::kDouble), std::move(labels));
  }

  Family family_;
};

}  // namespace

std::unique_ptr<Metric> make_router_metric(RouterMetricFamily family, std::string name,
                                           KindSet kinds) {
  return std::make_unique<RouterDiagnosticsMetric>(family, std::move(name), kinds);
}

namespace {
template <RouterMetricFamily F>
std::shared_ptr<const Metric> make_registered(const MetricSpec& spec) {
  return make_router_metric(F, spec.name, KindSet{spec.kind});
}
}  // namespace

// Each family reports a bundle per layer, rolled up over the layers.
PARITY_REGISTER_STATISTIC({13,
                           "router-health",
                           "router health bundle (rollups over the layers)",
                           false,
                           {{SourceKind::router_diagnostics, LabelScope::layer_rollup,
                             "layer-router-health"}},
                           make_registered<RouterMetricFamily::health>});
PARITY_REGISTER_STATISTIC({14,
                           "router-seq-aux-decomposition",
                           "per-sequence aux-loss decomposition",
                           false,
                           {{SourceKind::router_diagnostics, LabelScope::layer_rollup,
                             "layer-router-seq-aux-decomposition"}},
                           make_registered<RouterMetricFamily::seq_aux_decomposition>});
PARITY_REGISTER_STATISTIC({15,
                           "router-routing-balance",
                           "routing balance per sequence and over the batch",
                           false,
                           {{SourceKind::router_diagnostics, LabelScope::layer_rollup,
                             "layer-router-routing-balance"}},
                           make_registered<RouterMetricFamily::routing_balance>});
PARITY_REGISTER_STATISTIC({16,
                           "router-expert-bias",
                           "expert-bias statistics",
                           false,
                           {{SourceKind::router_diagnostics, LabelScope::layer_rollup,
                             "layer-router-expert-bias"}},
                           make_registered<RouterMetricFamily::expert_bias>});

}  // namespace parity
