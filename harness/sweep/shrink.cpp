#include "harness/sweep/shrink.h"

#include <functional>
#include <vector>

namespace parity::sweep {
namespace {

// One simplification: false when it does not apply (the value is simplest).
using Step = std::function<bool(RunConfig&)>;

Step toward(int RunConfig::*field, int simplest) {
  return [field, simplest](RunConfig& c) {
    if (c.*field <= simplest) return false;
    c.*field = simplest;
    return true;
  };
}
Step halve(int RunConfig::*field) {
  return [field](RunConfig& c) {
    if (c.*field < 4 || c.*field % 2) return false;
    c.*field /= 2;
    return true;
  };
}

// Simplest first: the layout, then the modes, then the model's size.
std::vector<Step> steps() {
  return {
      [](RunConfig& c) {
        if (c.tp == 1) return false;
        c.tp = 1;
        c.sp = false;
        return true;
      },
      halve(&RunConfig::tp),
      toward(&RunConfig::cp, 1),
      halve(&RunConfig::cp),
      toward(&RunConfig::dp, 1),
      halve(&RunConfig::dp),
      [](RunConfig& c) { return c.sp ? (c.sp = false, true) : false; },
      [](RunConfig& c) { return c.recompute != "none" ? (c.recompute = "none", true) : false; },
      [](RunConfig& c) {
        if (c.graphs == GraphMode::none) return false;
        c.graphs = GraphMode::none;
        c.graph_scope.clear();  // it needs per-layer graphs
        return true;
      },
      [](RunConfig& c) { return !c.graph_scope.empty() ? (c.graph_scope.clear(), true) : false; },
      toward(&RunConfig::graph_warmup, 0),
      toward(&RunConfig::layers, 1),
      toward(&RunConfig::steps, 1),
      toward(&RunConfig::eval_every, 0),
      toward(&RunConfig::microbatches, 1),
      toward(&RunConfig::micro_batch, 1),
      [](RunConfig& c) { return c.dropout > 0 ? (c.dropout = 0, true) : false; },
  };
}

bool fails(const checks::CheckOutcome& o, const std::string& property) {
  const checks::PropertyResult* p = o.property(property);
  return p && p->status == checks::Status::fail;
}

}  // namespace

ShrinkResult shrink_failure(const RunConfig& failing, const checks::CheckOutcome& outcome,
                            const std::string& property, int max_candidates,
                            const LaunchOptions& options) {
  ShrinkResult r{failing, outcome, 0, 0};
  for (bool progress = true; progress && r.candidates < max_candidates;) {
    progress = false;
    for (const Step& step : steps()) {
      if (r.candidates >= max_candidates) break;
      RunConfig candidate = r.scenario;
      if (!step(candidate) || !checks::validate_check_scenario(candidate).empty()) continue;
      ++r.candidates;
      checks::CheckOutcome o = checks::execute_check(candidate, "sweep --shrink", options);
      if (!fails(o, property)) continue;
      r.scenario = candidate;
      r.outcome = std::move(o);
      ++r.accepted;
      progress = true;
    }
  }
  return r;
}

}  // namespace parity::sweep
