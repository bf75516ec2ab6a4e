#include "harness/checks/run_plan.h"

#include <algorithm>
#include <bitset>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "harness/base/check.h"
#include "harness/config/resume_layout.h"
#include "harness/metrics/metric_names.h"
#include "harness/runtime/runtime_faults.h"

namespace parity::checks {

namespace {

struct KnownRun {
  RunVariant variant;
  const char* name;
  const char* title;
};

// Launch order. The names are the report's (docs/report-schema.md): stored
// reports, baselines and sweep records name runs by them.
const KnownRun kKnownRuns[] = {
    {variant::scenario, "a", "scenario as given"},
    {variant::single_rank, "b", "single rank, same global batch, no recompute, no graphs"},
    {variant::eager_without_recompute, "c", "scenario's sharding, no recompute, no graphs"},
    {variant::scenario_again, "a2", "scenario as given, again (determinism)"},
    {variant::eager, "d", "scenario's sharding and recompute, no graphs"},
    {variant::eager_without_recompute_or_dropout, "e",
     "scenario's sharding, no recompute, no graphs, no dropout"},
    {variant::reference_backend, "f", "scenario on the reference backend"},
    {variant::reference_backend_without_dropout, "f",
     "scenario on the reference backend, no dropout"},
    {variant::without_dropout, "g", "scenario as given, no dropout"},
    {variant::router_inputs_changed, "h",
     "scenario without forced routing, padding tokens changed"},
    {variant::resumed, "r",
     "scenario's sharding and recompute, no graphs: saved at --resume-at, resumed at "
     "--resume-layout"},
    {variant::resumed_without_dropout, "r",
     "scenario's sharding and recompute, no graphs, no dropout: saved at --resume-at, resumed at "
     "--resume-layout"},
};

std::optional<std::size_t> known_index(RunVariant v) {
  for (std::size_t i = 0; i < std::size(kKnownRuns); ++i)
    if (kKnownRuns[i].variant == v) return i;
  return std::nullopt;
}

struct ChangeWords {
  RunChange change;
  const char* tag;     // in a composed name
  const char* phrase;  // in a composed title
};
const ChangeWords kChangeWords[] = {
    {RunChange::single_rank, "single-rank", "single rank, same global batch"},
    {RunChange::without_recompute, "no-recompute", "no recompute"},
    {RunChange::eager, "eager", "no graphs"},
    {RunChange::without_dropout, "no-dropout", "no dropout"},
    {RunChange::reference_backend, "reference", "on the reference backend"},
    {RunChange::again, "again", "again"},
    {RunChange::router_inputs_changed, "router-inputs",
     "without forced routing, padding tokens changed"},
    {RunChange::resumed, "resumed", "saved at --resume-at, resumed at --resume-layout"},
};

// The rank-targeted faults of `inject` left out (a reference run keeps the
// code-path faults only).
std::vector<std::string> code_path_faults_of(const std::vector<std::string>& inject, int world) {
  std::vector<std::string> out;
  for (const std::string& spec : inject) {
    std::string why;
    const std::optional<FaultSpec> f = parse_fault_spec(spec, world, &why);
    if (f && !f->rank) out.push_back(spec);
  }
  return out;
}

}  // namespace

std::vector<std::string> parameter_metrics_of(const std::vector<std::string>& metrics) {
  std::vector<std::string> out;
  for (const std::string& n : metrics)
    if (is_parameter_metric(n)) out.push_back(n);
  return out;
}

RunLabel label_of(RunVariant v) {
  if (const std::optional<std::size_t> i = known_index(v))
    return {kKnownRuns[*i].name, kKnownRuns[*i].title};
  // The table's run with the most of v's changes (the earlier row on a tie;
  // the first row of each name only, so that two variants never compose one
  // name), then the changes it lacks.
  const KnownRun* base = &kKnownRuns[0];
  std::size_t most = 0;
  for (const KnownRun& k : kKnownRuns) {
    const bool first_of_its_name = std::find_if(std::begin(kKnownRuns), &k, [&](const KnownRun& e) {
                                     return std::string_view(e.name) == k.name;
                                   }) == &k;
    const std::size_t changes = std::bitset<8>(k.variant.bits()).count();
    if (first_of_its_name && (k.variant.bits() & ~v.bits()) == 0 && changes > most) {
      base = &k;
      most = changes;
    }
  }
  RunLabel out{base->name, base->title};
  for (const ChangeWords& w : kChangeWords)
    if (v.has(w.change) && !base->variant.has(w.change)) {
      out.name += "+" + std::string(w.tag);
      out.title += ", " + std::string(w.phrase);
    }
  return out;
}

std::string run_ref(RunVariant v) { return "(" + label_of(v).name + ")"; }

bool run_precedes(RunVariant x, RunVariant y) {
  const std::optional<std::size_t> i = known_index(x), j = known_index(y);
  if (i && j) return *i < *j;
  if (i || j) return i.has_value();
  return x.bits() < y.bits();
}

bool dropout_on_many_ranks(const RunConfig& scenario) {
  return scenario.dropout > 0 && scenario.world_size() > 1;
}

RunConfig run_config(RunVariant v, const RunConfig& scenario,
                     const std::vector<std::string>& metrics) {
  RunConfig c = scenario;
  c.report.clear();
  c.trace = "(parity check)";  // any non-empty value: the rank program records a trace
  c.metrics = metrics;
  if (v.has(RunChange::eager)) {
    c.graphs = GraphMode::none;
    c.graph_scope.clear();  // a scope needs per-layer graphs
    c.inject = code_path_faults_of(scenario.inject, scenario.world_size());
  }
  if (v.has(RunChange::without_recompute)) c.recompute = "none";
  if (v.has(RunChange::single_rank)) {
    c.microbatches = scenario.microbatches * scenario.dp;
    c.tp = c.cp = c.dp = c.ep = 1;
    c.etp = 0;
    c.clear_pipeline();
    c.sp = false;
    if (dropout_on_many_ranks(scenario)) c.dropout = 0;
  }
  if (v.has(RunChange::without_dropout)) c.dropout = 0;
  if (v.has(RunChange::reference_backend)) c.backend = kReferenceBackend;
  if (v.has(RunChange::router_inputs_changed)) {
    c.moe_force_routing = ForcedRouting::none;
    if (scenario.padding_fraction > 0) c.padding_token_shift = 1;
  }
  if (c.graphs == GraphMode::full_iteration) c.metrics = parameter_metrics_of(metrics);
  if (!v.has(RunChange::resumed)) {
    c.resume_at = 0;
    c.resume_layout.clear();
  }
  return c;
}

ResumedLaunches resumed_launches(const RunConfig& planned, const std::string& checkpoint) {
  ResumedLaunches out;
  std::string why;
  const std::optional<RunConfig> at_layout = resumed_config(planned, &why);
  PARITY_CHECK(at_layout, "--resume-layout " + planned.resume_layout + ": " + why);
  out.resuming = *at_layout;
  out.resuming.resume = checkpoint;
  out.resuming.steps = planned.steps;
  out.saving = planned;
  out.saving.steps = planned.resume_at;
  out.saving.save_checkpoint = checkpoint;
  out.saving.resume_at = 0;
  out.saving.resume_layout.clear();
  return out;
}

}  // namespace parity::checks
