#pragma once
// `parity check --baseline REPORT.json` (docs/cli.md "Baselines"): the check's
// JSON report against a stored one. A property whose status changed, or a metric
// value that moved beyond the tolerance since the baseline, is a difference; the
// check then fails (exit 1). CI keeps the report of the last release and fails
// when a LibTorch upgrade or a refactor changes numerics.
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::checks {

struct BaselineDifference {
  std::string
      what;  // "metric layer-residual-contribution-l2 decoder.layers.1", "property exactly_once"
  std::string baseline;  // the baseline's value or status ("missing" when it has none)
  std::string current;   // this run's
  std::string reason;    // "rel 4.8e-03 > fp32 tolerance 1e-05", "status changed"
};

// Two parity check JSON reports (report_json objects, docs/report-schema.md): a
// property whose status changed, or a metric (metric, label) whose value or
// reference moved beyond the metric tolerance of tolerance.h (the current
// scenario's precision, the rule sharded_reduction applies) since the baseline,
// is one difference; so is a property or metric present on one side only, and
// a run option of the scenario that differs (output paths aside). A baseline
// that holds no property compares nothing: one difference saying so.
std::vector<BaselineDifference> compare_with_baseline(const nlohmann::json& baseline_report,
                                                      const nlohmann::json& current_report);

// The run options where a stored report's scenario differs from `scenario`
// (output paths aside; a key the baseline lacks counts as its default): a
// baseline from another scenario compares nothing meaningful, so the CLI
// refuses it up front (exit 2) with the first of these.
std::vector<BaselineDifference> baseline_scenario_differences(const nlohmann::json& baseline_report,
                                                              const nlohmann::json& scenario);

// "metric M L: baseline 1.234 now 1.24 (rel 4.8e-03 > fp32 tolerance 1e-05)"
std::string format_difference(const BaselineDifference& d);

class BaselineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads a stored parity check report. Throws BaselineError with one line naming
// the file and the reason: "base.json: cannot read: No such file or directory",
// "base.json: invalid JSON at byte 17", "base.json: not a parity check report
// (\"schema\" is not \"parity-check-report\")".
nlohmann::json read_baseline_report(const std::string& path);

}  // namespace parity::checks
