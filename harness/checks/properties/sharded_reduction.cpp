// sharded_reduction: every metric of a TP x CP x DP (x SP) run equals the same
// metric of a single-rank run over the same global batch (the tolerance of
// tolerance.h), and every rank holds the same result.
#include <algorithm>
#include <cmath>

#include "harness/checks/properties/common.h"
#include "harness/metrics/metric_names.h"

namespace parity::checks {

using namespace detail;

namespace {

// Whether `run` reports `metric`: a --metrics name it was given, or a logged
// MoE statistic (reported whenever the tracker is on).
bool run_collects(const CheckRun& run, const std::string& metric) {
  const auto& names = run.config.metrics;
  if (std::find(names.begin(), names.end(), metric) != names.end()) return true;
  for (const MetricSpec& s : known_metrics())
    if (s.name == metric) return false;
  return run.config.moe_per_layer_logging;
}

}  // namespace

PropertyResult check_sharded_reduction(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded,
                                       std::vector<MetricComparison>* rows) {
  std::string compared;
  for (const CheckRun* r : sharded)
    compared += (compared.empty() ? "(" : ", (") + r->name + ") vs (" + single.name + ")";
  PropertyResult p = make("sharded_reduction", compared);
  const Tolerances tolerances = tolerances_for(single.config);
  const double tol = tolerances.metric;
  ErrorTracker err;
  std::int64_t n = 0;
  if (single.ranks.empty()) {
    fail(p, "the single-rank run returned nothing");
    return p;
  }
  const auto& ref = single.ranks[0].steps;
  std::string worst_reason;
  double worst_rel = -1;
  for (const CheckRun* run : sharded) {
    if (run->ranks.empty() || run->config.metrics.empty()) continue;
    // Every rank holds the same (globally reduced) results.
    for (const RankRun& r : run->ranks)
      for (std::size_t s = 0; s < r.steps.size() && s < run->ranks[0].steps.size(); ++s)
        for (const auto& [key, v] : r.steps[s].metrics) {
          auto it = run->ranks[0].steps[s].metrics.find(key);
          const double w = it == run->ranks[0].steps[s].metrics.end() ? NAN : it->second;
          if (!(v == w || (std::isnan(v) && std::isnan(w))))
            fail(p, "(" + run->name + ") step " + std::to_string(s) + " " + key.first + " [" +
                        key.second + "]: rank " + std::to_string(r.rank) + " has " + num(v) +
                        ", rank 0 " + num(w));
        }
    const auto& steps = run->ranks[0].steps;
    for (std::size_t s = 0; s < steps.size() && s < ref.size(); ++s) {
      for (const auto& [key, want] : ref[s].metrics) {
        auto it = steps[s].metrics.find(key);
        if (it == steps[s].metrics.end()) {
          // A run without the forward metrics (full-iteration graphs: (a) keeps
          // the optimizer's norms only) has nothing to compare for them.
          if (!run_collects(*run, key.first)) continue;
          // Per-layer graphs: captured sites are silent on replay steps.
          if (s >= 1 && kind_captured_by_layer_graphs(run->config, metric_kind(key.first)))
            continue;
          fail(p, "(" + run->name + ") step " + std::to_string(s) + ": " + key.first + " [" +
                      key.second + "] missing (the single-rank run has it)");
          continue;
        }
        MetricComparison row{
            run->name, static_cast<std::int64_t>(s), key.first, key.second, it->second, want};
        row.ok = within(it->second, want, tol, &row.abs_err, &row.rel_err);
        ++n;
        err.add(row.abs_err, row.rel_err, key.first, key.second);
        if (!row.ok && row.rel_err > worst_rel) {
          worst_rel = row.rel_err;
          worst_reason = key.first + " [" + key.second + "] step " + std::to_string(s) + " in (" +
                         run->name + "): " + num(row.value) + " vs single-rank " +
                         num(row.reference) + " (abs " + num(row.abs_err) + ", rel " +
                         num(row.rel_err) + " > " + tolerances.basis + " rel " + num(tol) + ")";
        }
        if (rows) rows->push_back(row);
      }
      for (const auto& [key, v] : steps[s].metrics)
        if (!ref[s].metrics.count(key))
          fail(p, "(" + run->name + ") step " + std::to_string(s) + ": " + key.first + " [" +
                      key.second + "] has no single-rank counterpart");
    }
  }
  if (!worst_reason.empty()) {
    // The worst value error leads; a disagreement between ranks found earlier follows.
    const std::string earlier = p.status == Status::fail ? "; also: " + p.reason : "";
    p.status = Status::pass;
    fail(p, worst_reason + earlier);
  }
  err.into(p);
  if (p.status == Status::fail && !worst_reason.empty()) {
    p.worst_site = err.site;
    p.worst_label = err.label;
  }
  if (n == 0 && p.status == Status::pass)
    return skip(p, "no metric results to compare (no --metrics)",
                "use --metrics layer-residual-accumulator-l2 (or any metric)");
  if (p.status == Status::pass)
    p.reason = std::to_string(n) + " metric values within " + tolerances.basis + " rel " + num(tol);
  return p;
}

namespace {
class ShardedReduction final : public Property {
 public:
  std::string_view name() const override { return "sharded_reduction"; }
  std::string_view doc() const override {
    return "every metric of the sharded runs equals the single-rank run's, and every rank holds "
           "the same value";
  }
  std::string_view needs() const override {
    return "--metrics (parity check collects every residual and logit metric when none is named)";
  }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    std::vector<RunVariant> out = sharded_runs(scenario);
    out.push_back(variant::single_rank);
    return out;
  }
  std::string plan_note(const RunConfig& scenario) const override {
    if (!dropout_on_many_ranks(scenario)) return "";
    return "dropout on " + std::to_string(scenario.world_size()) +
           " ranks draws its masks from per-rank RNG streams (as Megatron's tracker does): "
           "sharded_reduction compares " +
           run_ref(variant::eager_without_recompute_or_dropout) +
           ", the sharding without dropout, with " + run_ref(variant::single_rank) +
           " without dropout";
  }
  PropertyResult evaluate(const CheckRuns& runs,
                          std::vector<MetricComparison>* rows) const override {
    std::vector<const CheckRun*> sharded;
    for (RunVariant v : sharded_runs(runs.scenario())) sharded.push_back(&runs.at(v));
    return check_sharded_reduction(runs.at(variant::single_rank), sharded, rows);
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(ShardedReduction, 3)

}  // namespace parity::checks
