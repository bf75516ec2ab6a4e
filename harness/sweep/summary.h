#pragma once
// What a sweep folder says at the end (docs/sweep.md): summary.json,
// results.csv, the table printed on the terminal and the JUnit XML. All are
// functions of the matrix and the case records, so `--merge` of shards and one
// whole run give the same summary (apart from seconds).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/sweep/matrix.h"

namespace parity::sweep {

inline constexpr const char* kSummarySchema = "parity-sweep-summary";
inline constexpr int kSummarySchemaVersion = 1;

// One record per case id (the first one read), sorted by index.
std::vector<nlohmann::ordered_json> unique_cases(
    const std::vector<nlohmann::ordered_json>& records);

// summary.json's object. `cases`: unique_cases' output; `seconds`: the sweep's
// wall time; `shard`: "K/N" or "" (a whole run or a merge).
nlohmann::ordered_json summary_json(const Matrix& matrix,
                                    const std::vector<nlohmann::ordered_json>& cases,
                                    double seconds, const std::string& shard);

// The first FAILed property ("sharded_reduction FAIL"), else the one with the
// largest relative error ("recompute_invariance rel 3.1e-07"), else "-".
std::string worst_property(const nlohmann::ordered_json& record);

// A rank failure's cause in one line, from the record's "cause":
// "run (a) scenario as given: rank 1 (tp=1, cp=0, dp=0) threw: ...; last
// collective: none". A record without one (written before records carried
// it) gives the first rank line of its "failure" text; "" when neither.
std::string cause_line(const nlohmann::ordered_json& record);

// The wall time of the sweep whose records these are: each invocation that
// recorded a case counts up to its last recorded case ("invocation_seconds"),
// except `current`, which counts `current_seconds` (its whole wall time). So a
// killed sweep resumed counts both invocations.
double sweep_seconds(const std::vector<nlohmann::ordered_json>& records, const std::string& current,
                     double current_seconds);

// One header row (case, index, the axes..., outcome, seconds, worst_property,
// cause), one row per case; RFC 4180 quoting.
std::string results_csv(const Matrix& matrix, const std::vector<nlohmann::ordered_json>& cases);

// The table printed at the end: counts, the slowest cases, the invalid cases
// (each reason once, with its count and the first case ids), every failure
// with its cause and repro command.
std::string summary_table(const nlohmann::ordered_json& summary,
                          const std::vector<nlohmann::ordered_json>& cases);

// JUnit XML: one testsuite named `suite`, one testcase per case (classname
// "parity.sweep", name = the case id, time = its seconds), one <failure> per
// FAILed property (message: property and reason; text: reason and the repro
// command), an <error> for a rank failure (message: cause_line; type:
// "rank_failure"; text: the failure's lines and the repro command).
std::string junit_xml(const std::string& suite, const nlohmann::ordered_json& summary,
                      const std::vector<nlohmann::ordered_json>& cases);

// &, <, >, " and ' as entities; control characters XML 1.0 cannot hold as '?'.
std::string xml_escape(const std::string& text);

}  // namespace parity::sweep
