#pragma once
// DIR/report.html of `parity sweep` (docs/sweep-report.md): one self-contained
// page (inline CSS and SVG, no script, no network). First the verdict and the
// failures (each with its property, the first differing value or the rank
// failure's cause, the `parity repro` line and the saved scenario as the fields
// that differ from the defaults), then the pass/fail grid, then one log-scale
// plot per metric with an error (metrics without one folded into a line), the
// time per case, and the invalid combinations. Cases are numbered by their
// index, as DIR/failures/ names them. Every string from the inputs is
// HTML-escaped.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::sweep {

struct SweepReportInput {
  std::string title;                  // e.g. "parity sweep cpu-64.json"
  nlohmann::json summary;             // summary.json's object
  std::vector<nlohmann::json> cases;  // results.jsonl's objects, in index order
  // A case's "failure_file" (relative to the folder) -> that file's JSON: the
  // saved (with --shrink, shrunk) scenario. A case whose file is not here shows
  // the scenario of its report.
  std::map<std::string, nlohmann::json> failure_files;
};

// Reads into `input` the failure files its cases name, from the sweep folder
// `dir`; a file that cannot be read or parsed is left out (the page says so).
void read_failure_files(const std::string& dir, SweepReportInput& input);

std::string render_sweep_report(const SweepReportInput& input);  // one self-contained HTML page

}  // namespace parity::sweep
