// parity sweep --merge DIR... --out DIR (run_sweep.h).
#include <map>
#include <optional>
#include <ostream>

#include "harness/base/files.h"
#include "harness/sweep/baseline_folder.h"
#include "harness/sweep/folder.h"
#include "harness/sweep/run_sweep.h"
#include "harness/sweep/summary.h"

namespace parity::sweep {

SweepOutcome merge_sweeps(const SweepOptions& o, std::ostream& out, std::ostream& err) {
  Matrix matrix;
  std::vector<nlohmann::ordered_json> records;
  double seconds = 0;
  std::optional<BaselineFolder> baseline;
  try {
    if (!o.baseline.empty()) baseline = read_baseline_folder(o.baseline, err);
    std::map<std::string, std::string> folder_of;  // case id -> the folder holding it
    for (std::size_t i = 0; i < o.merge.size(); ++i) {
      const std::string& dir = o.merge[i];
      Matrix m = read_folder_matrix(dir);
      if (i == 0) {
        matrix = std::move(m);
      } else if (m.digest != matrix.digest) {
        err << "parity sweep --merge: " << dir << " holds matrix " << m.digest << ", " << o.merge[0]
            << " holds " << matrix.digest << ": only folders of the same matrix merge\n";
        return SweepOutcome::bad_input;
      }
      for (nlohmann::ordered_json& r : read_folder_cases(dir, matrix.digest, err)) {
        const std::string id = r.value("case", "");
        const auto [it, fresh] = folder_of.emplace(id, dir);
        if (!fresh) {
          err << "parity sweep --merge: case \"" << id << "\" is in both " << it->second << " and "
              << dir << " (shards of one matrix are disjoint)\n";
          return SweepOutcome::bad_input;
        }
        // The failure file moves into the merged folder; its repro command with it.
        if (r.contains("failure_file") && r.at("failure_file").is_string()) {
          const std::string file = r.at("failure_file").get<std::string>();
          const std::optional<std::string> text = files::read(dir + "/" + file);
          if (text) {
            files::create_directories(o.out + "/failures");
            files::write_atomically(o.out + "/" + file, *text);
            r["repro"] = "parity repro " + o.out + "/" + file;
          }
        }
        records.push_back(std::move(r));
      }
      if (const auto text = files::read(dir + "/summary.json")) {
        const nlohmann::json s = nlohmann::json::parse(*text, nullptr, false);
        if (s.is_object() && s.contains("seconds") && s.at("seconds").is_number())
          seconds += s.at("seconds").get<double>();
      }
    }
  } catch (const std::exception& e) {
    err << "parity sweep --merge: " << e.what() << "\n";
    return SweepOutcome::bad_input;
  }
  std::vector<nlohmann::ordered_json> cases = unique_cases(records);
  try {
    files::create_directories(o.out);
    files::write_atomically(matrix_copy_path(o.out), matrix.source.dump(2) + "\n");
    std::string lines;
    for (const nlohmann::ordered_json& c : cases) lines += c.dump() + "\n";
    files::write_atomically(results_path(o.out), lines);
  } catch (const std::exception& e) {
    err << "parity sweep --merge: " << e.what() << "\n";
    return SweepOutcome::could_not_run;
  }
  out << "parity sweep --merge: " << o.merge.size() << " folder(s), " << cases.size() << " of "
      << matrix.cases.size() << " case(s), into " << o.out << std::endl;
  std::optional<SweepBaselineResult> compared;
  if (baseline) compared = compare_cases_with_baseline(*baseline, cases);
  SweepOutcome outcome =
      finish_folder(o.out, matrix, cases, seconds, "", o.junit, "parity sweep (merged)", out, err,
                    compared ? &*compared : nullptr);
  if (outcome == SweepOutcome::all_passed && cases.size() < matrix.cases.size()) {
    err << "parity sweep --merge: " << matrix.cases.size() - cases.size()
        << " case(s) of the matrix are in none of the folders (a shard missing or unfinished)\n";
    outcome = SweepOutcome::some_failed;
  }
  return outcome;
}

}  // namespace parity::sweep
