#include "harness/checks/check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <ostream>

#include "harness/base/files.h"
#include "harness/base/status_line.h"
#include "harness/checks/properties.h"
#include "harness/checks/report.h"
#include "harness/checks/scenario.h"
#include "harness/driver/training_step.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/metric_names.h"

namespace parity::checks {

namespace {

// The oracle every other backend is compared with (backend_parity).
const char* const kReferenceBackend = "reference";

std::vector<std::string> code_path_faults(const std::vector<std::string>& inject, int world) {
  std::vector<std::string> out;
  for (const std::string& spec : inject) {
    std::string why;
    const std::optional<FaultSpec> f = parse_fault_spec(spec, world, &why);
    if (f && !f->rank) out.push_back(spec);
  }
  return out;
}

std::string describe(const RunConfig& c) {
  std::string s = "tp " + std::to_string(c.tp) + " x cp " + std::to_string(c.cp) + " x dp " +
                  std::to_string(c.dp) + (c.sp ? " (sp)" : "") + ", " + std::to_string(c.layers) +
                  " layer(s), " + std::string(to_string(c.dtype)) +
                  (c.fp32_residual ? " (fp32 residual stream)" : "") + ", recompute " + c.recompute;
  if (c.recompute == "full-uniform" || c.recompute == "full-block")
    s += " (" + std::to_string(c.recompute_layers) + ")";
  s += ", graphs " + std::string(to_string(c.graphs));
  if (c.graphs != GraphOption::none)
    s += " (warmup " + std::to_string(c.graph_warmup) +
         (c.graph_scope.empty() ? "" : ", scope " + c.graph_scope) + ")";
  s += ", " + std::to_string(c.metrics.size()) + " metric(s), " + std::to_string(c.steps) +
       " step(s), " + std::to_string(c.microbatches) + " microbatch(es) per DP rank, launch " +
       std::string(to_string(c.launch));
  return s;
}

// Where a check is, for its progress line (under the line's lock; the steps
// also from the watcher).
struct CheckStage {
  std::size_t run = 0, runs = 0;  // run: 1-based, 0 before the first
  std::string name;
  std::int64_t steps = 0;
  std::atomic<std::int64_t> steps_done{0};
  bool properties = false;

  // "check: run (c) 3/5, 1/2 steps, elapsed 0:07";
  // "check: 5/5 runs done, evaluating the properties, elapsed 0:09".
  std::string text(double elapsed) const {
    const std::string of = "/" + std::to_string(runs);
    std::string at = "planning the runs";
    if (properties)
      at = std::to_string(runs) + of + " runs done, evaluating the properties";
    else if (run > 0)
      at = "run (" + name + ") " + std::to_string(run) + of + ", " +
           std::to_string(steps_done.load()) + "/" + std::to_string(steps) + " steps";
    return "check: " + at + ", elapsed " + clock_text(elapsed);
  }
};

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

// What run (a) can collect under full-iteration graphs: no forward metric
// (replays observe nothing), the optimizer's norms (computed outside the graph).
std::vector<std::string> parameter_metrics_of(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (is_parameter_metric(n)) out.push_back(n);
  return out;
}

}  // namespace

std::vector<ConfigViolation> validate_check_scenario(const RunConfig& scenario) {
  RunConfig validated = scenario;
  if (scenario.graphs == GraphOption::full_iteration)
    validated.metrics = parameter_metrics_of(scenario.metrics);
  std::vector<ConfigViolation> out = validate_run_config(validated);
  if (validated.metrics.size() < scenario.metrics.size()) {
    RunConfig names_only = scenario;
    names_only.graphs = GraphOption::none;
    names_only.graph_scope.clear();
    for (ConfigViolation& v : validate_run_config(names_only))
      if (v.field == "metrics") out.push_back(std::move(v));
  }
  return out;
}

CheckPlan plan_check(const RunConfig& scenario) {
  CheckPlan p;
  std::vector<std::string> metrics = scenario.metrics;
  if (metrics.empty()) {
    metrics = default_check_metrics();
    p.notes.push_back("the scenario names no metric: every residual and logit metric is checked");
  }
  const std::vector<std::string> code_faults = code_path_faults(scenario.inject, scenario.world_size());
  p.a = scenario;
  p.a.report.clear();
  p.a.trace = "(parity check)";  // any non-empty value: the rank program records a trace
  p.a.metrics = metrics;
  if (scenario.graphs == GraphOption::full_iteration) {
    p.a.metrics = parameter_metrics_of(metrics);
    p.notes.push_back(
        "(a) runs without forward metrics: they are rejected under full-iteration graphs "
        "(contract.md section 3); its traces show the silence after the capture");
  }
  p.c = p.a;
  p.c.recompute = "none";
  p.c.graphs = GraphOption::none;
  p.c.graph_scope.clear();  // a scope needs per-layer graphs
  p.c.metrics = metrics;
  p.c.inject = code_faults;
  if (scenario.graphs != GraphOption::none && scenario.recompute != "none") {
    p.d = p.c;
    p.d->recompute = scenario.recompute;
    p.d->inject = code_faults;
  }
  p.b = p.c;
  p.b.microbatches = scenario.microbatches * scenario.dp;
  p.b.tp = p.b.cp = p.b.dp = p.b.ep = 1;
  p.b.clear_pipeline();
  p.b.sp = false;
  if (scenario.dropout > 0 && scenario.world_size() > 1) {
    p.b.dropout = 0;
    p.e = p.c;
    p.e->dropout = 0;
    p.notes.push_back(
        "dropout on " + std::to_string(scenario.world_size()) +
        " ranks draws its masks from per-rank RNG streams (as Megatron's tracker does): "
        "sharded_reduction compares (e), the sharding without dropout, with (b) without dropout");
  }
  if (scenario.backend != kReferenceBackend) {
    p.f = p.a;
    p.f->backend = kReferenceBackend;
    if (scenario.dropout > 0) {
      p.f->dropout = 0;
      p.g = p.a;
      p.g->dropout = 0;
      p.notes.push_back("dropout masks come from different generators on " + scenario.backend +
                        " and " + kReferenceBackend +
                        ": backend_parity compares (g), the scenario without dropout, with (f), "
                        "the same on the reference");
    }
  }
  if (scenario.moe_experts >= 2 &&
      (scenario.moe_force_routing != ForceRoutingOption::none || scenario.padding_fraction > 0)) {
    p.h = p.a;
    p.h->moe_force_routing = ForceRoutingOption::none;
    if (scenario.padding_fraction > 0) p.h->padding_token_shift = 1;
  }
  return p;
}

std::string check_header(const RunConfig& scenario, const CheckPlan& plan,
                         const std::string& source) {
  // (a) may run without metrics (full-iteration graphs) and (c) without the
  // scenario's recompute and graphs: describe the scenario, count what is compared.
  RunConfig shown = scenario;
  shown.metrics = plan.c.metrics;
  return "parity check (" + source + "): " + describe(shown);
}

std::string_view to_string(CheckVerdict verdict) {
  switch (verdict) {
    case CheckVerdict::passed:
      return "passed";
    case CheckVerdict::property_failed:
      return "property failed";
    case CheckVerdict::bad_report:
      return "bad report";
    case CheckVerdict::rank_failure:
      return "rank failure";
  }
  return "?";
}

int exit_code(CheckVerdict verdict) {
  switch (verdict) {
    case CheckVerdict::passed:
      return 0;
    case CheckVerdict::property_failed:
      return 1;
    case CheckVerdict::bad_report:
      return 2;
    case CheckVerdict::rank_failure:
      return 3;
  }
  return 3;
}

std::string kind_name(const RankFailureCause& cause) {
  switch (cause.stage) {
    case RankFailureCause::Stage::launch:
      return "could_not_launch";
    case RankFailureCause::Stage::results:
      return "bad_results";
    case RankFailureCause::Stage::ranks:
      break;
  }
  return cause.culprit ? std::string(to_string(cause.culprit->kind)) : "unknown";
}

const PropertyResult* CheckOutcome::property(const std::string& name) const {
  for (const PropertyResult& p : report.properties)
    if (p.name == name) return &p;
  return nullptr;
}

CheckOutcome execute_check(const RunConfig& scenario, const std::string& source,
                           const LaunchOptions& options, std::ostream* progress, bool terminal) {
  const auto start = std::chrono::steady_clock::now();
  register_model_program();
  const CheckPlan plan = plan_check(scenario);
  CheckOutcome outcome;
  CheckReport& report = outcome.report;
  report.scenario_source = source;
  report.scenario = scenario;
  report.notes = plan.notes;
  CheckStage stage;
  std::optional<StatusLine> line;
  if (progress)
    line.emplace(*progress, terminal, [&stage](double elapsed) { return stage.text(elapsed); });
  auto say = [&](const std::string& text) {
    if (line) line->update([&](std::ostream& out) { out << text << "\n"; });
  };
  say(check_header(scenario, plan, source));
  for (const std::string& n : plan.notes) say("  note: " + n);
  auto finish = [&](CheckVerdict verdict) {
    outcome.verdict = verdict;
    report.exit_code = exit_code(verdict);
    report.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return outcome;
  };

  struct Planned {
    std::string name, title;
    RunConfig config;
  };
  std::vector<Planned> planned = {
      {"a", "scenario as given", plan.a},
      {"b", "single rank, same global batch, no recompute, no graphs", plan.b},
      {"c", "scenario's sharding, no recompute, no graphs", plan.c},
      {"a2", "scenario as given, again (determinism)", plan.a},
  };
  if (plan.d) planned.push_back({"d", "scenario's sharding and recompute, no graphs", *plan.d});
  if (plan.e) planned.push_back({"e", "scenario's sharding, no recompute, no graphs, no dropout", *plan.e});
  if (plan.f)
    planned.push_back({"f",
                       plan.g ? "scenario on the reference backend, no dropout"
                              : "scenario on the reference backend",
                       *plan.f});
  if (plan.g) planned.push_back({"g", "scenario as given, no dropout", *plan.g});
  if (plan.h)
    planned.push_back({"h", "scenario without forced routing, padding tokens changed", *plan.h});
  std::vector<CheckRun> runs;
  std::string alias_failure, alias_run;
  // A rank stopped by a collective fingerprint mismatch (--check-collectives):
  // the claim collective_symmetry makes, broken live; its FAIL, not a crash.
  std::string mismatch_failure, mismatch_run;
  stage.runs = planned.size();
  for (const Planned& p : planned) {
    LaunchOptions run_options = options;
    if (line && line->terminal()) {
      line->update([&](std::ostream&) {
        ++stage.run;
        stage.name = p.name;
        stage.steps = p.config.steps;
        stage.steps_done = 0;
      });
      run_options.watcher = [&](const std::vector<RankStatus>& ranks) {
        std::int64_t done = ranks.empty() ? 0 : ranks.front().steps_done();
        for (const RankStatus& r : ranks) done = std::min(done, r.steps_done());
        if (done != stage.steps_done.exchange(done)) line->update();
      };
    }
    LaunchResult result;
    try {
      result = launch(p.config, kModelProgram, run_options);
    } catch (const std::exception& e) {
      outcome.failure =
          "parity check: run (" + p.name + ") could not launch: " + one_line(e.what()) + "\n";
      outcome.cause = RankFailureCause{
          RankFailureCause::Stage::launch, p.name, p.title, {}, "", one_line(e.what())};
      return finish(CheckVerdict::rank_failure);
    }
    report.runs.emplace_back(p.name, p.config);
    report.run_titles.emplace_back(p.name, p.title);
    report.run_seconds.push_back(result.wall_seconds);
    if (!result.ok()) {
      // The collector's storage rule (a graph's static buffer must not be kept),
      // in whichever run collects metrics first: graph_replay's FAIL, not a crash.
      bool aliasing = false;
      for (const RankFailure& f : result.failure->ranks)
        aliasing = aliasing ||
                   metric_failure_in(f.detail) == MetricFailure::prepared_state_aliases_observation;
      for (const RankFailure& f : result.failure->ranks)
        if (mismatch_failure.empty() &&
            f.detail.find("collective mismatch on ") != std::string::npos)
          mismatch_failure = one_line(f.detail, 300);
      if (!aliasing && !mismatch_failure.empty()) {
        mismatch_run = p.name;
        say("run (" + p.name + ") " + p.title + ": FAILED (collective mismatch)");
        break;
      }
      if (aliasing) {
        alias_failure = "prepared metric state aliases an observed tensor: " +
                        one_line(result.failure->text(), 300);
        alias_run = p.name;
        say("run (" + p.name + ") " + p.title + ": FAILED (aliasing)");
        break;
      }
      outcome.failure = "parity check: run (" + p.name + ") " + p.title + " failed:\n";
      for (const std::string& line : result.failure->lines()) outcome.failure += line + "\n";
      RankFailureCause cause{RankFailureCause::Stage::ranks, p.name, p.title, {},
                             result.failure->headline(),     ""};
      if (!result.failure->ranks.empty()) {
        cause.culprit = result.failure->ranks.front();
        cause.line = format_rank_failure(*cause.culprit);
      } else {
        cause.line = cause.headline;
      }
      outcome.cause = std::move(cause);
      outcome.must_exit_now = result.failure->abandoned_threads;
      return finish(CheckVerdict::rank_failure);
    }
    try {
      runs.push_back(check_run_from(p.name, p.title, p.config, result.results));
    } catch (const std::exception& e) {
      outcome.failure = "parity check: " + std::string(e.what()) + "\n";
      outcome.cause = RankFailureCause{
          RankFailureCause::Stage::results, p.name, p.title, {}, "", one_line(e.what())};
      return finish(CheckVerdict::rank_failure);
    }
    say("run (" + p.name + ") " + p.title + ": " + std::to_string(p.config.world_size()) +
        " rank(s), " + secs(result.wall_seconds) + " s");
  }
  if (line) line->update([&](std::ostream&) { stage.properties = true; });

  if (!mismatch_run.empty()) {
    report.properties.push_back(
        collective_symmetry_mismatch_failure(mismatch_run, mismatch_failure));
  } else if (!alias_failure.empty()) {
    report.properties.push_back(graph_replay_alias_failure(alias_run, alias_failure));
  } else {
    auto run_named = [&](const char* name) -> const CheckRun* {
      for (const CheckRun& r : runs)
        if (r.name == name) return &r;
      return nullptr;
    };
    CheckRuns view;
    view.a = &runs[0];
    view.b = &runs[1];
    view.c = &runs[2];
    view.a2 = &runs[3];
    view.d = run_named("d");
    view.e = run_named("e");
    view.f = run_named("f");
    view.g = run_named("g");
    view.h = run_named("h");
    for (const CheckRun& r : runs) view.all.push_back(&r);
    for (const Property* property : registered_properties())
      report.properties.push_back(property->evaluate(view, &report.metrics));
  }
  bool failed = false;
  for (const PropertyResult& p : report.properties) failed = failed || p.status == Status::fail;
  return finish(failed ? CheckVerdict::property_failed : CheckVerdict::passed);
}

ExpectationCheck compare_expectations(const std::vector<PropertyResult>& properties,
                                      const std::map<std::string, std::string>& expect) {
  ExpectationCheck out;
  for (const PropertyResult& p : properties) {
    const std::string actual(to_string(p.status));
    const auto it = expect.find(p.name);
    if (it == expect.end()) {
      if (p.status == Status::fail) out.ok = false;
      continue;
    }
    const bool met = it->second == actual;
    out.ok = out.ok && met;
    std::string line =
        "expect " + p.name + " " + it->second + (met ? ": met" : ": not met: it is " + actual);
    // A SKIP compared nothing: say why and how to make it compare.
    if (!met && p.status == Status::skip && !(p.reason.empty() && p.hint.empty())) {
      std::string why = p.reason;
      if (!p.hint.empty())
        why += (why.empty() ? "" : "; ") + std::string("to make it compare: ") + p.hint;
      line += " (" + why + ")";
    }
    out.lines.push_back(line);
  }
  // An expectation naming a property that was not evaluated (graph_replay
  // alone after an aliasing failure) is not met.
  for (const auto& [name, status] : expect) {
    bool seen = false;
    for (const PropertyResult& p : properties) seen = seen || p.name == name;
    if (!seen) {
      out.ok = false;
      out.lines.push_back("expect " + name + " " + status + ": not met: it was not evaluated");
    }
  }
  return out;
}

CheckVerdict run_check(const RunConfig& scenario, const std::string& source, std::ostream& out,
                       std::ostream& err, const LaunchOptions& options, bool* must_exit_now,
                       const std::map<std::string, std::string>& expect,
                       const BaselineInput* baseline, bool terminal) {
  CheckOutcome outcome = execute_check(scenario, source, options, &out, terminal);
  if (outcome.verdict == CheckVerdict::rank_failure) {
    err << outcome.failure;
    if (outcome.must_exit_now && must_exit_now) *must_exit_now = true;
    return outcome.verdict;
  }
  CheckReport& report = outcome.report;
  int passed = 0, failed = 0, skipped = 0;
  for (const PropertyResult& p : report.properties) {
    if (p.status == Status::fail) ++failed;
    else if (p.status == Status::pass) ++passed;
    else ++skipped;
  }
  CheckVerdict verdict = outcome.verdict;
  out << "\n" << format_property_table(report.properties) << "\n"
      << format_metric_table(report.metrics);
  ExpectationCheck expectations;
  if (!expect.empty()) {
    expectations = compare_expectations(report.properties, expect);
    verdict = expectations.ok ? CheckVerdict::passed : CheckVerdict::property_failed;
    out << "\n";
    for (const std::string& line : expectations.lines) out << line << "\n";
  }
  report.exit_code = exit_code(verdict);
  report.expect = expect;
  report.expectation_lines = expectations.lines;
  if (baseline) {
    report.baseline_path = baseline->path;
    report.baseline_differences =
        compare_with_baseline(baseline->report, nlohmann::json(report_json(report)));
    const std::size_t n = report.baseline_differences.size();
    // What was compared, so that "0 differences" is not a vacuous pass.
    out << "\nbaseline " << baseline->path << ": " << n << " difference" << (n == 1 ? "" : "s")
        << " (" << baseline->report.value("properties", nlohmann::json::array()).size()
        << " properties, " << baseline->report.value("metrics", nlohmann::json::array()).size()
        << " metric values compared)\n";
    for (const BaselineDifference& d : report.baseline_differences)
      out << "  " << format_difference(d) << "\n";
    if (n > 0) verdict = CheckVerdict::property_failed;
    report.exit_code = exit_code(verdict);
  }
  if (!scenario.report.empty()) {
    try {
      files::write_atomically(scenario.report, report_json(report).dump(2) + "\n");
    } catch (const std::exception& e) {
      err << "parity check: --report " << scenario.report << ": " << e.what() << "\n";
      if (verdict == CheckVerdict::passed) verdict = CheckVerdict::bad_report;
    }
  }
  // One verdict: a report that could not be written fails the check, and says so here.
  out << "\ncheck " << (verdict == CheckVerdict::passed ? "passed" : "FAILED") << ": "
      << (verdict == CheckVerdict::bad_report ? "--report could not be written; " : "") << passed
      << " pass, " << failed << " fail, " << skipped << " skip";
  if (!expect.empty())
    out << "; expectations " << (expectations.ok ? "met" : "NOT met");
  out << "; " << secs(report.wall_seconds) << " s" << std::endl;
  for (const PropertyResult& p : report.properties) {
    const auto it = expect.find(p.name);
    const bool expected_fail = it != expect.end() && it->second == "FAIL";
    if (p.status == Status::fail && !expected_fail)
      err << "parity check: " << p.name << " FAILED: " << p.reason << "\n";
  }
  for (const std::string& line : expectations.lines)
    if (line.find(": not met") != std::string::npos) err << "parity check: " << line << "\n";
  if (baseline && !report.baseline_differences.empty())
    err << "parity check: baseline " << baseline->path << ": " << report.baseline_differences.size()
        << " difference(s), the first: " << format_difference(report.baseline_differences.front())
        << "\n";
  return verdict;
}

}  // namespace parity::checks
