// sharded_gradients: a sharded run trains the model the single-rank run
// trains. Each step's loss, and each parameter's whole gradient (the L2 norm
// over its pieces: one copy of each TP shard, a TP replica once, an expert
// from the ranks that hold it) after finalize_grads, equal the single-rank
// run's over the same global batch, within the metric tolerance. Loss and
// gradient scaling across CP and DP (Megatron-LM #673, #906) and a CP
// attention backward that drops the other ranks' contributions (diffusers
// #14265) show here first; the forward's metrics see them a step later.
#include <cmath>
#include <map>

#include "harness/checks/properties/common.h"
#include "harness/checks/tolerance.h"
#include "harness/metrics/collector.h"
#include "harness/parallel/topology.h"

namespace parity::checks {

using namespace detail;

PropertyResult check_sharded_gradients(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded) {
  PropertyResult p = make("sharded_gradients", run_list(sharded) + " vs (" + single.name + ")");
  const Tolerances tolerances = tolerances_for(single.config);
  const double tol = tolerances.metric;
  if (single.ranks.empty()) return skip(p, "(" + single.name + ") returned no rank result", "");
  const std::vector<StepData>& want = single.ranks[0].steps;
  ErrorTracker errors;
  std::int64_t compared = 0;
  // `site`: the parameter's name, or "loss" / "eval loss" (the report's worst
  // site; its layer, or "global", is the worst label).
  auto check = [&](const CheckRun& run, std::size_t step, const std::string& what,
                   const std::string& site, double got, double expected) {
    double abs_err = 0, rel_err = 0;
    const bool ok = within(got, expected, tol, &abs_err, &rel_err);
    const std::string label = layer_label(site);
    errors.add(abs_err, rel_err, site, label.empty() ? "global" : label);
    ++compared;
    if (!ok)
      fail(p,
           "(" + run.name + ") step " + std::to_string(step) + " " + what + ": " + num(got) +
               " vs single-rank " + num(expected) + " (abs " + num(abs_err) + ", rel " +
               num(rel_err) + " > " + tolerances.basis + " rel " + num(tol) + ")",
           site);
  };
  for (const CheckRun* run : sharded) {
    const RunConfig& c = run->config;
    if (c.world_size() < 2 || run->ranks.empty()) continue;
    const ParallelTopology topology(c.tp, c.cp, c.dp, c.ep, c.pp, c.etp);
    for (std::size_t s = 0; s < want.size() && s < run->ranks[0].steps.size(); ++s) {
      check(*run, s, "loss", "loss", run->ranks[0].steps[s].loss, want[s].loss);
      if (!std::isnan(want[s].eval_loss))
        check(*run, s, "eval loss", "eval loss", run->ranks[0].steps[s].eval_loss,
              want[s].eval_loss);
      // parameter -> piece (TP rank of a shard, a routed expert's ETP rank, -1
      // for a replica) -> its norm.
      std::map<std::string, std::map<int, double>> pieces;
      for (const RankRun& r : run->ranks) {
        if (s >= r.steps.size()) continue;
        for (const auto& [name, norm] : r.steps[s].grad_norms) {
          const auto split = r.parameter_tp.find(name);
          if (split == r.parameter_tp.end()) continue;
          pieces[name].try_emplace(
              split->second == "shard" ? shard_piece(topology, r.rank, name) : -1, norm);
        }
      }
      for (const auto& [name, norm] : want[s].grad_norms) {
        const auto it = pieces.find(name);
        if (it == pieces.end()) {
          if (!run->ranks[0].parameter_tp.empty())
            fail(p,
                 "(" + run->name + ") step " + std::to_string(s) + " gradient " + name +
                     ": no rank holds it (the single-rank run has it)",
                 name);
          continue;
        }
        double sum_sq = 0;
        for (const auto& [piece, n] : it->second) sum_sq += n * n;
        check(*run, s, "gradient " + name, name, std::sqrt(sum_sq), norm);
      }
    }
  }
  if (compared == 0)
    return skip(p, "no sharded run to compare with the single-rank run",
                "use --tp 2 (or --cp 2, --dp 2)");
  errors.into(p);
  if (p.status == Status::pass)
    p.reason = std::to_string(compared) + " losses and gradient norms within " + tolerances.basis +
               " rel " + num(tol);
  return p;
}

namespace {
class ShardedGradients final : public Property {
 public:
  std::string_view name() const override { return "sharded_gradients"; }
  std::string_view doc() const override {
    return "each step's loss and each parameter's whole gradient norm equal the single-rank run's";
  }
  std::string_view needs() const override { return "a sharded run (--tp, --cp or --dp > 1)"; }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    std::vector<RunVariant> out = sharded_runs(scenario);
    out.push_back(variant::single_rank);
    return out;
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    std::vector<const CheckRun*> sharded;
    for (RunVariant v : sharded_runs(runs.scenario())) sharded.push_back(&runs.at(v));
    return check_sharded_gradients(runs.at(variant::single_rank), sharded);
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(ShardedGradients, 10)

}  // namespace parity::checks
