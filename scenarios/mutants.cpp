#include "scenarios/mutants.h"
#include "harness/base/files.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <ostream>
#include <unordered_map>

#include <rapidcheck.h>

#include "harness/checks/check.h"
#include "harness/faults/code_path_faults.h"
#include "scenarios/fault_shapes.h"
#include "scenarios/generators.h"
#include "scenarios/quiet_listener.h"
#include "scenarios/sharded_metric_cases.h"

PARITY_USES_FAULT(mean_of_means);
PARITY_USES_FAULT(median_unpadded_gather);

namespace parity::scenarios {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Row {
  std::string fault, expected;  // expected: the table's caught_by
  bool caught = false;
  std::vector<std::string> by;  // properties FAILED on the shrunk scenario
  std::string reason;
  std::string searched = "scenarios";  // or "sharded metric cases"
  nlohmann::json shrunk;               // the counterexample's non-default fields
  int cases = 0, rank_failures = 0;
  int cases_to_catch = 0;  // the check that first FAILed; shrinking tried the rest
  double seconds_to_catch = 0, seconds = 0;
};

// What one generated case showed: the properties it FAILed (empty: none) and
// why; a rank failure is not a property's catch.
struct Verdict {
  std::vector<std::string> by;
  std::string reason;
  bool rank_failure = false;
};

// One rapidcheck search over `gen` with the fault injected, until `judge`
// reports a FAIL; shrinking is bounded by o.shrink_steps candidates (a count,
// not a time: the shrunk case is the same on every run). Adds to `row`.
template <typename Case>
void search(Row& row, const MutantsOptions& o, const rc::Gen<Case>& gen,
            const std::function<Verdict(Case&)>& judge,
            const std::function<nlohmann::json(const Case&)>& compact_of) {
  const auto start = Clock::now();
  QuietListener quiet;
  bool failed_once = false;
  int shrink_steps = 0;  // candidates tried since the first failure
  rc::detail::TestParams params;
  params.seed = o.seed;
  params.maxSuccess = o.cases;
  rc::detail::TestMetadata metadata;
  metadata.id = "mutants/" + row.fault + "/" + row.searched;
  metadata.description = row.fault;
  auto property = [&] {
    Case c = *gen;
    // Shrinking is bounded: past the budget a candidate counts as not
    // failing, so the last failing one stays the counterexample.
    if (failed_once && ++shrink_steps > o.shrink_steps) return;
    ++row.cases;
    const Verdict v = judge(c);
    if (v.rank_failure) ++row.rank_failures;
    if (v.by.empty()) return;
    if (!failed_once) {
      failed_once = true;
      row.seconds_to_catch = row.seconds + since(start);
      row.cases_to_catch = row.cases;
    }
    row.by = v.by;
    row.reason = v.reason;
    row.shrunk = compact_of(c);
    RC_FAIL(v.reason);
  };
  // The overload with a reproduce map: the others load rapidcheck's global
  // configuration, which prints a seed of its own ("Using configuration:
  // seed=...") beside o.seed, and lets RC_PARAMS's reproduce= replace the search.
  const std::unordered_map<std::string, rc::detail::Reproduce> no_reproduce;
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(property), metadata, params,
                                                quiet, no_reproduce);
  row.caught = result.template is<rc::detail::FailureResult>();
  row.seconds += since(start);
}

Verdict judge_scenario(RunConfig& scenario, const std::string& fault) {
  scenario.inject = {fault};
  // A fault that breaks collective symmetry may send mismatched shapes, which
  // Gloo cannot survive: the fingerprints stop it first (collective_symmetry's
  // FAIL, parity check's mapping of a collective mismatch).
  if (info(*parse_code_path_fault(fault)).caught_by == "collective_symmetry")
    scenario.check_collectives = true;
  // Faults on a path random scenarios seldom take: shaped so they can show
  // (fault_shapes.h); a case that cannot show the fault is not checked.
  if (!shape_for_fault(scenario, *parse_code_path_fault(fault))) return {};
  const checks::CheckOutcome outcome = checks::execute_check(scenario, "mutants");
  Verdict v;
  if (outcome.verdict == checks::CheckVerdict::rank_failure) {
    v.rank_failure = true;
    // A fault of collective symmetry is also caught when the ranks it leaves
    // waiting are reported by the hang detector or time out in the collective
    // (exit 3, never a hang): told by the failure's typed cause, not its text.
    const std::optional<RankFailure>& culprit =
        outcome.cause ? outcome.cause->culprit : std::optional<RankFailure>{};
    const bool waited_out = culprit && (culprit->kind == RankFailureKind::hung ||
                                        culprit->thrown == ThrownError::collective_timeout);
    if (info(*parse_code_path_fault(fault)).caught_by == "collective_symmetry" && waited_out) {
      v.by = {"hang detector"};
      v.reason = "hang detector: " + outcome.failure;
    }
    return v;
  }
  for (const checks::PropertyResult& p : outcome.report.properties)
    if (p.status == checks::Status::fail) {
      v.by.push_back(p.name);
      if (v.reason.empty()) v.reason = p.name + ": " + p.reason;
    }
  return v;
}

bool has_empty_piece(const ShardedMetricCase& c) {
  for (Axis axis : kModelAxes)
    for (std::int64_t n : c.axis(axis).split)
      if (n == 0) return true;
  return false;
}

Verdict judge_sharded_case(ShardedMetricCase& c, const std::string& fault) {
  c.inject = {fault};
  Verdict v;
  // median-unpadded-gather: a rank with nothing to gather issues no call (the
  // executor completes an empty request locally), so its peers would wait out
  // the case's 60 s timeout; uneven non-empty pieces show the mismatch at once.
  if (fault == info(fault_median_unpadded_gather).name) {
    if (has_empty_piece(c)) return v;
    c.statistics = {"sampled-median"};
  }
  const ShardedMetricOutcome o = check_sharded_metric_case(c);
  v.rank_failure = !o.rank_failure.empty();
  if (!o.mismatches.empty()) {
    v.by = {"sharded_reduction"};
    v.reason = "sharded_reduction: " + o.mismatches.front();
  }
  // The cases run with check_collectives on: the communicators compare every
  // call's fingerprint across the group, collective_symmetry live.
  if (o.collective_mismatch) {
    v.by.push_back("collective_symmetry");
    if (v.reason.empty()) v.reason = "collective_symmetry: " + o.rank_failure;
  }
  return v;
}

nlohmann::json compact(const RunConfig& c) {
  nlohmann::json j = differing_fields(c);
  j.erase("inject");
  return j;
}

// Generated scenarios (MoE scenarios for a fault that lives in the MoE layer,
// pipelined ones for a fault of the pipeline: the table's `needs` says so), then, for a fault of a
// metric's reduction or collectives, sharded metric cases with uneven and empty shards. The two
// faults the model's even layouts never (mean-of-means) or seldom
// (median-unpadded-gather: padding under cp > 1) expose are hunted over the
// cases first: 25 scenario checks in vain took about 30 s of each CI run.
Row hunt(const CodePathFaultInfo& fault, const MutantsOptions& o) {
  Row row;
  row.fault = std::string(fault.name);
  row.expected = std::string(fault.caught_by);
  const bool moe = fault.needs.rfind("an MoE layer", 0) == 0;
  const bool pipeline = fault.needs.rfind("pipeline stages", 0) == 0;
  const bool metric_fault =
      fault.caught_by == "sharded_reduction" || fault.caught_by == "collective_symmetry";
  const bool cases_first =
      fault.fault == fault_mean_of_means || fault.fault == fault_median_unpadded_gather;
  auto search_scenarios = [&] {
    row.searched = moe ? "MoE scenarios" : pipeline ? "pipeline scenarios" : "scenarios";
    search<RunConfig>(
        row, o,
        moe        ? gen_moe_scenario()
        : pipeline ? gen_pipeline_scenario()
                   : gen_scenario(),
        [&](RunConfig& c) { return judge_scenario(c, row.fault); }, compact);
  };
  auto search_cases = [&] {
    row.searched = "sharded metric cases";
    search<ShardedMetricCase>(
        row, o, gen_sharded_metric_case(),
        [&](ShardedMetricCase& c) { return judge_sharded_case(c, row.fault); },
        [](const ShardedMetricCase& c) {
          nlohmann::json j = to_json(c);
          j.erase("inject");
          j.erase("statistics");
          return j;
        });
  };
  if (cases_first) search_cases();
  if (!row.caught) search_scenarios();
  if (!row.caught && metric_fault && !cases_first) search_cases();
  return row;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

MutantsOutcome run_mutants(const MutantsOptions& o, std::ostream& out, std::ostream& err) {
  std::vector<const CodePathFaultInfo*> faults;
  for (const CodePathFaultInfo& f : code_path_faults()) {
    bool wanted = o.faults.empty();
    for (const std::string& name : o.faults) wanted = wanted || name == f.name;
    if (wanted) faults.push_back(&f);
  }
  out << "parity mutants: " << faults.size() << " fault(s), up to " << o.cases
      << " generated scenario(s) each, seed " << o.seed << ", shrinking up to " << o.shrink_steps
      << " candidate(s)" << std::endl;
  std::vector<Row> rows;
  for (const CodePathFaultInfo* f : faults) {
    rows.push_back(hunt(*f, o));
    const Row& r = rows.back();
    // The time the table shows: to the first FAIL when caught (shrinking follows).
    if (r.caught)
      out << "  " << r.fault << ": caught at check " << r.cases_to_catch << ", "
          << secs(r.seconds_to_catch) << " s (then " << r.cases - r.cases_to_catch
          << " shrink candidate(s))" << std::endl;
    else
      out << "  " << r.fault << ": NOT caught in " << r.cases << " check(s), " << secs(r.seconds)
          << " s" << std::endl;
  }
  out << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-30s %-8s %-36s %-8s %s\n", "fault", "caught", "by", "seconds",
                "shrunk scenario");
  out << line;
  int missed = 0;
  nlohmann::json report = nlohmann::json::array();
  for (const Row& r : rows) {
    std::string by;
    for (const std::string& p : r.by) by += (by.empty() ? "" : ",") + p;
    std::snprintf(line, sizeof line, "%-30s %-8s %-36s %-8s ", r.fault.c_str(),
                  r.caught ? "yes" : "NO", r.caught ? by.c_str() : "-",
                  secs(r.caught ? r.seconds_to_catch : r.seconds).c_str());
    out << line
        << (r.caught ? (r.searched == "scenarios" ? "" : r.searched + ": ") + r.shrunk.dump()
                     : std::string("-"))
        << "\n";
    if (!r.caught) ++missed;
    nlohmann::json j = {{"fault", r.fault},
                        {"expected_by", r.expected},
                        {"caught", r.caught},
                        {"by", r.by},
                        {"reason", r.reason},
                        {"cases", r.cases},
                        {"rank_failures", r.rank_failures},
                        {"seconds_to_catch", r.seconds_to_catch},
                        {"seconds", r.seconds}};
    j["searched"] = r.searched;
    j["shrunk"] = r.caught ? r.shrunk : nlohmann::json(nullptr);
    report.push_back(j);
  }
  out << "\nmutants " << (missed ? "FAILED" : "passed") << ": " << rows.size() - missed << " of "
      << rows.size() << " fault(s) caught" << std::endl;
  MutantsOutcome outcome = missed ? MutantsOutcome::some_missed : MutantsOutcome::all_caught;
  if (!o.report.empty()) {
    try {
      files::write_atomically(o.report, nlohmann::json{{"mutants", report}}.dump(2) + "\n");
    } catch (const std::exception& e) {
      err << "parity mutants: --report " << o.report << ": " << e.what() << "\n";
      if (outcome == MutantsOutcome::all_caught) outcome = MutantsOutcome::report_unwritable;
    }
  }
  for (const Row& r : rows)
    if (!r.caught)
      err << "parity mutants: " << r.fault << " NOT caught in " << r.cases
          << " generated scenario(s) (expected: " << r.expected << ")\n";
  return outcome;
}

}  // namespace parity::scenarios
