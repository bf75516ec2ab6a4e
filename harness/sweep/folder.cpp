#include "harness/sweep/folder.h"

#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "harness/base/files.h"
#include "harness/sweep/report_html.h"
#include "harness/sweep/results.h"
#include "harness/sweep/summary.h"

namespace parity::sweep {

int exit_code(SweepOutcome outcome) {
  switch (outcome) {
    case SweepOutcome::all_passed:
      return 0;
    case SweepOutcome::some_failed:
      return 1;
    case SweepOutcome::bad_input:
      return 2;
    case SweepOutcome::could_not_run:
      return 3;
  }
  return 3;
}

std::string matrix_copy_path(const std::string& dir) { return dir + "/matrix.json"; }
std::string results_path(const std::string& dir) { return dir + "/results.jsonl"; }

Matrix read_folder_matrix(const std::string& dir) {
  const std::string path = matrix_copy_path(dir);
  if (!files::exists(path))
    throw MatrixError(path + ": missing (not a parity sweep folder, or its sweep never started)");
  return read_matrix_file(path);
}

std::vector<nlohmann::ordered_json> read_folder_cases(const std::string& dir,
                                                      const std::string& digest,
                                                      std::ostream& err) {
  ResultsRead read = read_results(results_path(dir));
  if (!read.warning.empty()) err << "parity sweep: " << read.warning << "\n";
  for (const nlohmann::ordered_json& r : read.records)
    if (r.value("matrix_digest", "") != digest)
      throw std::runtime_error(results_path(dir) + ": case \"" + r.value("case", "") +
                               "\" has matrix_digest \"" + r.value("matrix_digest", "") +
                               "\", the folder's matrix.json has \"" + digest + "\"");
  return unique_cases(read.records);
}

std::string cannot_write_file(const std::string& path) { return files::why_not_writable(path); }

std::string cannot_write_folder(const std::string& dir) {
  try {
    files::create_directories(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return cannot_write_file(dir + "/summary.json");
}

SweepOutcome finish_folder(const std::string& dir, const Matrix& matrix,
                           const std::vector<nlohmann::ordered_json>& cases, double seconds,
                           const std::string& shard, const std::string& junit,
                           const std::string& title, std::ostream& out, std::ostream& err,
                           const SweepBaselineResult* baseline) {
  nlohmann::ordered_json summary = summary_json(matrix, cases, seconds, shard);
  if (baseline) summary["baseline"] = baseline_result_json(*baseline);
  // The page takes plain json (its inputs' key order does not matter to it).
  SweepReportInput page{title, nlohmann::json::parse(summary.dump()), {}, {}};
  page.cases.reserve(cases.size());
  for (const nlohmann::ordered_json& c : cases)
    page.cases.push_back(nlohmann::json::parse(c.dump()));
  read_failure_files(dir, page);
  std::string error;
  bool written =
      files::try_write_atomically(dir + "/summary.json", summary.dump(2) + "\n", &error) &&
      files::try_write_atomically(dir + "/results.csv", results_csv(matrix, cases), &error) &&
      files::try_write_atomically(dir + "/report.html", render_sweep_report(page), &error);
  if (written && !junit.empty())
    written = files::try_write_atomically(junit, junit_xml(title, summary, cases), &error);
  out << "\n" << summary_table(summary, cases);
  if (baseline) out << format_baseline_result(*baseline);
  if (!written) {
    err << "parity sweep: " << error << "\n";
    return SweepOutcome::could_not_run;
  }
  const bool all_passed = summary.value("failed", 0) == 0 &&
                          summary.value("rank_failures", 0) == 0 &&
                          !(baseline && baseline->failed());
  return all_passed ? SweepOutcome::all_passed : SweepOutcome::some_failed;
}

}  // namespace parity::sweep
