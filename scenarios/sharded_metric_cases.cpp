#include "scenarios/sharded_metric_cases.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <ostream>

#include "harness/config/launch_mapping.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/statistics/dimwise_metrics.h"
#include "harness/metrics/statistics/logical_metrics.h"
#include "harness/metrics/statistics/sampled_median.h"

namespace parity::scenarios {

namespace gen = rc::gen;

namespace {

constexpr const char* kProgram = "sharded-metric-case";

// A uniform choice in [0, n) that shrinks toward 0, independent of the size.
std::int64_t below(std::int64_t n) {
  return *gen::resize(rc::kNominalSize, gen::inRange<std::int64_t>(0, n));
}

// k sizes summing to n, any of them possibly 0 (shrinks toward [n, 0, ...]).
std::vector<std::int64_t> uneven_split(std::int64_t n, int k) {
  std::vector<std::int64_t> cuts;
  for (int i = 0; i + 1 < k; ++i) cuts.push_back(n - below(n + 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::int64_t> sizes;
  std::int64_t start = 0;
  for (std::int64_t cut : cuts) {
    sizes.push_back(cut - start);
    start = cut;
  }
  sizes.push_back(n - start);
  return sizes;
}

at::Tensor piece(const at::Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& sizes,
                 int index) {
  std::int64_t offset = 0;
  for (int i = 0; i < index; ++i) offset += sizes[i];
  return t.narrow(dim, offset, sizes[index]);
}

at::Tensor full_tensor(const ShardedMetricCase& c) {
  auto generator = at::detail::createCPUGenerator(c.seed);
  return at::randn({c.seq, c.batch, c.hidden}, generator, at::TensorOptions().dtype(at::kDouble));
}

// The sampled median rejects Owned placements (megatron-reference 3.6), so
// it is left out of cases with an Owned axis. Its factor is small (3, not
// 100) so that the sample of these small tensors holds several elements.
constexpr const char* kSampledMedian = "sampled-median";
constexpr std::int64_t kSampledMedianCaseFactor = 3;

bool has_owned_axis(const ShardedMetricCase& c) {
  const std::pair<int, const AxisCase*> axes[] = {
      {c.tp, &c.tp_axis}, {c.cp, &c.cp_axis}, {c.dp, &c.dp_axis}};
  for (const auto& [size, a] : axes)
    if (size > 1 && a->holding == AxisHolding::owned) return true;
  return false;
}

bool runs(const ShardedMetricCase& c, const std::string& statistic) {
  return statistic != kSampledMedian || !has_owned_axis(c);
}

const MetricSite kCaseSite{"decoder.layers.0", "residual_accumulator",
                           SourceKind::residual_accumulator};

std::vector<std::shared_ptr<const Metric>> metrics_of(const ShardedMetricCase& c) {
  const KindSet kind{SourceKind::residual_accumulator};
  const std::pair<const char*, LogicalStatistic> logical[] = {
      {"l2", LogicalStatistic::l2},           {"max", LogicalStatistic::max},
      {"abs-max", LogicalStatistic::abs_max}, {"min", LogicalStatistic::min},
      {"mean", LogicalStatistic::mean},       {"rms", LogicalStatistic::rms}};
  std::vector<std::shared_ptr<const Metric>> out;
  for (const std::string& s : c.statistics) {
    for (const auto& [name, statistic] : logical)
      if (s == name) out.push_back(make_logical_metric(statistic, s, kind, LabelScope::layer));
    if (s == "mean-row-l2")
      out.push_back(make_dimwise_metric(DimwiseStatistic::mean_row_l2, s, kind, LabelScope::layer));
    if (s == "mean-column-l2")
      out.push_back(
          make_dimwise_metric(DimwiseStatistic::mean_column_l2, s, kind, LabelScope::layer));
    if (s == kSampledMedian && runs(c, s))
      out.push_back(make_sampled_median_metric(s, kind, LabelScope::layer, kSampledMedianSeed,
                                               kSampledMedianCaseFactor));
  }
  return out;
}

// The statistics of the full tensor, in fp64.
std::map<std::string, double> expected(const ShardedMetricCase& c) {
  const at::Tensor x = full_tensor(c);
  const at::Tensor flat = x.reshape({-1});
  const at::Tensor matrix = x.reshape({-1, c.hidden});
  const std::map<std::string, double> all = {
      {"l2", flat.norm().item<double>()},
      {"max", flat.max().item<double>()},
      {"abs-max", flat.abs().max().item<double>()},
      {"min", flat.min().item<double>()},
      {"mean", flat.mean().item<double>()},
      {"rms", flat.pow(2).mean().sqrt().item<double>()},
      {"mean-row-l2", matrix.norm(2, {1}).mean().item<double>()},
      {"mean-column-l2", matrix.norm(2, {0}).mean().item<double>()},
      {kSampledMedian,
       sampled_median_of({{kCaseSite, flat}}, kSampledMedianSeed, kSampledMedianCaseFactor)
           .item<double>()}};
  std::map<std::string, double> out;
  for (const std::string& s : c.statistics)
    if (runs(c, s))
      for (const char* label : {"decoder.layers.0", "global"}) out[s + "@" + label] = all.at(s);
  return out;
}

// The case the registered rank program runs (launch is synchronous; one case
// at a time).
std::mutex g_case_mutex;
const ShardedMetricCase* g_case = nullptr;

// What rank `index` of an axis holds of `x` (its input from the axes before).
// A placeholder (Owned, not the owner) has the shape of the value and contents
// that would change every statistic if they were counted.
at::Tensor hold(const at::Tensor& x, const AxisCase& a, std::int64_t dim, int index) {
  switch (a.holding) {
    case AxisHolding::shard:
      return piece(x, dim, a.split, index);
    case AxisHolding::replica:
      return x;
    case AxisHolding::owned:
      return index == a.owner ? x : at::full_like(x, 1e6);
  }
  return x;
}

Placement placement_of(const AxisCase& a, std::int64_t dim) {
  switch (a.holding) {
    case AxisHolding::shard:
      return Shard{dim};
    case AxisHolding::replica:
      return Replica{};
    case AxisHolding::owned:
      return Owned{a.owner};
  }
  return Replica{};
}

nlohmann::json run_case_rank(RankContext& ctx) {
  const ShardedMetricCase& c = *g_case;
  const RankCoordinates& co = ctx.coordinates;
  at::Tensor mine = full_tensor(c);
  if (c.dp > 1) mine = hold(mine, c.dp_axis, 1, co.dp);
  const std::int64_t local_batch = mine.size(1);
  const std::vector<std::int64_t> microbatches =
      c.microbatches == 1
          ? std::vector<std::int64_t>{local_batch}
          : std::vector<std::int64_t>{local_batch - local_batch / 2, local_batch / 2};
  AxisPlacements placements;
  if (c.tp > 1) placements.at(Axis::tp) = placement_of(c.tp_axis, c.tp_dim);
  if (c.cp > 1) placements.at(Axis::cp) = placement_of(c.cp_axis, 0);
  if (c.dp > 1) placements.at(Axis::dp) = placement_of(c.dp_axis, 1);
  MetricCollector collector(metrics_of(c), ctx.topology, ctx.rank);
  const MetricSite& site = kCaseSite;
  for (int m = 0; m < static_cast<int>(microbatches.size()); ++m) {
    at::Tensor x = piece(mine, 1, microbatches, m);
    if (c.cp > 1) x = hold(x, c.cp_axis, 0, co.cp);
    if (c.tp > 1) x = hold(x, c.tp_axis, c.tp_dim, co.tp);
    collector.observe_placed(site, x.contiguous(), placements, 1, {0, m, GraphPhase::eager});
  }
  MetricExecutor executor(ctx.groups);
  nlohmann::json out = nlohmann::json::object();
  for (const MetricResult& r : collector.commit(executor)) out[r.metric + "@" + r.label] = r.value;
  return out;
}

void register_program() {
  static std::once_flag once;
  std::call_once(once, [] { register_rank_program(kProgram, run_case_rank); });
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

bool close(double got, double want) {
  return std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want));
}

}  // namespace

const std::vector<std::string>& sharded_case_statistics() {
  static const std::vector<std::string> names = {
      "l2",  "max",         "abs-max",        "min",         "mean",
      "rms", "mean-row-l2", "mean-column-l2", kSampledMedian};
  return names;
}

std::string_view to_string(AxisHolding holding) {
  switch (holding) {
    case AxisHolding::shard:
      return "Shard";
    case AxisHolding::replica:
      return "Replica";
    case AxisHolding::owned:
      return "Owned";
  }
  return "?";
}

const AxisCase& ShardedMetricCase::axis(Axis a) const {
  return a == Axis::tp ? tp_axis : a == Axis::cp ? cp_axis : dp_axis;
}

nlohmann::json to_json(const ShardedMetricCase& c) {
  nlohmann::json j = {
      {"tp", c.tp}, {"cp", c.cp}, {"dp", c.dp}, {"shape", {c.seq, c.batch, c.hidden}}};
  const std::pair<Axis, int> dims[] = {{Axis::tp, c.tp_dim}, {Axis::cp, 0}, {Axis::dp, 1}};
  for (const auto& [axis, dim] : dims) {
    const AxisCase& a = c.axis(axis);
    const std::string name(parity::to_string(axis));
    if ((axis == Axis::tp ? c.tp : axis == Axis::cp ? c.cp : c.dp) == 1) continue;
    switch (a.holding) {
      case AxisHolding::shard:
        j[name + "-placement"] = "Shard(" + std::to_string(dim) + ")";
        j[name + "-split"] = a.split;
        break;
      case AxisHolding::replica:
        j[name + "-placement"] = "Replica";
        break;
      case AxisHolding::owned:
        j[name + "-placement"] = "Owned(" + std::to_string(a.owner) + ")";
        break;
    }
  }
  j["microbatches"] = c.microbatches;
  j["statistics"] = c.statistics;
  j["seed"] = c.seed;
  if (!c.inject.empty()) j["inject"] = c.inject;
  return j;
}

void showValue(const ShardedMetricCase& c, std::ostream& os) { os << to_json(c).dump(); }

namespace {

// One axis of `size` ranks over a dim of `n`: Shard (first, the simplest),
// Replica or Owned; `forced` fixes the holding.
AxisCase pick_axis(int size, std::int64_t n, std::optional<AxisHolding> forced) {
  AxisCase a;
  if (size == 1) return a;
  const std::int64_t r = below(4);
  a.holding = forced   ? *forced
              : r < 2  ? AxisHolding::shard
              : r == 2 ? AxisHolding::replica
                       : AxisHolding::owned;
  if (a.holding == AxisHolding::shard) a.split = uneven_split(n, size);
  if (a.holding == AxisHolding::owned) a.owner = static_cast<int>(below(size));
  return a;
}

ShardedMetricCase build_case(std::optional<Axis> forced_axis, std::optional<AxisHolding> forced) {
  ShardedMetricCase c;
  c.tp = 1 + static_cast<int>(below(3));  // world <= 12
  c.cp = 1 + static_cast<int>(below(2));
  c.dp = 1 + static_cast<int>(below(2));
  if (forced_axis == Axis::tp) c.tp = std::max(c.tp, 2);
  if (forced_axis == Axis::cp) c.cp = 2;
  if (forced_axis == Axis::dp) c.dp = 2;
  auto holding_for = [&](Axis a) { return forced_axis == a ? forced : std::nullopt; };
  c.seq = 1 + below(8);
  c.batch = 1 + below(4);
  c.hidden = 1 + below(6);
  c.tp_dim = below(2) == 0 ? 0 : 2;
  c.dp_axis = pick_axis(c.dp, c.batch, holding_for(Axis::dp));
  c.cp_axis = pick_axis(c.cp, c.seq, holding_for(Axis::cp));
  // Under a cp Shard the sequence pieces differ per cp rank, so one tp split
  // of the sequence cannot fit them all: tp then splits the hidden dim.
  if (c.cp > 1 && c.cp_axis.holding == AxisHolding::shard && c.tp_dim == 0) c.tp_dim = 2;
  c.tp_axis = pick_axis(c.tp, c.tp_dim == 0 ? c.seq : c.hidden, holding_for(Axis::tp));
  c.microbatches = 1 + static_cast<int>(below(2));
  c.statistics = sharded_case_statistics();
  c.seed = 1 + static_cast<std::uint64_t>(below(1000));
  return c;
}

}  // namespace

rc::Gen<ShardedMetricCase> gen_sharded_metric_case() {
  return gen::exec([] { return build_case(std::nullopt, std::nullopt); });
}

rc::Gen<ShardedMetricCase> gen_sharded_metric_case(Axis axis, AxisHolding holding) {
  return gen::exec([axis, holding] { return build_case(axis, holding); });
}

ShardedMetricOutcome check_sharded_metric_case(const ShardedMetricCase& c) {
  register_program();
  RunConfig config;
  config.tp = c.tp;
  config.cp = c.cp;
  config.dp = c.dp;
  config.sp = false;
  config.timeout = 60;
  config.check_collectives = true;
  config.inject = c.inject;
  ShardedMetricOutcome out;
  LaunchResult result;
  {
    std::lock_guard<std::mutex> lock(g_case_mutex);
    g_case = &c;
    result = launch(config, kProgram);
    g_case = nullptr;
  }
  if (!result.ok()) {
    out.rank_failure = result.failure->text();
    for (const RankFailure& r : result.failure->ranks)
      if (r.thrown == ThrownError::collective_mismatch) out.collective_mismatch = true;
    return out;
  }
  const std::map<std::string, double> want = expected(c);
  for (int rank = 0; rank < result.world_size; ++rank) {
    const nlohmann::json& got = result.results[rank];
    for (const auto& [key, value] : want) {
      ++out.compared;
      if (!got.contains(key) || !got[key].is_number()) {
        out.mismatches.push_back("rank " + std::to_string(rank) + ": " + key + " missing");
        continue;
      }
      const double v = got[key].get<double>();
      if (!close(v, value))
        out.mismatches.push_back("rank " + std::to_string(rank) + ": " + key + " = " + num(v) +
                                 ", the full tensor gives " + num(value));
    }
  }
  return out;
}

}  // namespace parity::scenarios
