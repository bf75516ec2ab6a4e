#pragma once
// A sweep folder's files (docs/sweep.md): matrix.json (the matrix, written
// first: --resume and --merge compare its digest), results.jsonl, failures/,
// summary.json, results.csv, and the optional JUnit file.
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/sweep/baseline_folder.h"
#include "harness/sweep/matrix.h"
#include "harness/sweep/sweep_options.h"

namespace parity::sweep {

std::string matrix_copy_path(const std::string& dir);  // DIR/matrix.json
std::string results_path(const std::string& dir);      // DIR/results.jsonl

// The matrix a folder holds (DIR/matrix.json expanded); throws MatrixError
// naming the file when it is missing or malformed.
Matrix read_folder_matrix(const std::string& dir);

// The folder's case records (results.jsonl, one per case, index order);
// throws std::runtime_error when a record belongs to another matrix. A torn
// last line's warning goes to `err`.
std::vector<nlohmann::ordered_json> read_folder_cases(const std::string& dir,
                                                      const std::string& digest, std::ostream& err);

// Output paths are checked before the first case runs (an error is bad input,
// exit 2: nothing ran). "" when `path` can be written as files::write_atomically
// writes it (a temporary file beside it, renamed over it), else why, one line.
std::string cannot_write_file(const std::string& path);
// Creates `dir` (and its parents) and checks that a file can be written in it;
// "" when it can, else why, one line.
std::string cannot_write_folder(const std::string& dir);

// Writes summary.json, results.csv, report.html (harness/sweep/report_html.h)
// and (when asked) the JUnit file, atomically, and prints the summary table on
// `out`, then the baseline comparison when there is one (summary.json's
// "baseline"). all_passed when every recorded case passed and the baseline (if
// any) compared cases and found no difference; could_not_run when a file cannot
// be written (named on `err`).
SweepOutcome finish_folder(const std::string& dir, const Matrix& matrix,
                           const std::vector<nlohmann::ordered_json>& cases, double seconds,
                           const std::string& shard, const std::string& junit,
                           const std::string& title, std::ostream& out, std::ostream& err,
                           const SweepBaselineResult* baseline = nullptr);

}  // namespace parity::sweep
