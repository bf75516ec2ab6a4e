// parity check's plan and plug-ins: the runs by what they change (run_plan.h),
// the plan as the union of what the registered properties need, the registry
// itself, and the typed causes by which a property claims a run's failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "harness/base/files.h"
#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/config/launch_mapping.h"
#include "harness/metrics/collector.h"
#include "harness/parallel/errors.h"
#include "harness/runtime/launcher.h"
#include "tests/support/folder_entries.h"

namespace parity::checks {
namespace {

std::vector<std::string> run_names(const CheckPlan& plan) {
  std::vector<std::string> out;
  for (const PlannedRun& r : plan.runs) out.push_back(r.name);
  return out;
}

// The registry is what every list of properties reads: each registered
// property comes from its own file under harness/checks/properties/ (named
// like it), says what it does, and has its rows in docs/properties.md.
TEST(PropertyRegistry, EveryPropertyFileRegistersOneDocumentedProperty) {
  const std::string source = PARITY_SOURCE_DIR;
  const std::optional<std::string> doc = files::read(source + "/docs/properties.md");
  ASSERT_TRUE(doc.has_value());
  std::set<std::string> names;
  for (const Property* p : registered_properties()) {
    const std::string name(p->name());
    EXPECT_TRUE(names.insert(name).second) << name << " registered twice";
    EXPECT_FALSE(p->doc().empty()) << name;
    EXPECT_FALSE(p->needs().empty()) << name;
    EXPECT_EQ(find_property(name), p);
    // One row in the table of what each compares, one in the SKIP table.
    std::size_t rows = 0;
    for (std::size_t at = doc->find("\n| " + name + " |"); at != std::string::npos;
         at = doc->find("\n| " + name + " |", at + 1))
      ++rows;
    EXPECT_EQ(rows, 2u) << "docs/properties.md rows of " << name;
  }
  std::set<std::string> files;
  for (const std::string& f : testing::folder_entries(source + "/harness/checks/properties"))
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".cpp") == 0 && f != "common.cpp")
      files.insert(f.substr(0, f.size() - 4));
  EXPECT_EQ(files, names) << "one file per property, named like it";
  EXPECT_EQ(find_property("no_such_property"), nullptr);
  // What a scenario's "expect" may name is the registry, in its order.
  std::vector<std::string> in_order;
  for (const Property* p : registered_properties()) in_order.emplace_back(p->name());
  EXPECT_EQ(check_property_names(), in_order);
}

TEST(RunPlan, EachRunHasOneNameAndTitleAndALaunchOrder) {
  EXPECT_EQ(label_of(variant::scenario).name, "a");
  EXPECT_EQ(label_of(variant::single_rank).title,
            "single rank, same global batch, no recompute, no graphs");
  EXPECT_EQ(run_ref(variant::eager_without_recompute), "(c)");
  EXPECT_EQ(run_ref(variant::scenario_again), "(a2)");
  EXPECT_EQ(run_ref(variant::router_inputs_changed), "(h)");
  // A combination no table row names: the closest run's name and title, plus
  // the changes it lacks.
  const RunVariant other = variant::single_rank.with(RunChange::again);
  EXPECT_EQ(label_of(other).name, "b+again");
  EXPECT_EQ(label_of(other).title,
            "single rank, same global batch, no recompute, no graphs, again");
  EXPECT_EQ(label_of(variant::single_rank.with(RunChange::reference_backend)).name, "b+reference");
  // Both (f) rows are one name: the second is never a base, so no two
  // variants compose the same name.
  const RunVariant routed = variant::reference_backend.with(RunChange::router_inputs_changed);
  EXPECT_EQ(label_of(routed).name, "f+router-inputs");
  EXPECT_EQ(label_of(routed.with(RunChange::without_dropout)).name, "f+no-dropout+router-inputs");
  std::vector<RunVariant> v = {other,
                               variant::router_inputs_changed,
                               variant::eager,
                               variant::scenario_again,
                               variant::without_dropout,
                               variant::eager_without_recompute,
                               variant::reference_backend,
                               variant::scenario,
                               variant::single_rank,
                               variant::eager_without_recompute_or_dropout};
  std::sort(v.begin(), v.end(), run_precedes);
  std::vector<std::string> names;
  for (RunVariant r : v) names.push_back(label_of(r).name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "a2", "d", "e", "f", "g", "h",
                                             label_of(other).name}));
}

TEST(RunPlan, EachChangeChangesWhatItSays) {
  RunConfig s = default_check_scenario();
  s.dropout = 0.1;
  s.inject = {"throw-rank=1", "sp-residual-mislabel"};
  s.report = "out.json";
  const std::vector<std::string> metrics = {"layer-residual-accumulator-l2"};
  const RunConfig a = run_config(variant::scenario, s, metrics);
  EXPECT_EQ(a.report, "");
  EXPECT_FALSE(a.trace.empty());
  EXPECT_EQ(a.metrics, metrics);
  EXPECT_EQ(a.inject, s.inject);
  const RunConfig d = run_config(variant::eager, s, metrics);
  EXPECT_EQ(d.graphs, GraphMode::none);
  EXPECT_EQ(d.recompute, s.recompute);
  // A reference run keeps the code-path faults only.
  EXPECT_EQ(d.inject, std::vector<std::string>{"sp-residual-mislabel"});
  const RunConfig b = run_config(variant::single_rank, s, metrics);
  EXPECT_EQ(b.world_size(), 1);
  EXPECT_FALSE(b.sp);
  EXPECT_EQ(b.microbatches, s.microbatches * s.dp);
  EXPECT_EQ(b.recompute, "none");
  EXPECT_EQ(b.dropout, 0.0);  // per-rank masks: one rank cannot draw them
  EXPECT_EQ(run_config(variant::reference_backend, s, metrics).backend, kReferenceBackend);
  EXPECT_EQ(run_config(variant::without_dropout, s, metrics).dropout, 0.0);
  s.graphs = GraphMode::full_iteration;
  s.metrics = {"layer-residual-accumulator-l2", "global-wgrad-l2"};
  EXPECT_EQ(run_config(variant::scenario, s, s.metrics).metrics,
            std::vector<std::string>{"global-wgrad-l2"});
  EXPECT_EQ(run_config(variant::eager_without_recompute, s, s.metrics).metrics, s.metrics);
}

// The plan is the scenario's own run and the union of what the properties need,
// each once, in launch order.
TEST(CheckPlan, PlansTheUnionOfTheRunsThePropertiesNeed) {
  RunConfig s = default_check_scenario();
  auto expect_union = [](const RunConfig& scenario) {
    const CheckPlan plan = plan_check(scenario);
    std::vector<RunVariant> want = {variant::scenario};
    for (const Property* p : registered_properties())
      for (RunVariant v : p->runs_needed(scenario))
        if (std::find(want.begin(), want.end(), v) == want.end()) want.push_back(v);
    std::sort(want.begin(), want.end(), run_precedes);
    std::vector<RunVariant> got;
    for (const PlannedRun& r : plan.runs) got.push_back(r.variant);
    EXPECT_TRUE(got == want) << ::testing::PrintToString(run_names(plan));
    return run_names(plan);
  };
  EXPECT_EQ(expect_union(s), (std::vector<std::string>{"a", "b", "c", "a2", "d"}));
  s.graphs = GraphMode::none;  // no graphs: graph_replay's reference is (c)
  EXPECT_EQ(expect_union(s), (std::vector<std::string>{"a", "b", "c", "a2"}));
  s.dropout = 0.1;
  s.backend = "reference-twin";
  EXPECT_EQ(expect_union(s), (std::vector<std::string>{"a", "b", "c", "a2", "e", "f", "g"}));
  EXPECT_EQ(plan_check(s).find(variant::reference_backend_without_dropout)->title,
            "scenario on the reference backend, no dropout");
  s = default_check_scenario();
  s.moe_experts = 4;
  s.padding_fraction = 0.25;
  const CheckPlan moe = plan_check(s);
  EXPECT_EQ(expect_union(s).back(), "h");
  EXPECT_EQ(moe.find(variant::router_inputs_changed)->config.padding_token_shift, 1);
}

// A property whose runs were not made SKIPs, naming the run.
TEST(CheckRuns, APropertyWhoseRunWasNotMadeSkipsNamingIt) {
  const RunConfig s = default_check_scenario();
  CheckRun a;
  a.name = "a";
  CheckRuns runs(s);
  runs.add(variant::scenario, a);
  EXPECT_EQ(runs.find(variant::scenario_again), nullptr);
  EXPECT_THROW(runs.at(variant::scenario_again), std::logic_error);
  const PropertyResult p = evaluate_property(*find_property("determinism"), runs, nullptr);
  EXPECT_EQ(p.status, Status::skip);
  EXPECT_EQ(p.reason, "run (a2) (scenario as given, again (determinism)) was not made");
}

FailureReport one_thrown(ThrownError thrown, std::string error_kind, std::string detail) {
  FailureReport r;
  RankFailure f;
  f.rank = 0;
  f.kind = RankFailureKind::threw;
  f.thrown = thrown;
  f.error_kind = std::move(error_kind);
  f.detail = std::move(detail);
  r.ranks.push_back(f);
  return r;
}

std::optional<ClaimedFailure> first_claim(const FailureReport& failure) {
  for (const Property* p : registered_properties())
    if (std::optional<ClaimedFailure> c = p->claim_failure("b", failure)) return c;
  return std::nullopt;
}

// A run's failure becomes a property's FAIL by the ranks' typed causes: a
// message that merely reads like one is a rank failure like any other.
TEST(ClaimedFailures, AreToldByTypeNeverByText) {
  const std::string aliasing(failure_tag(MetricFailure::prepared_state_aliases_observation));
  std::optional<ClaimedFailure> c =
      first_claim(one_thrown(ThrownError::other, aliasing, "the collector's message"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->label, "aliasing");
  EXPECT_EQ(c->result.name, "graph_replay");
  EXPECT_EQ(c->result.status, Status::fail);
  EXPECT_EQ(c->result.compared, "(b)");
  c = first_claim(one_thrown(ThrownError::collective_mismatch, "", "ranks 0 and 1 differ"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->label, "collective mismatch");
  EXPECT_EQ(c->result.name, "collective_symmetry");
  EXPECT_EQ(c->result.reason, "(b) stopped: ranks 0 and 1 differ");
  EXPECT_FALSE(first_claim(one_thrown(ThrownError::other, "",
                                      "collective mismatch on tp group [0, 1]: " + aliasing))
                   .has_value());
  EXPECT_FALSE(
      first_claim(one_thrown(ThrownError::collective_timeout, "", "timed out")).has_value());
}

// The runtime catches each by type where the rank ends and carries it as a
// field (threads here; processes: the CLI test scenario.aliasing_in_processes).
TEST(ClaimedFailures, TheRuntimeCarriesTheThrownType) {
  register_rank_program("test-throws-aliasing", [](RankContext&) -> nlohmann::json {
    throw MetricFailureError(MetricFailure::prepared_state_aliases_observation, "aliased");
  });
  register_rank_program("test-throws-timeout", [](RankContext&) -> nlohmann::json {
    throw CollectiveTimeout("gloo all_reduce timed out");
  });
  register_rank_program("test-throws-mismatch", [](RankContext&) -> nlohmann::json {
    throw CollectiveMismatch("the calls differ");
  });
  register_rank_program("test-throws-lookalike", [](RankContext&) -> nlohmann::json {
    throw std::runtime_error("collective mismatch on world group [0]");
  });
  RunConfig c;
  c.timeout = 20;
  auto thrown_by = [&](const char* program) {
    const LaunchResult r = launch(c, program);
    EXPECT_FALSE(r.ok());
    if (r.ok() || r.failure->ranks.empty()) return RankFailure{};
    EXPECT_EQ(r.failure->ranks.front().kind, RankFailureKind::threw);
    return r.failure->ranks.front();
  };
  const RankFailure aliasing = thrown_by("test-throws-aliasing");
  EXPECT_EQ(aliasing.error_kind, failure_tag(MetricFailure::prepared_state_aliases_observation));
  EXPECT_EQ(aliasing.thrown, ThrownError::other);
  EXPECT_EQ(thrown_by("test-throws-timeout").thrown, ThrownError::collective_timeout);
  EXPECT_EQ(thrown_by("test-throws-mismatch").thrown, ThrownError::collective_mismatch);
  const RankFailure lookalike = thrown_by("test-throws-lookalike");
  EXPECT_EQ(lookalike.thrown, ThrownError::other);
  EXPECT_EQ(lookalike.error_kind, "");
}

}  // namespace
}  // namespace parity::checks
