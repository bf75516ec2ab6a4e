// graph_replay: replay steps observe exactly what eager steps observe for sites
// outside graphed regions and nothing inside; full-iteration graphs observe
// nothing after the capture; no prepared state aliases a static buffer.
#include "harness/checks/properties/common.h"
#include "harness/metrics/collector.h"

namespace parity::checks {

using namespace detail;

PropertyResult graph_replay_alias_failure(const std::string& run,
                                          const std::string& alias_failure) {
  PropertyResult p = make("graph_replay", "(" + run + ")");
  fail(p, alias_failure);
  return p;
}

namespace {
// The gradient each decoder layer received at its input, per microbatch, read
// at the end of the step: a replay that hands a gradient back in a static
// buffer sees it overwritten by a later replay of the same region before then
// (fault static-grad-aliasing). Within the gradient tolerance: replays bypass
// the scenario's checkpoints, so they may round differently.
std::int64_t compare_layer_input_gradients(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                                           double tol) {
  std::int64_t n = 0;
  for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r)
    for (std::size_t s = 0; s < a.ranks[r].steps.size() && s < c.ranks[r].steps.size(); ++s)
      for (const auto& [label, want] : c.ranks[r].steps[s].input_grad_norms) {
        const auto& got = a.ranks[r].steps[s].input_grad_norms;
        const auto it = got.find(label);
        if (it == got.end()) continue;
        ++n;
        double ae = 0, re = 0;
        if (!within(it->second, want, tol, &ae, &re))
          fail(p,
               "(" + a.name + ") rank " + std::to_string(a.ranks[r].rank) + " step " +
                   std::to_string(s) + " " + label + ": input gradient norm " + num(it->second) +
                   " vs (" + c.name + ") " + num(want) + " (rel " + num(re) + " > " + num(tol) +
                   "): a replayed region's gradient changed after it was handed back",
               label.substr(0, label.find('/')));
      }
  return n;
}
}  // namespace

PropertyResult check_graph_replay(const CheckRun& a, const CheckRun& c) {
  PropertyResult p = make("graph_replay", "(" + a.name + ") vs (" + c.name + ")");
  const RunConfig& config = a.config;
  if (config.graphs == GraphMode::none)
    return skip(p, "the scenario has no graphs", "use --graphs per-layer (or full-iteration)");
  const std::int64_t K = config.graph_warmup;
  // A step after the capture is what this property compares.
  if (config.graphs == GraphMode::per_layer && config.steps < 2)
    return skip(p, "per-layer graphs with 1 step: step 0 records, no step replays",
                "use --steps 2");
  if (config.graphs == GraphMode::full_iteration && config.steps <= K + 1)
    return skip(p,
                "full-iteration graphs with " + std::to_string(config.steps) +
                    " step(s) and graph "
                    "warmup " +
                    std::to_string(K) + ": no step after the capture (steps <= graph-warmup + 1)",
                "use --steps " + std::to_string(K + 2));
  std::int64_t compared = 0, silent = 0;
  // Per-layer warmup and capture run between steps: a training step never counts them.
  for (const RankRun& r : a.ranks)
    for (const Observation& o : r.trace)
      if (o.step >= 0 &&
          (o.phase == "warmup" || (o.phase == "capture" && config.graphs == GraphMode::per_layer)))
        fail(p,
             "(" + a.name + ") rank " + std::to_string(r.rank) + " " + o.site + ": a " + o.phase +
                 " observation labelled step " + std::to_string(o.step) +
                 " (graph warmup and capture are not training steps)",
             o.site);
  if (config.graphs == GraphMode::per_layer) {
    for (const RankRun& r : a.ranks)
      for (const Observation& o : r.trace) {
        if (o.step >= 1 && captured_by_layer_graphs(config, o.site))
          fail(p,
               "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                   std::to_string(o.step) + " " + o.site + ": observed in phase " + o.phase +
                   " inside a captured graph region on a replay step",
               o.site);
      }
    const std::int64_t identical = steps_with_identical_weights(a, c);
    compared = compare_observations(a, c, p, [&](const ObsKey& k) {
      return std::get<1>(k) >= 1 && std::get<1>(k) < identical &&
             !captured_by_layer_graphs(config, std::get<3>(k));
    });
    if (compared == 0)
      fail(p, "no replay step could be compared bitwise (the gradients of step 0 differ)");
    if (identical < config.steps)
      p.note = "steps " + std::to_string(identical) +
               "+ compared within tolerance only (the "
               "gradients of step " +
               std::to_string(identical - 1) +
               " differ by rounding: "
               "replays bypass the scenario's checkpoints); ";
    for (const RankRun& r : c.ranks)
      for (const Observation& o : r.trace)
        if (o.step >= 1 && captured_by_layer_graphs(config, o.site)) ++silent;
    compare_metrics_exact(a, c, p, [&](std::int64_t s, const std::string& kind) {
      return s >= 1 && !kind_captured_by_layer_graphs(config, kind);
    });
    p.note += std::to_string(compared) +
              " replay-step observations outside the layers bitwise "
              "equal to eager; " +
              std::to_string(silent) +
              " inside observations of eager absent "
              "on replay";
  } else {
    for (const RankRun& r : a.ranks)
      for (const Observation& o : r.trace) {
        if (o.step > K)
          fail(p,
               "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                   std::to_string(o.step) + " " + o.site + ": observed after the capture (phase " +
                   o.phase + ")",
               o.site);
        else if (o.step == K && o.phase != "capture")
          fail(p,
               "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                   std::to_string(o.step) + " " + o.site + ": phase " + o.phase +
                   " in the capture iteration",
               o.site);
      }
    compared = compare_observations(a, c, p, [&](const ObsKey& k) { return std::get<1>(k) < K; });
    for (const RankRun& r : c.ranks)
      for (const Observation& o : r.trace)
        if (o.step > K) ++silent;
    // The replays' silence is the comparison: (c) observed something there.
    if (silent == 0)
      fail(p, "(" + c.name + ") observed nothing after step " + std::to_string(K) +
                  ": the silence of (" + a.name + ")'s replays was not compared");
    p.note = std::to_string(compared) + " eager-iteration observations bitwise equal to (" +
             c.name + "); " + std::to_string(silent) + " observations of (" + c.name +
             ") after the capture step absent in (" + a.name + ")";
  }
  const Tolerances tolerances = tolerances_for(config);
  compare_losses(a, c, p, steps_with_identical_weights(a, c), tolerances.gradient,
                 tolerances.basis);
  const std::int64_t input_grads = compare_layer_input_gradients(a, c, p, tolerances.gradient);
  if (p.status == Status::pass)
    p.reason = p.note + "; losses equal; " + std::to_string(input_grads) +
               " layer-input gradients (per microbatch, read at the end of the step) equal";
  p.max_abs = 0;
  p.max_rel = 0;
  return p;
}

namespace {

// The eager run graph_replay compares with: with the scenario's recompute when
// it has graphs and recompute (replays bypass checkpoints, eager runs do not),
// else without.
RunVariant eager_reference(const RunConfig& scenario) {
  return scenario.graphs != GraphMode::none && scenario.recompute != "none"
             ? variant::eager
             : variant::eager_without_recompute;
}

class GraphReplay final : public Property {
 public:
  std::string_view name() const override { return "graph_replay"; }
  std::string_view doc() const override {
    return "replay steps observe nothing inside a captured graph and match the eager run outside "
           "it";
  }
  std::string_view needs() const override {
    return "--graphs per-layer with --steps >= 2, or full-iteration with --steps >= graph-warmup + "
           "2";
  }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    return {eager_reference(scenario)};
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_graph_replay(runs.at(variant::scenario),
                              runs.at(eager_reference(runs.scenario())));
  }
  std::optional<ClaimedFailure> claim_failure(const std::string& run,
                                              const FailureReport& failure) const override {
    // The collector's storage rule (a graph's static buffer must not be kept),
    // in whichever run collects metrics first.
    const std::string_view aliasing =
        failure_tag(MetricFailure::prepared_state_aliases_observation);
    for (const RankFailure& f : failure.ranks)
      if (f.error_kind == aliasing) {
        const std::string why =
            "prepared metric state aliases an observed tensor: " + one_line(failure.text(), 300);
        return ClaimedFailure{"aliasing", graph_replay_alias_failure(run, why)};
      }
    return std::nullopt;
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(GraphReplay, 4)

}  // namespace parity::checks
