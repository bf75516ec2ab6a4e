#include "harness/cli/run_output.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/parallel/rank_status.h"
#include "harness/runtime/launcher.h"
#include "harness/trace/trace_recorder.h"

namespace parity {

std::string loss_table_header() {
  char line[160];
  std::snprintf(line, sizeof line, "%5s  %-24s %12s %10s\n", "step", "loss (global mean)",
                "observations", "seconds");
  return line;
}

std::string format_loss_row(const StepRow& row) {
  char line[160];
  std::snprintf(line, sizeof line, "%5lld  %-24.17g %12lld %10.4f\n",
                static_cast<long long>(row.step), row.loss,
                static_cast<long long>(row.observations), row.seconds);
  return line;
}

std::vector<StepRow> loss_table_rows(const LaunchResult& result) {
  const nlohmann::json* first = nullptr;
  for (const nlohmann::json& r : result.results)
    if (r.is_object() && r.contains("steps")) {
      first = &r;
      break;
    }
  std::vector<StepRow> rows;
  if (first == nullptr) return rows;
  const std::size_t steps = (*first)["steps"].size();
  for (std::size_t s = 0; s < steps; ++s) {
    StepRow row;
    row.step = (*first)["steps"][s].value("step", static_cast<std::int64_t>(s));
    row.loss = (*first)["steps"][s]["loss"].get<double>();
    for (const nlohmann::json& r : result.results) {
      if (!r.is_object() || !r.contains("steps") || r["steps"].size() <= s) continue;
      row.observations += r["steps"][s].value("observations", std::int64_t{0});
      row.seconds = std::max(row.seconds, r["steps"][s].value("seconds", 0.0));
    }
    rows.push_back(row);
  }
  return rows;
}

std::string format_loss_table(const LaunchResult& result) {
  const std::vector<StepRow> rows = loss_table_rows(result);
  bool any = false;
  for (const nlohmann::json& r : result.results)
    any = any || (r.is_object() && r.contains("steps"));
  if (!any) return "(no rank result)\n";
  std::string out = loss_table_header();
  for (const StepRow& row : rows) out += format_loss_row(row);
  return out;
}

std::string loss_disagreement(const LaunchResult& result) {
  const nlohmann::json* first = nullptr;
  for (const nlohmann::json& r : result.results) {
    if (!r.is_object() || !r.contains("steps")) continue;
    if (first == nullptr) {
      first = &r;
      continue;
    }
    const nlohmann::json &a = (*first)["steps"], &b = r["steps"];
    if (a.size() != b.size())
      return "rank " + std::to_string(r.value("rank", -1)) + " reported " +
             std::to_string(b.size()) + " steps, rank " + std::to_string(first->value("rank", -1)) +
             " " + std::to_string(a.size());
    for (std::size_t s = 0; s < a.size(); ++s) {
      const double x = a[s]["loss"].get<double>(), y = b[s]["loss"].get<double>();
      if (x != y) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "step %zu: rank %d loss %.17g != rank %d loss %.17g", s,
                      first->value("rank", -1), x, r.value("rank", -1), y);
        return buf;
      }
    }
  }
  return "";
}

std::string trace_jsonl(const LaunchResult& result) {
  std::vector<TraceRecord> records;
  for (const nlohmann::json& r : result.results) {
    if (!r.is_object() || !r.contains("trace")) continue;
    for (const nlohmann::json& t : r["trace"]) records.push_back(trace_record_from_json(t));
  }
  return to_jsonl(std::move(records));
}

}  // namespace parity
