#include "harness/sweep/folder.h"

#include <ostream>
#include <stdexcept>

#include "harness/base/files.h"
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

SweepOutcome finish_folder(const std::string& dir, const Matrix& matrix,
                           const std::vector<nlohmann::ordered_json>& cases, double seconds,
                           const std::string& shard, const std::string& junit,
                           const std::string& title, std::ostream& out, std::ostream& err) {
  const nlohmann::ordered_json summary = summary_json(matrix, cases, seconds, shard);
  std::string error;
  bool written =
      files::try_write_atomically(dir + "/summary.json", summary.dump(2) + "\n", &error) &&
      files::try_write_atomically(dir + "/results.csv", results_csv(matrix, cases), &error);
  if (written && !junit.empty())
    written = files::try_write_atomically(junit, junit_xml(title, summary, cases), &error);
  // report.html: not written here (the sweep report's renderer, issue 12's
  // second half, is wired in by the command).
  out << "\n" << summary_table(summary, cases);
  if (!written) {
    err << "parity sweep: " << error << "\n";
    return SweepOutcome::could_not_run;
  }
  const bool all_passed = summary.value("failed", 0) == 0 && summary.value("rank_failures", 0) == 0;
  return all_passed ? SweepOutcome::all_passed : SweepOutcome::some_failed;
}

}  // namespace parity::sweep
