#pragma once
// `parity sweep --baseline DIR` (docs/sweep.md "Baselines"): each case's parity
// check report against the same case (same case id) of a stored sweep folder,
// by the rule of `parity check --baseline` (harness/checks/baseline.h). CI keeps
// the folder of the last release's sweep and fails when numerics move.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/checks/baseline.h"

namespace parity::sweep {

// A stored sweep folder's case records by case id.
struct BaselineFolder {
  std::string dir;
  std::map<std::string, nlohmann::ordered_json> cases;
};

// Reads DIR/matrix.json and DIR/results.jsonl (a torn last line's warning goes
// to `err`). Throws checks::BaselineError with one line naming the folder and
// the reason (not a sweep folder, no results, a record of another matrix).
BaselineFolder read_baseline_folder(const std::string& dir, std::ostream& err);

struct CaseBaselineDifference {
  std::string case_id;
  checks::BaselineDifference difference;
};

struct SweepBaselineResult {
  std::string dir;
  int compared = 0;                          // cases found in both
  std::vector<std::string> not_in_baseline;  // cases of this sweep the baseline lacks
  std::vector<CaseBaselineDifference> differences;
  // A difference, or nothing compared (no vacuous pass).
  bool failed() const { return compared == 0 || !differences.empty(); }
};

// Per case found in the baseline: its outcome, then (when both ran their
// properties) checks::compare_with_baseline of the two reports.
SweepBaselineResult compare_cases_with_baseline(const BaselineFolder& baseline,
                                                const std::vector<nlohmann::ordered_json>& cases);

// summary.json's "baseline" object (docs/sweep.md).
nlohmann::ordered_json baseline_result_json(const SweepBaselineResult& result);

// What the sweep prints after its summary table: "baseline DIR: 2 difference(s) in
// 64 compared case(s) (0 not in the baseline)", then one line per difference.
std::string format_baseline_result(const SweepBaselineResult& result);

}  // namespace parity::sweep
