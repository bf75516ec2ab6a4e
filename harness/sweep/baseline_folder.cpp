#include "harness/sweep/baseline_folder.h"

#include <set>
#include <sstream>

#include "harness/sweep/folder.h"
#include "harness/sweep/summary.h"

namespace parity::sweep {

namespace {

// A report that evaluated properties (a rank failure's has none, or is null).
bool has_properties(const nlohmann::ordered_json& record) {
  const auto report = record.find("report");
  if (report == record.end() || !report->is_object()) return false;
  const auto properties = report->find("properties");
  return properties != report->end() && properties->is_array() && !properties->empty();
}

}  // namespace

BaselineFolder read_baseline_folder(const std::string& dir, std::ostream& err) {
  BaselineFolder folder;
  folder.dir = dir;
  try {
    const Matrix matrix = read_folder_matrix(dir);
    for (nlohmann::ordered_json& record : read_folder_cases(dir, matrix.digest, err))
      folder.cases.emplace(record.value("case", ""), std::move(record));
  } catch (const std::exception& e) {
    throw checks::BaselineError("--baseline " + dir + ": " + e.what());
  }
  if (folder.cases.empty())
    throw checks::BaselineError("--baseline " + dir + ": " + results_path(dir) +
                                " holds no case (an empty or unstarted sweep compares nothing)");
  return folder;
}

SweepBaselineResult compare_cases_with_baseline(const BaselineFolder& baseline,
                                                const std::vector<nlohmann::ordered_json>& cases) {
  SweepBaselineResult result;
  result.dir = baseline.dir;
  for (const nlohmann::ordered_json& current : cases) {
    const std::string id = current.value("case", "");
    const auto found = baseline.cases.find(id);
    if (found == baseline.cases.end()) {
      result.not_in_baseline.push_back(id);
      continue;
    }
    ++result.compared;
    const nlohmann::ordered_json& before = found->second;
    const std::string was = before.value("outcome", ""), now = current.value("outcome", "");
    if (was != now)
      result.differences.push_back({id, {"outcome", was, now, "the case's outcome changed"}});
    if (has_properties(before) && has_properties(current)) {
      // compare_with_baseline takes plain json; the records keep key order.
      const nlohmann::json a = nlohmann::json::parse(before.at("report").dump());
      const nlohmann::json b = nlohmann::json::parse(current.at("report").dump());
      for (checks::BaselineDifference& d : checks::compare_with_baseline(a, b))
        result.differences.push_back({id, std::move(d)});
    }
  }
  return result;
}

nlohmann::ordered_json baseline_result_json(const SweepBaselineResult& result) {
  nlohmann::ordered_json differences = nlohmann::ordered_json::array();
  for (const CaseBaselineDifference& d : result.differences)
    differences.push_back({{"case", d.case_id},
                           {"what", d.difference.what},
                           {"baseline", d.difference.baseline},
                           {"current", d.difference.current},
                           {"reason", d.difference.reason}});
  return {{"dir", result.dir},
          {"compared", result.compared},
          {"not_in_baseline", result.not_in_baseline},
          {"differences", differences}};
}

std::string format_baseline_result(const SweepBaselineResult& result) {
  std::ostringstream os;
  os << "baseline " << result.dir << ": " << result.differences.size() << " difference(s) in "
     << result.compared << " compared case(s) (" << result.not_in_baseline.size()
     << " not in the baseline)";
  if (result.compared == 0) os << ": no case of this sweep is in the baseline, nothing compared";
  os << "\n";
  for (const CaseBaselineDifference& d : result.differences)
    os << "  " << d.case_id << ": " << checks::format_difference(d.difference) << "\n";
  return os.str();
}

}  // namespace parity::sweep
