#include "harness/metrics/statistics/sampled_median.h"

#include <limits>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/metrics/metric_registry.h"
#include "harness/metrics/sample_rule.h"
#include "harness/metrics/stages.h"
#include "harness/metrics/uneven_gather.h"

namespace parity {

namespace {

// The axes a value is gathered over: every Shard, whatever its dim (the
// flattened tensor is Shard(0) on each of them).
AxisMask shard_axes(const AxisPlacements& placements) {
  AxisMask mask = 0;
  for (std::size_t i = 0; i < placements.axes.size(); ++i)
    if (std::holds_alternative<Shard>(placements.axes[i])) mask |= axis_bit(i);
  return mask;
}

std::string describe_axes(AxisMask mask) {
  std::string s;
  for (std::size_t i = 0; i < kModelAxes.size(); ++i)
    if (mask & axis_bit(i)) s += (s.empty() ? "" : ", ") + std::string(to_string(kModelAxes[i]));
  return s.empty() ? "none" : s;
}

class SampledMedianMetric final : public Metric {
 public:
  SampledMedianMetric(std::string name, KindSet kinds, LabelScope scope, std::uint64_t seed,
                      std::int64_t factor)
      : Metric(std::move(name), kinds, scope), seed_(seed), factor_(factor) {
    PARITY_CHECK(factor >= 1,
                 "metric " + this->name() + ": sample factor " + std::to_string(factor) + " < 1");
  }

  Prepared prepare(const MetricInput& input) const override {
    check_placements(input);
    const at::Tensor x = input.tensor.detach();
    Prepared p;
    p.site = input.site;
    p.placements = input.placements;
    p.placeholder = input.placeholder;
    p.shape.assign(x.sizes().begin(), x.sizes().end());
    p.batch_dim = input.batch_dim;
    // A copy in the accumulation dtype: the observed tensor may be a static
    // graph buffer (the collector rejects a value that shares its storage).
    p.value = x.reshape({-1}).to(accumulation_dtype(x.scalar_type())).clone();
    return p;
  }

  Prepared merge(std::vector<Prepared> microbatches) const override {
    Prepared p = microbatches.front();
    std::vector<at::Tensor> values;
    for (const Prepared& m : microbatches) {
      PARITY_CHECK(m.placements.describe() == p.placements.describe(),
                   "metric " + name() + ": microbatches of site " + p.site.full_name() +
                       " differ in placement (" + p.placements.describe() + " vs " +
                       m.placements.describe() + ")");
      values.push_back(m.value);
    }
    p.value = at::cat(values);
    return p;
  }

  MetricStep start(std::vector<Prepared> values) const override {
    const AxisMask axes = shard_axes(values.front().placements);
    // One gather for the whole result (as Megatron's concatenation), so its
    // values must be split over the same axes.
    for (const Prepared& v : values)
      PARITY_CHECK(shard_axes(v.placements) == axes,
                   "metric " + name() +
                       ": the values of one result must share their rank relations, "
                       "but site " +
                       values.front().site.full_name() + " is sharded over " + describe_axes(axes) +
                       " and site " + v.site.full_name() + " over " +
                       describe_axes(shard_axes(v.placements)));
    // One dtype for the gather: fp64 when some site is fp64 (the same on every rank).
    at::ScalarType dtype = at::kFloat;
    for (const Prepared& v : values)
      if (v.value.scalar_type() == at::kDouble) dtype = at::kDouble;
    std::vector<at::Tensor> pieces;
    std::vector<MetricSite> sites;
    for (const Prepared& v : values) {
      pieces.push_back(v.value.to(dtype));
      sites.push_back(v.site);
    }
    return gather_uneven(
        std::move(pieces), axes,
        [sites, seed = seed_, factor = factor_](std::vector<at::Tensor> populations) {
          std::vector<SitePopulation> whole;
          for (std::size_t i = 0; i < sites.size(); ++i)
            whole.push_back({sites[i], populations[i]});
          return MetricStep::finished(sampled_median_of(whole, seed, factor));
        });
  }

 private:
  void check_placements(const MetricInput& input) const {
    for (std::size_t i = 0; i < input.placements.axes.size(); ++i) {
      const Placement& a = input.placements.axes[i];
      if (std::holds_alternative<FlatShard>(a) || std::holds_alternative<Owned>(a))
        PARITY_FAIL("metric " + name() + ": site " + input.site.full_name() + " (" +
                    input.placements.describe() + ") has " + std::string(to_string(kModelAxes[i])) +
                    "=" + to_string(a) +
                    "; the sampled median takes Shard and Replica placements only (its "
                    "gather cannot place a flat interval or skip a placeholder)");
    }
  }

  std::uint64_t seed_;
  std::int64_t factor_;
};

}  // namespace

std::unique_ptr<Metric> make_sampled_median_metric(std::string name, KindSet kinds,
                                                   LabelScope scope, std::uint64_t seed,
                                                   std::int64_t factor) {
  return std::make_unique<SampledMedianMetric>(std::move(name), kinds, scope, seed, factor);
}

at::Tensor sampled_median_of(const std::vector<SitePopulation>& sites, std::uint64_t seed,
                             std::int64_t factor) {
  if (sites.empty()) PARITY_FAIL("sampled_median_of: no site");
  std::vector<at::Tensor> samples;
  for (const SitePopulation& s : sites) {
    const at::Tensor values = s.values.reshape({-1});
    const std::int64_t n = values.numel();
    // Stable: equal values keep one order, so every rank sorts alike.
    const at::Tensor sorted = std::get<0>(values.sort(c10::optional<bool>(true), 0));
    const SampleRule rule = sample_rule(seed, s.site.kind, s.site.full_name(), n, factor);
    samples.push_back(sorted.index_select(0, sample_positions(rule, n).to(values.device())));
  }
  const at::Tensor sample = at::cat(samples);
  if (sample.numel() == 0)
    return at::full({}, std::numeric_limits<double>::quiet_NaN(), sample.options());
  return at::quantile(sample, 0.5, c10::nullopt, false, "linear");
}

PARITY_REGISTER_STATISTIC({11,
                           "sampled-median",
                           "median of a deterministic sample",
                           false,
                           {{SourceKind::router_logits, LabelScope::layer}},
                           [](const MetricSpec& spec) -> std::shared_ptr<const Metric> {
                             return make_sampled_median_metric(spec.name, KindSet{spec.kind},
                                                               spec.scope);
                           }});

}  // namespace parity
