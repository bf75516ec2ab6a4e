// parity sweep --merge DIR... --out DIR (run_sweep.h).
#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <set>

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
  std::vector<std::pair<std::string, std::string>> copies;  // failure file, its text
  std::optional<BaselineFolder> baseline;
  // As `parity sweep` does: a folder holding a sweep is never overwritten.
  if (files::exists(matrix_copy_path(o.out))) {
    err << "parity sweep --merge: --out " << o.out
        << ": holds a sweep already (matrix.json): merge into a new folder (a merge never "
           "overwrites one)\n";
    return SweepOutcome::bad_input;
  }
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
            copies.emplace_back(file, *text);
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
  if (!o.junit.empty())
    if (const std::string why = cannot_write_file(o.junit); !why.empty()) {
      err << "parity sweep --merge: --junit " << o.junit << ": cannot be written: " << why
          << " (output paths are checked before anything is written)\n";
      return SweepOutcome::bad_input;
    }
  if (const std::string why = cannot_write_folder(o.out); !why.empty()) {
    err << "parity sweep --merge: --out " << o.out << ": cannot be written: " << why
        << " (output paths are checked before anything is written)\n";
    return SweepOutcome::bad_input;
  }
  try {
    for (const auto& [file, text] : copies) {
      files::create_directories(o.out + "/failures");
      files::write_atomically(o.out + "/" + file, text);
    }
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
  if (cases.size() < matrix.cases.size()) {
    std::set<std::string> merged;
    for (const nlohmann::ordered_json& c : cases) merged.insert(c.value("case", ""));
    std::vector<const SweepCase*> missing;
    for (const SweepCase& c : matrix.cases)
      if (!merged.count(c.id)) missing.push_back(&c);
    err << "parity sweep --merge: " << missing.size()
        << " case(s) of the matrix are in none of the folders (a shard missing or unfinished): ";
    const std::size_t shown = std::min<std::size_t>(missing.size(), 10);
    for (std::size_t k = 0; k < shown; ++k)
      err << (k ? "; " : "") << "#" << missing[k]->index << " " << missing[k]->id;
    if (missing.size() > shown) err << "; and " << missing.size() - shown << " more";
    err << "\n";
    if (outcome == SweepOutcome::all_passed) outcome = SweepOutcome::some_failed;
  }
  return outcome;
}

}  // namespace parity::sweep
