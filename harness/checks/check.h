#pragma once
// `parity check [SCENARIO.json]`: runs the scenario and every run its
// registered properties need for it (property.h; the runs by what they change,
// run_plan.h), each once, then evaluates the properties of contract.md
// section 5 and prints/writes the report (report.h). docs/cli.md,
// docs/properties.md, docs/report-schema.md.
//
// execute_check runs and evaluates (no printing but optional progress lines):
// the property suite (tests/properties, parity mutants) calls it directly.
// run_check prints what `parity check` prints, built on it.
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/checks/report.h"
#include "harness/checks/run_plan.h"
#include "harness/config/launch_mapping.h"
#include "harness/config/run_config.h"
#include "harness/runtime/failure_report.h"

namespace parity::checks {

// One run of a check: what it is (run_plan.h), its report name and title, and
// what it launches.
struct PlannedRun {
  RunVariant variant;
  std::string name, title;
  RunConfig config;
};

struct CheckPlan {
  // What the check compares: the scenario's metrics, or every residual and
  // logit metric when it names none.
  std::vector<std::string> metrics;
  // The scenario's own run, then every run a registered property needs for
  // this scenario, each once, in run_precedes' order.
  std::vector<PlannedRun> runs;
  // Why a run differs from what one would expect (the scenario's run without
  // forward metrics), the planner's and the properties' (Property::plan_note).
  std::vector<std::string> notes;
  const PlannedRun* find(RunVariant v) const;  // nullptr: not planned
};
// validate_run_config as parity check applies it: under full-iteration graphs
// (a) runs without metrics (the eager references collect them), so only the
// metric names are checked there. Empty = a scenario parity check accepts.
std::vector<ConfigViolation> validate_check_scenario(const RunConfig& scenario);

// The runs for a validated scenario. Throws std::logic_error when two
// variants share a report name (a table error in run_plan.cpp).
CheckPlan plan_check(const RunConfig& scenario);

// The first line parity check prints: the scenario as given (never one of
// the runs derived from it), with the number of metrics the check compares.
std::string check_header(const RunConfig& scenario, const CheckPlan& plan,
                         const std::string& source);

// How a check ended; the CLI maps it to the exit code (exit_code()).
enum class CheckVerdict {
  passed,           // every property PASS or SKIP (with `expect`: every expectation met)
  property_failed,  // a property FAILed (or an expectation was not met)
  bad_report,       // the report could not be written
  rank_failure,     // a run failed or could not launch
};
std::string_view to_string(CheckVerdict verdict);  // "passed", "property failed", ...
// docs/cli.md's exit codes: passed 0, property_failed 1, bad_report 2, rank_failure 3.
int exit_code(CheckVerdict verdict);

// Why a check ended in rank_failure, typed, so that what reports it (parity
// sweep's records, summary, CSV and JUnit) need not parse `failure`'s text.
struct RankFailureCause {
  enum class Stage {
    launch,   // the run could not launch (`line`: why)
    ranks,    // its ranks failed (`culprit`)
    results,  // its ranks' results could not be read (`line`: why)
  };
  Stage stage = Stage::ranks;
  std::string run;    // the run that failed: "a", "b", ...
  std::string title;  // its title: "scenario as given"
  // stage ranks: the failure report's first rank (culprits come first) and its headline.
  std::optional<RankFailure> culprit;
  std::string headline;
  std::string line;  // one line: format_rank_failure(culprit), or the launch/results error
};
// "threw", "hung", "crashed", "exited", "stopped" (stage ranks), "could_not_launch", "bad_results".
std::string kind_name(const RankFailureCause& cause);

struct CheckOutcome {
  // runs, per-property results (report order), metric comparisons, notes;
  // report.exit_code = exit_code(verdict).
  CheckReport report;
  CheckVerdict verdict = CheckVerdict::passed;
  // Set when a run failed or could not launch (rank_failure): what parity check
  // prints on stderr, one or more lines ("parity check: run (a) ... failed:", then the
  // rank failure's lines). Empty otherwise.
  std::string failure;
  // Set exactly when verdict is rank_failure: the same failure, typed.
  std::optional<RankFailureCause> cause;
  // Rank threads had to be left running: the process should _Exit soon.
  bool must_exit_now = false;

  // nullptr when the property was not evaluated (a rank failure).
  const PropertyResult* property(const std::string& name) const;
};

// Runs plan_check's runs and evaluates every property. `progress` (when
// given) receives the header, the notes and one line per finished run; with
// `terminal` also a progress line (harness/base/status_line.h: the run and its
// steps done, then the property stage), erased before it returns.
// Never writes scenario.report (run_check does).
CheckOutcome execute_check(const RunConfig& scenario, const std::string& source,
                           const LaunchOptions& options = {}, std::ostream* progress = nullptr,
                           bool terminal = false);

// A scenario file's "expect" (property -> "PASS" | "FAIL" | "SKIP") against
// the evaluated properties. ok: every expectation met and every property not
// named PASS or SKIP. lines: one per expectation, in report order:
// "expect exactly_once FAIL: met", "expect graph_replay PASS: not met: it is SKIP".
struct ExpectationCheck {
  bool ok = true;
  std::vector<std::string> lines;
};
ExpectationCheck compare_expectations(const std::vector<PropertyResult>& properties,
                                      const std::map<std::string, std::string>& expect);

// --baseline: a stored report (baseline.h read_baseline_report) and its path.
struct BaselineInput {
  std::string path;
  nlohmann::json report;
};

// passed: every property PASS or SKIP (with `expect`: every expectation met
// and the properties not named PASS or SKIP), and no difference from the
// baseline when one is given; property_failed otherwise;
// bad_report: a report that cannot be written; rank_failure: a run failed
// (other than prepared state aliasing an observed tensor, which is
// graph_replay's FAIL, or a collective mismatch, collective_symmetry's:
// both by the ranks' typed causes). A SKIP prints how to make the property compare.
// `terminal`: `out` is a terminal, for the progress line (execute_check).
CheckVerdict run_check(const RunConfig& scenario, const std::string& source, std::ostream& out,
                       std::ostream& err, const LaunchOptions& options = {},
                       bool* must_exit_now = nullptr,
                       const std::map<std::string, std::string>& expect = {},
                       const BaselineInput* baseline = nullptr, bool terminal = false);

}  // namespace parity::checks
