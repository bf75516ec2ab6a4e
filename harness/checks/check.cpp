#include "harness/checks/check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/base/files.h"
#include "harness/base/status_line.h"
#include "harness/checks/property.h"
#include "harness/checks/report.h"
#include "harness/checks/scenario.h"
#include "harness/checks/tolerance.h"
#include "harness/driver/training_step.h"

namespace parity::checks {

namespace {

std::string describe(const RunConfig& c) {
  std::string s = "tp " + std::to_string(c.tp) + " x cp " + std::to_string(c.cp) + " x dp " +
                  std::to_string(c.dp) + (c.pp > 1 ? " x pp " + std::to_string(c.pp) : "") +
                  (c.sp ? " (sp)" : "") +
                  (c.vpp > 1 ? ", " + std::to_string(c.vpp) + " chunks per stage" : "") + ", " +
                  std::to_string(c.layers) + " layer(s), " + std::string(to_string(c.dtype)) +
                  (c.fp32_residual ? " (fp32 residual stream)" : "") + ", recompute " + c.recompute;
  if (c.recompute == "full-uniform" || c.recompute == "full-block")
    s += " (" + std::to_string(c.recompute_layers) + ")";
  s += ", graphs " + std::string(to_string(c.graphs));
  if (c.graphs != GraphMode::none)
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

}  // namespace

std::vector<ConfigViolation> validate_check_scenario(const RunConfig& scenario) {
  RunConfig validated = scenario;
  if (scenario.graphs == GraphMode::full_iteration)
    validated.metrics = parameter_metrics_of(scenario.metrics);
  std::vector<ConfigViolation> out = validate_run_config(validated);
  if (validated.metrics.size() < scenario.metrics.size()) {
    RunConfig names_only = scenario;
    names_only.graphs = GraphMode::none;
    names_only.graph_scope.clear();
    for (ConfigViolation& v : validate_run_config(names_only))
      if (v.field == "metrics") out.push_back(std::move(v));
  }
  return out;
}

const PlannedRun* CheckPlan::find(RunVariant v) const {
  for (const PlannedRun& r : runs)
    if (r.variant == v) return &r;
  return nullptr;
}

CheckPlan plan_check(const RunConfig& scenario) {
  CheckPlan p;
  p.metrics = scenario.metrics;
  if (p.metrics.empty()) {
    p.metrics = default_check_metrics();
    p.notes.push_back("the scenario names no metric: every residual and logit metric is checked");
  }
  if (scenario.graphs == GraphMode::full_iteration)
    p.notes.push_back(
        run_ref(variant::scenario) +
        " runs without forward metrics: they are rejected under full-iteration graphs "
        "(contract.md section 3); its traces show the silence after the capture");
  if (scenario.optimizer == OptimizerKind::adam &&
      computation_precision(scenario) != ModelDType::fp64)
    p.notes.push_back(
        "Adam divides each update by the gradient's running magnitude, so a gradient that is zero "
        "up to rounding (the key bias's, with learned positions) moves its parameter by up to lr "
        "in one run and not in another: runs of different layouts may differ by more than the " +
        std::string(to_string(computation_precision(scenario))) +
        " tolerances (--dtype fp64 keeps that rounding below them)");
  std::vector<RunVariant> wanted = {variant::scenario};
  for (const Property* property : registered_properties()) {
    for (RunVariant v : property->runs_needed(scenario))
      if (std::find(wanted.begin(), wanted.end(), v) == wanted.end()) wanted.push_back(v);
    const std::string note = property->plan_note(scenario);
    if (!note.empty() && std::find(p.notes.begin(), p.notes.end(), note) == p.notes.end())
      p.notes.push_back(note);
  }
  std::stable_sort(wanted.begin(), wanted.end(), run_precedes);
  for (RunVariant v : wanted) {
    RunLabel label = label_of(v);
    for (const PlannedRun& r : p.runs)
      PARITY_CHECK_INTERNAL(r.name != label.name, "parity check: two runs named (" + label.name +
                                                      "): " + r.title + "; " + label.title);
    p.runs.push_back(
        {v, std::move(label.name), std::move(label.title), run_config(v, scenario, p.metrics)});
  }
  return p;
}

std::string check_header(const RunConfig& scenario, const CheckPlan& plan,
                         const std::string& source) {
  // The scenario's own run may go without metrics (full-iteration graphs) and
  // the references without its recompute and graphs: describe the scenario as
  // given, count what is compared.
  RunConfig shown = scenario;
  shown.metrics = plan.metrics;
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

  std::vector<CheckRun> runs;
  // A run's failure that a property claims (prepared state aliasing an observed
  // tensor: graph_replay's; a collective fingerprint mismatch under
  // --check-collectives: collective_symmetry's) is its FAIL, not a crash.
  std::optional<ClaimedFailure> claimed;
  stage.runs = plan.runs.size();
  for (const PlannedRun& p : plan.runs) {
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
    // A resumed run is two launches (run_plan.h resumed_launches): the
    // saving one, then the one resuming from its checkpoint.
    std::vector<RunConfig> launches = {p.config};
    std::optional<files::TempDir> checkpoint_dir;
    if (p.variant.has(RunChange::resumed)) {
      checkpoint_dir.emplace("parity-check-resume");
      const ResumedLaunches l = resumed_launches(p.config, checkpoint_dir->path() + "/checkpoint");
      launches = {l.saving, l.resuming};
    }
    std::optional<CheckRun> made;
    double seconds = 0;
    for (std::size_t i = 0; i < launches.size() && !claimed; ++i) {
      const std::string what = launches.size() == 1 ? ""
                               : i == 0 ? " saving at step " + std::to_string(p.config.resume_at)
                                        : " resuming at step " + std::to_string(p.config.resume_at);
      LaunchResult result;
      try {
        result = launch(launches[i], kModelProgram, run_options);
      } catch (const std::exception& e) {
        outcome.failure = "parity check: run (" + p.name + ")" + what +
                          " could not launch: " + one_line(e.what()) + "\n";
        outcome.cause = RankFailureCause{
            RankFailureCause::Stage::launch, p.name, p.title, {}, "", one_line(e.what())};
        return finish(CheckVerdict::rank_failure);
      }
      seconds += result.wall_seconds;
      if (!result.ok()) {
        report.runs.emplace_back(p.name, p.config);
        report.run_titles.emplace_back(p.name, p.title);
        report.run_seconds.push_back(seconds);
        for (const Property* property : registered_properties())
          if ((claimed = property->claim_failure(p.name, *result.failure))) break;
        if (claimed) {
          say("run (" + p.name + ") " + p.title + ": FAILED (" + claimed->label + ")");
          break;
        }
        outcome.failure = "parity check: run (" + p.name + ") " + p.title + what + " failed:\n";
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
        CheckRun run = check_run_from(p.name, p.title, launches[i], result.results);
        if (made) run.saved_by = std::make_shared<const CheckRun>(std::move(*made));
        made = std::move(run);
      } catch (const std::exception& e) {
        outcome.failure = "parity check: " + std::string(e.what()) + "\n";
        outcome.cause = RankFailureCause{
            RankFailureCause::Stage::results, p.name, p.title, {}, "", one_line(e.what())};
        return finish(CheckVerdict::rank_failure);
      }
    }
    if (claimed) break;
    report.runs.emplace_back(p.name, p.config);
    report.run_titles.emplace_back(p.name, p.title);
    report.run_seconds.push_back(seconds);
    runs.push_back(std::move(*made));
    say("run (" + p.name + ") " + p.title + ": " + std::to_string(p.config.world_size()) +
        " rank(s)" +
        (launches.size() > 1 ? ", then " + std::to_string(launches.back().world_size()) +
                                   " from step " + std::to_string(p.config.resume_at)
                             : std::string()) +
        ", " + secs(seconds) + " s");
  }
  if (line) line->update([&](std::ostream&) { stage.properties = true; });

  if (claimed) {
    report.properties.push_back(std::move(claimed->result));
  } else {
    CheckRuns view(scenario);
    for (std::size_t i = 0; i < runs.size(); ++i) view.add(plan.runs[i].variant, runs[i]);
    for (const Property* property : registered_properties())
      report.properties.push_back(evaluate_property(*property, view, &report.metrics));
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
    if (p.status == Status::fail)
      ++failed;
    else if (p.status == Status::pass)
      ++passed;
    else
      ++skipped;
  }
  CheckVerdict verdict = outcome.verdict;
  out << "\n"
      << format_property_table(report.properties) << "\n"
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
  if (!expect.empty()) out << "; expectations " << (expectations.ok ? "met" : "NOT met");
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
