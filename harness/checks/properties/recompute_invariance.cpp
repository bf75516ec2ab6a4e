// recompute_invariance: with any recompute variant, outputs and observed values
// are bitwise those of the run without recompute; gradients agree to
// summation-order rounding (the tolerance of tolerance.h).
#include <cmath>

#include "harness/checks/properties/common.h"

namespace parity::checks {

using namespace detail;

PropertyResult check_recompute_invariance(const CheckRun& a, const CheckRun& c) {
  PropertyResult p = make("recompute_invariance", "(" + a.name + ") vs (" + c.name + ")");
  if (a.config.recompute == "none")
    return skip(p, "the scenario has no recompute",
                "use --recompute selective:core_attn (or full-uniform, full-block, "
                "selective:layernorm, selective:mlp)");
  if (a.config.graphs == GraphMode::full_iteration && a.config.graph_warmup == 0)
    return skip(p,
                "full-iteration graphs with graph warmup 0: every step is captured or replayed, "
                "both bypass checkpoints, so nothing is recomputed",
                "use --graph-warmup 1");
  const Tolerances tolerances = tolerances_for(a.config);
  const double tol = tolerances.gradient;
  const std::int64_t identical = steps_with_identical_weights(a, c);
  const std::int64_t obs =
      compare_observations(a, c, p, [&](const ObsKey& k) { return std::get<1>(k) < identical; });
  // The trace is always recorded: no observation means the sites went silent.
  if (obs == 0) fail(p, "no step observation to compare (no trace?)");
  compare_losses(a, c, p, identical, tol, tolerances.basis);
  compare_metrics_exact(a, c, p, [](std::int64_t, const std::string&) { return true; });
  ErrorTracker err;
  std::int64_t grads = 0, bitwise = 0;
  for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r)
    for (std::size_t s = 0; s < a.ranks[r].steps.size() && s < c.ranks[r].steps.size(); ++s) {
      const StepData &x = a.ranks[r].steps[s], &y = c.ranks[r].steps[s];
      for (const auto& [name, d] : x.grads) {
        ++grads;
        auto it = y.grads.find(name);
        if (it == y.grads.end()) {
          fail(p, "gradient " + name + " missing in (" + c.name + ")", name);
          continue;
        }
        if (it->second == d) {
          ++bitwise;
          err.add(0, 0, name, "");
          continue;
        }
        double ae = 0, re = 0;
        const double nx = x.grad_norms.count(name) ? x.grad_norms.at(name) : NAN;
        const double ny = y.grad_norms.count(name) ? y.grad_norms.at(name) : NAN;
        const bool ok = within(nx, ny, tol, &ae, &re);
        err.add(ae, re, name, "");
        if (!ok)
          fail(p,
               "rank " + std::to_string(r) + " step " + std::to_string(s) + " gradient " + name +
                   ": norm " + num(nx) + " vs " + num(ny) + " (rel " + num(re) + " > " +
                   tolerances.basis + " rel " + num(tol) + ")",
               name);
      }
    }
  err.into(p);
  std::int64_t steps = a.ranks.empty() ? 0 : static_cast<std::int64_t>(a.ranks[0].steps.size());
  const std::string later = identical < steps
                                ? " (steps " + std::to_string(identical) +
                                      "+ not bitwise: the gradients "
                                      "of step " +
                                      std::to_string(identical - 1) +
                                      " differ by rounding, so "
                                      "the updated weights differ; their losses within rel " +
                                      num(tol) + ")"
                                : "";
  p.note = std::to_string(obs) + " observations, losses, logits and metrics of steps < " +
           std::to_string(identical) + " bitwise" + later + "; " + std::to_string(bitwise) + "/" +
           std::to_string(grads) + " gradients bitwise" +
           (bitwise < grads ? ", the rest within " + tolerances.basis + " rel " + num(tol) +
                                  " (gradient L2 norms)"
                            : "");
  if (p.status == Status::pass) p.reason = p.note;
  return p;
}

namespace {
class RecomputeInvariance final : public Property {
 public:
  std::string_view name() const override { return "recompute_invariance"; }
  std::string_view doc() const override {
    return "the scenario's observations, losses, metrics and gradients equal the same sharding "
           "without recompute and graphs";
  }
  std::string_view needs() const override {
    return "--recompute (and, under full-iteration graphs, --graph-warmup >= 1)";
  }
  std::vector<RunVariant> runs_needed(const RunConfig&) const override {
    return {variant::eager_without_recompute};
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_recompute_invariance(runs.at(variant::scenario),
                                      runs.at(variant::eager_without_recompute));
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(RecomputeInvariance, 2)

}  // namespace parity::checks
