#pragma once
// DIR/report.html of `parity sweep` (docs/sweep-report.md): one self-contained
// page (inline CSS and SVG, no script, no network) with the totals, a pass/fail
// grid by configuration, one log-scale plot per metric of its error per case with
// the tolerance drawn, the time per case, and each failure's scenario, reasons and
// repro command. Every string from the inputs is HTML-escaped.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::sweep {

struct SweepReportInput {
  std::string title;                  // e.g. "parity sweep cpu-64.json"
  nlohmann::json summary;             // summary.json's object
  std::vector<nlohmann::json> cases;  // results.jsonl's objects, in index order
};

std::string render_sweep_report(const SweepReportInput& input);  // one self-contained HTML page

}  // namespace parity::sweep
