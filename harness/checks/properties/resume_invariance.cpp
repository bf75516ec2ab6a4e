// resume_invariance: a run that trains --resume-at steps at the scenario's
// layout, saves parity's sharded checkpoint and resumes from it at
// --resume-layout for the remaining steps trains as the uninterrupted run:
// every step's loss (and evaluation loss), each parameter's whole gradient
// norm, every metric value, and each parameter's final value (its L2 norm and
// its projection on a fixed random tensor, so a misplaced or permuted element
// shows) equal the uninterrupted single-rank run's within the metric
// tolerance. Dropout: at the same layout the RNG streams carry over, so the
// run keeps its dropout and is compared with the same layout's uninterrupted
// run (d), masks included; at another layout they cannot (which rank draws
// which mask is the layout's), so both sides run without dropout. Resharding
// bugs (the distributed optimizer's flat buffers regrouped wrongly, replicas
// summed, the optimizer's step or the RNG state lost) show here.
#include <cmath>
#include <map>

#include "harness/checks/properties/common.h"
#include "harness/checks/tolerance.h"
#include "harness/config/resume_layout.h"
#include "harness/metrics/collector.h"
#include "harness/parallel/topology.h"

namespace parity::checks {

using namespace detail;

namespace {

bool resume_asked(const RunConfig& scenario) { return scenario.resume_at > 0; }

bool layout_kept(const RunConfig& scenario) {
  const std::optional<RunConfig> at = resumed_config(scenario);
  return at && same_layout(scenario, *at);
}

RunVariant resumed_run(const RunConfig& scenario) {
  return scenario.dropout > 0 && !layout_kept(scenario) ? variant::resumed_without_dropout
                                                        : variant::resumed;
}

// The uninterrupted run (r) is compared with.
RunVariant reference_run(const RunConfig& scenario) {
  if (!(scenario.dropout > 0)) return variant::single_rank;
  if (layout_kept(scenario)) return variant::eager;
  return dropout_on_many_ranks(scenario) ? variant::single_rank
                                         : variant::single_rank.with(RunChange::without_dropout);
}

// One step of a run, over its ranks: each parameter's whole gradient norm from
// its TP pieces (a replica once), every metric (the same on every rank).
struct StepView {
  double loss = 0, eval_loss = 0;
  std::map<std::string, double> grad_norms;
  std::map<MetricKey, double> metrics;
};

// (squared-norm and projection sums over a parameter's TP pieces).
using FinalView = std::map<std::string, std::pair<double, double>>;

int tp_piece(const RankRun& r, const std::string& name, const ParallelTopology& topology) {
  const auto split = r.parameter_tp.find(name);
  return split != r.parameter_tp.end() && split->second == "shard"
             ? detail::shard_piece(topology, r.rank, name)  // an expert's: its expert TP piece
             : -1;
}

void add_steps(const CheckRun& run, std::map<std::int64_t, StepView>& out) {
  const RunConfig& c = run.config;
  const ParallelTopology topology(c.tp, c.cp, c.dp, c.ep, c.pp, c.etp);
  std::map<std::int64_t, std::map<std::string, std::map<int, double>>> pieces;
  for (const RankRun& r : run.ranks)
    for (const StepData& d : r.steps) {
      const bool first = out.count(d.step) == 0;
      StepView& v = out[d.step];
      if (first) {
        v.loss = d.loss;
        v.eval_loss = d.eval_loss;
      }
      for (const auto& [key, value] : d.metrics) v.metrics.try_emplace(key, value);
      for (const auto& [name, norm] : d.grad_norms)
        pieces[d.step][name].try_emplace(tp_piece(r, name, topology), norm);
    }
  for (const auto& [step, by_name] : pieces)
    for (const auto& [name, by_piece] : by_name) {
      double sum_sq = 0;
      for (const auto& [piece, n] : by_piece) sum_sq += n * n;
      out[step].grad_norms[name] = std::sqrt(sum_sq);
    }
}

FinalView final_view(const CheckRun& run) {
  const RunConfig& c = run.config;
  const ParallelTopology topology(c.tp, c.cp, c.dp, c.ep, c.pp, c.etp);
  std::map<std::string, std::map<int, std::pair<double, double>>> pieces;
  for (const RankRun& r : run.ranks)
    for (const auto& [name, value] : r.final_parameters)
      pieces[name].try_emplace(tp_piece(r, name, topology), value);
  FinalView out;
  for (const auto& [name, by_piece] : pieces) {
    double sum_sq = 0, projection = 0;
    for (const auto& [piece, v] : by_piece) {
      sum_sq += v.first * v.first;
      projection += v.second;
    }
    out[name] = {std::sqrt(sum_sq), projection};
  }
  return out;
}

}  // namespace

PropertyResult check_resume_invariance(const CheckRun& resumed, const CheckRun& reference) {
  PropertyResult p =
      make("resume_invariance", "(" + resumed.name + ") vs (" + reference.name + ")");
  const Tolerances tolerances = tolerances_for(reference.config);
  const double tol = tolerances.metric;
  if (!resumed.saved_by) return skip(p, "(" + resumed.name + ") is no resumed run", "");
  const std::int64_t at = resumed.saved_by->config.steps;
  ErrorTracker errors;
  std::int64_t compared = 0;
  auto check = [&](const std::string& what, const std::string& site, double got, double expected) {
    double abs_err = 0, rel_err = 0;
    const bool ok = within(got, expected, tol, &abs_err, &rel_err);
    const std::string label = layer_label(site);
    errors.add(abs_err, rel_err, site, label.empty() ? "global" : label);
    ++compared;
    if (!ok)
      fail(p,
           "(" + resumed.name + ") " + what + ": " + num(got) + " vs uninterrupted (" +
               reference.name + ") " + num(expected) + " (abs " + num(abs_err) + ", rel " +
               num(rel_err) + " > " + tolerances.basis + " rel " + num(tol) + ")",
           site);
  };
  std::map<std::int64_t, StepView> got, want;
  add_steps(*resumed.saved_by, got);
  for (const RankRun& r : resumed.ranks)
    if (!r.steps.empty() && r.steps.front().step != at)
      fail(p, "(" + resumed.name + ") rank " + std::to_string(r.rank) + " resumed at step " +
                  std::to_string(r.steps.front().step) + ", expected " + std::to_string(at));
  add_steps(resumed, got);
  add_steps(reference, want);
  for (const auto& [step, w] : want) {
    const std::string s = "step " + std::to_string(step);
    const auto it = got.find(step);
    if (it == got.end()) {
      fail(p, "(" + resumed.name + ") has no " + s + " (the uninterrupted run has)");
      continue;
    }
    const StepView& g = it->second;
    check(s + " loss", "loss", g.loss, w.loss);
    if (!std::isnan(w.eval_loss)) check(s + " eval loss", "eval loss", g.eval_loss, w.eval_loss);
    for (const auto& [name, norm] : w.grad_norms) {
      const auto n = g.grad_norms.find(name);
      if (n == g.grad_norms.end()) {
        fail(p, "(" + resumed.name + ") " + s + " gradient " + name + ": no rank holds it", name);
        continue;
      }
      check(s + " gradient " + name, name, n->second, norm);
    }
    for (const auto& [key, value] : w.metrics) {
      const auto m = g.metrics.find(key);
      if (m == g.metrics.end()) {
        fail(p, "(" + resumed.name + ") " + s + " " + key.first + " [" + key.second +
                    "] missing (the uninterrupted run has it)");
        continue;
      }
      check(s + " " + key.first + " [" + key.second + "]", key.first, m->second, value);
    }
  }
  // The final parameters: the norm within the tolerance, the projection (of
  // the norm's size) within the tolerance of the norm.
  const FinalView final_got = final_view(resumed), final_want = final_view(reference);
  for (const auto& [name, w] : final_want) {
    const auto g = final_got.find(name);
    if (g == final_got.end()) {
      fail(p, "(" + resumed.name + ") final parameter " + name + ": no rank holds it", name);
      continue;
    }
    check("final parameter " + name + " (L2 norm)", name, g->second.first, w.first);
    const double scale = std::max(w.first, 1e-30);
    check("final parameter " + name + " (random projection / reference norm)", name,
          g->second.second / scale, w.second / scale);
  }
  if (compared == 0) return skip(p, "nothing to compare", "");
  errors.into(p);
  if (p.status == Status::pass)
    p.reason = std::to_string(compared) +
               " losses, gradient norms, metrics and final parameters "
               "within " +
               tolerances.basis + " rel " + num(tol) + " (saved at step " + std::to_string(at) +
               ", resumed at " +
               (resumed.config.world_size() == 1
                    ? std::string("1 rank")
                    : std::to_string(resumed.config.world_size()) + " ranks") +
               ")";
  return p;
}

namespace {
class ResumeInvariance final : public Property {
 public:
  std::string_view name() const override { return "resume_invariance"; }
  std::string_view doc() const override {
    return "a run saved at --resume-at and resumed at --resume-layout trains as the "
           "uninterrupted run: losses, gradient norms, metrics and final parameters equal";
  }
  std::string_view needs() const override {
    return "--resume-at K below --steps (and --resume-layout, e.g. tp=1,dp=2)";
  }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    if (!resume_asked(scenario)) return {};
    return {resumed_run(scenario), reference_run(scenario)};
  }
  std::string plan_note(const RunConfig& scenario) const override {
    if (!resume_asked(scenario)) return "";
    const std::string layout =
        scenario.resume_layout.empty() ? "the same layout" : "layout " + scenario.resume_layout;
    std::string note = run_ref(resumed_run(scenario)) + " trains " +
                       std::to_string(scenario.resume_at) +
                       " step(s), saves a checkpoint and resumes from it at " + layout;
    if (scenario.dropout > 0)
      note += layout_kept(scenario)
                  ? "; the RNG streams carry over, so it keeps its dropout against " +
                        run_ref(reference_run(scenario))
                  : "; the RNG streams cannot carry over to another layout, so it runs "
                    "without dropout against " +
                        run_ref(reference_run(scenario));
    return note;
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    const RunConfig& scenario = runs.scenario();
    if (!resume_asked(scenario)) {
      PropertyResult p = make("resume_invariance", "");
      return skip(p, "the scenario asks for no resume",
                  "use --resume-at 1 --resume-layout dp=2 (scenario keys resume-at, "
                  "resume-layout), with --steps 2 or more");
    }
    return check_resume_invariance(runs.at(resumed_run(scenario)),
                                   runs.at(reference_run(scenario)));
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(ResumeInvariance, 11)

}  // namespace parity::checks
