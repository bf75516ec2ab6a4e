#pragma once
// One finished case as a results.jsonl line (docs/sweep.md "results.jsonl"),
// and the scenario file a failing case leaves in DIR/failures/.
#include <string>

#include <nlohmann/json.hpp>

#include "harness/checks/check.h"
#include "harness/sweep/matrix.h"

namespace parity::sweep {

// "passed", "property_failed", "rank_failure", "bad_report".
std::string outcome_name(checks::CheckVerdict verdict);

// PARITY_VERSION plus `git describe` at configure time when there was a git tree.
std::string parity_version();
std::string host_name();

// "failures/0007-tp=2_cp=1_....json": relative to the sweep folder; the index
// keeps names unique, the id makes them readable.
std::string failure_file_name(const SweepCase& c);

// A rank failure's typed cause as JSON (docs/sweep.md "results.jsonl"):
// run, run_title, kind, rank, coordinates, victim, in_collective, detail,
// last_collective, headline, line (rank and coordinates null when the run
// could not launch).
nlohmann::ordered_json cause_json(const checks::RankFailureCause& cause);

// "host:pid:start-ms": one `parity sweep` process, unique across the
// invocations that fill a folder (a killed sweep and its --resume).
std::string invocation_id();

// Who recorded a case: the invocation and its seconds since it started when
// the case finished (summary.h sweep_seconds adds the invocations up).
struct RecordedBy {
  std::string invocation;
  double invocation_seconds = 0;
};

// The record of a case; `failure_file` is relative to `dir` ("" = none).
nlohmann::ordered_json case_record(const Matrix& matrix, const SweepCase& c,
                                   const checks::CheckOutcome& outcome, double seconds,
                                   const std::string& dir, const std::string& failure_file,
                                   const RecordedBy& by = {});

// What `parity repro` replays: the case's scenario (or its shrunk form) with
// "about" (matrix, case, outcome, the first failing property and its reason)
// and "expect" = what a correct run gives: every property PASS that FAILed
// here, the others as they were (a SKIP stays SKIP). repro exits 1 while the
// failure persists and 0 once it is fixed. A rank failure has no properties:
// no "expect" (repro exits 3 while it persists).
nlohmann::json failure_scenario(const Matrix& matrix, const std::string& matrix_path,
                                const SweepCase& c, const RunConfig& scenario,
                                const checks::CheckOutcome& outcome,
                                const std::string& shrunk_note);

}  // namespace parity::sweep
