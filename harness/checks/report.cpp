#include "harness/checks/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "harness/backend/version.h"

namespace parity::checks {

namespace {
std::string num(std::optional<double> v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", *v);
  return buf;
}
std::string full(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}
nlohmann::ordered_json number_or_null(std::optional<double> v) {
  if (!v || std::isnan(*v)) return nullptr;
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return *v;
}

struct MetricSummary {
  MetricComparison last;
  double max_abs = 0, max_rel = 0;
  bool ok = true;
  int compared = 0;
};

std::vector<std::pair<std::pair<std::string, std::string>, MetricSummary>> summarize(
    const std::vector<MetricComparison>& rows) {
  std::map<std::pair<std::string, std::string>, MetricSummary> by;
  std::vector<std::pair<std::string, std::string>> order;
  for (const MetricComparison& r : rows) {
    auto key = std::make_pair(r.metric, r.label);
    auto [it, inserted] = by.try_emplace(key);
    if (inserted) order.push_back(key);
    MetricSummary& s = it->second;
    if (inserted || (r.run == s.last.run && r.step >= s.last.step)) s.last = r;
    s.max_abs = std::max(s.max_abs, r.abs_err);
    s.max_rel = std::max(s.max_rel, r.rel_err);
    s.ok = s.ok && r.ok;
    ++s.compared;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, MetricSummary>> out;
  out.reserve(order.size());
  for (const auto& k : order) out.emplace_back(k, by[k]);
  return out;
}
}  // namespace

std::string format_property_table(const std::vector<PropertyResult>& properties) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-21s %-6s %-22s %-10s %-10s %-40s %s\n", "property", "status",
                "compared", "max abs", "max rel", "worst site", "label");
  out += line;
  for (const PropertyResult& p : properties) {
    std::snprintf(line, sizeof line, "%-21s %-6s %-22s %-10s %-10s %-40s %s\n", p.name.c_str(),
                  std::string(to_string(p.status)).c_str(), p.compared.c_str(),
                  num(p.max_abs).c_str(), num(p.max_rel).c_str(),
                  p.worst_site.empty() ? "-" : p.worst_site.c_str(),
                  p.worst_label.empty() ? "-" : p.worst_label.c_str());
    out += line;
    if (!p.reason.empty())
      out += "    " + std::string(p.status == Status::fail ? "FAIL: " : "") + p.reason + "\n";
    if (p.status == Status::skip && !p.hint.empty())
      out += "    to make it compare: " + p.hint + "\n";
  }
  return out;
}

std::string format_metric_table(const std::vector<MetricComparison>& rows) {
  if (rows.empty()) return "(no metric compared)\n";
  const auto summary = summarize(rows);
  // The label column fits the longest label (per-expert labels are long).
  int label_width = 18;
  for (const auto& entry : summary)
    label_width = std::max(label_width, static_cast<int>(entry.first.second.size()));
  std::string out;
  char line[768];
  std::snprintf(line, sizeof line, "%-40s %-*s %-18s %-18s %-10s %-10s %s\n", "metric", label_width,
                "label", "value", "reference", "max abs", "max rel", "");
  out += line;
  for (const auto& [key, s] : summary) {
    std::snprintf(line, sizeof line, "%-40s %-*s %-18s %-18s %-10s %-10s %s\n", key.first.c_str(),
                  label_width, key.second.c_str(), full(s.last.value).c_str(),
                  full(s.last.reference).c_str(), num(s.max_abs).c_str(), num(s.max_rel).c_str(),
                  s.ok ? "ok" : "FAIL");
    out += line;
  }
  return out;
}

nlohmann::ordered_json report_json(const CheckReport& r) {
  nlohmann::ordered_json j;
  j["schema"] = "parity-check-report";
  j["version"] = kReportSchemaVersion;
  j["build"] = version_json();
  j["scenario_source"] = r.scenario_source;
  j["scenario"] = to_json(r.scenario);
  bool failed = false;
  for (const PropertyResult& p : r.properties) failed = failed || p.status == Status::fail;
  j["result"] = failed ? "FAIL" : "PASS";
  j["exit_code"] = r.exit_code;
  j["wall_seconds"] = r.wall_seconds;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    nlohmann::ordered_json run;
    run["name"] = r.runs[i].first;
    run["title"] = i < r.run_titles.size() ? r.run_titles[i].second : "";
    run["config"] = to_json(r.runs[i].second);
    run["seconds"] = i < r.run_seconds.size() ? r.run_seconds[i] : 0.0;
    runs.push_back(run);
  }
  j["runs"] = runs;
  nlohmann::ordered_json props = nlohmann::ordered_json::array();
  for (const PropertyResult& p : r.properties) {
    nlohmann::ordered_json o;
    o["name"] = p.name;
    o["status"] = std::string(to_string(p.status));
    o["compared"] = p.compared;
    o["reason"] = p.reason;
    o["hint"] = p.hint.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.hint);
    o["max_abs"] = number_or_null(p.max_abs);
    o["max_rel"] = number_or_null(p.max_rel);
    o["worst_site"] = p.worst_site.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(p.worst_site);
    o["worst_label"] = p.worst_label.empty() ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(p.worst_label);
    o["note"] = p.note;
    props.push_back(o);
  }
  j["properties"] = props;
  nlohmann::ordered_json metrics = nlohmann::ordered_json::array();
  for (const auto& [key, s] : summarize(r.metrics)) {
    nlohmann::ordered_json o;
    o["metric"] = key.first;
    o["label"] = key.second;
    o["run"] = s.last.run;
    o["step"] = s.last.step;
    o["value"] = number_or_null(s.last.value);
    o["reference"] = number_or_null(s.last.reference);
    o["max_abs"] = number_or_null(s.max_abs);
    o["max_rel"] = number_or_null(s.max_rel);
    o["compared"] = s.compared;
    o["ok"] = s.ok;
    metrics.push_back(o);
  }
  j["metrics"] = metrics;
  j["notes"] = r.notes;
  if (!r.expect.empty()) {
    j["expect"] = r.expect;
    j["expectations"] = r.expectation_lines;
  }
  if (!r.baseline_path.empty()) {
    nlohmann::ordered_json differences = nlohmann::ordered_json::array();
    for (const BaselineDifference& d : r.baseline_differences)
      differences.push_back({{"what", d.what},
                             {"baseline", d.baseline},
                             {"current", d.current},
                             {"reason", d.reason}});
    j["baseline"] = {{"path", r.baseline_path}, {"differences", differences}};
  }
  return j;
}

}  // namespace parity::checks
