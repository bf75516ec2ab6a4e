// backend_parity: a backend other than the reference observes the same sites,
// in the same phases and order, with values within the dtype's tolerance of the
// reference (contract.md section 5); losses, per-parameter gradient norms and
// metric results agree within the same tolerance. Digests cannot match across
// backends (other kernels, other summation orders), so observed values are
// compared by their trace summaries (sum of squares and sum, fp64).
#include <algorithm>
#include <cmath>

#include "harness/checks/properties/common.h"

namespace parity::checks {

using namespace detail;

namespace {

// Phases whose observed tensors hold computed values on every backend: inside
// a stream capture a device tensor holds nothing yet (and the reference's
// emulated capture records NaN poison), and replays observe nothing.
bool holds_values(const std::string& phase) {
  return phase == "eager" || phase == "record" || phase == "warmup";
}

// Collects the comparisons; the FAIL reason names the worst value beyond the
// tolerance, or the first structural difference when there is one.
struct Comparison {
  double tol = 0;
  std::string basis, side, ref;
  std::int64_t compared = 0, bitwise = 0, digests = 0;
  ErrorTracker err;
  std::string structural, worst_reason;
  double worst_rel = -1;

  // |x - y| <= tol * max(scale, 1); scale defaults to |y|.
  void value(double x, double y, const std::string& what, const std::string& site,
             const std::string& label, double scale = -1) {
    ++compared;
    double abs_err = 0, rel_err = 0;
    bool ok = within(x, y, tol, &abs_err, &rel_err);
    if (scale >= 0 && std::isfinite(abs_err)) {
      // A sum of n terms each within rel tol moves by up to tol * sqrt(n) * L2.
      rel_err = abs_err / std::max(scale, 1.0);
      ok = abs_err <= tol * std::max(scale, 1.0);
    }
    err.add(abs_err, rel_err, site, label);
    if (!ok && rel_err > worst_rel) {
      worst_rel = rel_err;
      worst_reason = what + ": " + num(x) + " in (" + side + ") vs " + num(y) + " in (" + ref +
                     ") (abs " + num(abs_err) + ", rel " + num(rel_err) + " > " + basis + " rel " +
                     num(tol) + ")";
    }
  }
  void mismatch(const std::string& what) {
    if (structural.empty()) structural = what;
  }
};

void compare_steps(const RankRun& x, const RankRun& y, Comparison& c) {
  const std::string rank = "rank " + std::to_string(x.rank);
  if (x.steps.size() != y.steps.size())
    return c.mismatch(rank + ": " + std::to_string(x.steps.size()) + " step(s) in (" + c.side +
                      "), " + std::to_string(y.steps.size()) + " in (" + c.ref + ")");
  for (std::size_t s = 0; s < x.steps.size(); ++s) {
    const StepData &u = x.steps[s], &v = y.steps[s];
    const std::string at = rank + " step " + std::to_string(s);
    c.value(u.loss, v.loss, at + " loss", "loss", "global");
    for (const auto& [param, want] : v.grad_norms) {
      const auto it = u.grad_norms.find(param);
      if (it == u.grad_norms.end()) {
        c.mismatch(at + ": no gradient norm of " + param + " in (" + c.side + ")");
        continue;
      }
      c.value(it->second, want, at + " gradient L2 of " + param, param, "grad");
    }
    for (const auto& [key, want] : v.metrics) {
      const auto it = u.metrics.find(key);
      if (it == u.metrics.end()) {
        c.mismatch(at + ": " + key.first + " [" + key.second + "] missing in (" + c.side + ")");
        continue;
      }
      c.value(it->second, want, at + " " + key.first + " [" + key.second + "]", key.first,
              key.second);
    }
    if (u.metrics.size() != v.metrics.size() || u.grad_norms.size() != v.grad_norms.size())
      c.mismatch(at + ": (" + c.side + ") has results (" + c.ref + ") lacks");
  }
}

std::string describe(const Observation& o) {
  return "step " + std::to_string(o.step) + " mb " + std::to_string(o.microbatch) + " " + o.phase +
         " " + o.site;
}

void compare_trace(const RankRun& x, const RankRun& y, Comparison& c) {
  const std::string rank = "rank " + std::to_string(x.rank);
  const std::size_t n = std::min(x.trace.size(), y.trace.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Observation &u = x.trace[i], &v = y.trace[i];
    if (u.step != v.step || u.microbatch != v.microbatch || u.phase != v.phase ||
        u.site != v.site || u.kind != v.kind)
      return c.mismatch(rank + " observation " + std::to_string(i) + ": " + describe(u) + " in (" +
                        c.side + "), " + describe(v) + " in (" + c.ref + ")");
    if (!holds_values(v.phase)) continue;
    if (u.numel != v.numel)
      return c.mismatch(rank + " " + describe(u) + ": " + std::to_string(u.numel) +
                        " element(s) in (" + c.side + "), " + std::to_string(v.numel) + " in (" +
                        c.ref + ")");
    ++c.digests;
    if (!u.digest.empty() && u.digest == v.digest) ++c.bitwise;
    const std::string label = "step " + std::to_string(v.step);
    c.value(u.sum_sq, v.sum_sq, rank + " " + describe(u) + " sum of squares", v.site, label);
    const double l2 = std::isfinite(v.sum_sq) ? std::sqrt(v.sum_sq) : 0.0;
    c.value(u.sum, v.sum, rank + " " + describe(u) + " sum", v.site, label,
            std::max(std::fabs(v.sum),
                     std::sqrt(static_cast<double>(std::max<std::int64_t>(v.numel, 0))) * l2));
  }
  if (x.trace.size() != y.trace.size())
    c.mismatch(rank + ": " + std::to_string(x.trace.size()) + " observation(s) in (" + c.side +
               "), " + std::to_string(y.trace.size()) + " in (" + c.ref + ")");
}

}  // namespace

PropertyResult check_backend_parity(const CheckRun& side, const CheckRun& reference) {
  PropertyResult p = make("backend_parity", "(" + side.name + ") vs (" + reference.name + ")");
  const Tolerances tolerances = tolerances_for(side.config);
  Comparison c;
  c.tol = tolerances.backend;
  c.basis = tolerances.basis;
  c.side = side.name;
  c.ref = reference.name;
  if (side.ranks.size() != reference.ranks.size()) {
    fail(p, std::to_string(side.ranks.size()) + " rank result(s) in (" + side.name + "), " +
                std::to_string(reference.ranks.size()) + " in (" + reference.name + ")");
    return p;
  }
  for (std::size_t r = 0; r < side.ranks.size(); ++r) {
    compare_steps(side.ranks[r], reference.ranks[r], c);
    compare_trace(side.ranks[r], reference.ranks[r], c);
  }
  c.err.into(p);
  if (!c.structural.empty() || !c.worst_reason.empty()) {
    fail(p, !c.structural.empty() ? c.structural : c.worst_reason);
    if (c.structural.empty()) {
      p.worst_site = c.err.site;
      p.worst_label = c.err.label;
    }
    return p;
  }
  if (c.compared == 0) return skip(p, "no value to compare (no step result, no observation)", "");
  p.reason = std::to_string(c.compared) + " values (" + side.config.backend + " vs " +
             reference.config.backend + ") within " + tolerances.basis + " rel " + num(c.tol);
  p.note = std::to_string(c.bitwise) + " of " + std::to_string(c.digests) +
           " observations bitwise equal";
  return p;
}

namespace {

// With dropout both sides run without it: the backends' generators draw
// different masks.
RunVariant reference_run(const RunConfig& scenario) {
  return scenario.dropout > 0 ? variant::reference_backend_without_dropout
                              : variant::reference_backend;
}
RunVariant compared_run(const RunConfig& scenario) {
  return scenario.dropout > 0 ? variant::without_dropout : variant::scenario;
}

class BackendParity final : public Property {
 public:
  std::string_view name() const override { return "backend_parity"; }
  std::string_view doc() const override {
    return "the scenario on its backend equals the same scenario on the reference backend, within "
           "the backend tolerance";
  }
  std::string_view needs() const override { return "--backend other than reference (e.g. cuda)"; }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    if (scenario.backend == kReferenceBackend) return {};
    return {reference_run(scenario), compared_run(scenario)};
  }
  std::string plan_note(const RunConfig& scenario) const override {
    if (scenario.backend == kReferenceBackend || !(scenario.dropout > 0)) return "";
    return "dropout masks come from different generators on " + scenario.backend + " and " +
           kReferenceBackend + ": backend_parity compares " + run_ref(variant::without_dropout) +
           ", the scenario without dropout, with " +
           run_ref(variant::reference_backend_without_dropout) + ", the same on the reference";
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    const RunConfig& scenario = runs.scenario();
    if (scenario.backend == kReferenceBackend) {
      PropertyResult p = make("backend_parity", "");
      return skip(p,
                  "the scenario runs on the reference backend, the oracle the other backends "
                  "are compared with",
                  "use --backend cuda (a build with the CUDA backend, on a machine with a GPU)");
    }
    PropertyResult p =
        check_backend_parity(runs.at(compared_run(scenario)), runs.at(reference_run(scenario)));
    if (scenario.dropout > 0 && p.status != Status::skip)
      p.note += (p.note.empty() ? "" : "; ") +
                std::string("compared without dropout (the backends draw different masks)");
    return p;
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(BackendParity, 5)

}  // namespace parity::checks
