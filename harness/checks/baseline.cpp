#include "harness/checks/baseline.h"

#include "harness/base/file_kind.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/checks/properties.h"
#include "harness/checks/tolerance.h"
#include "harness/config/run_config.h"

namespace parity::checks {

namespace {

// Run options that name where output goes, not what is computed.
const std::set<std::string>& output_keys() {
  static const std::set<std::string> keys = {"report", "trace", "dump"};
  return keys;
}

// report_json writes NaN as null and infinities as "inf" / "-inf".
double number_of(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v == "inf") return INFINITY;
  if (v == "-inf") return -INFINITY;
  return NAN;
}

std::string text_of(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return v.dump();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v.get<double>());
  return buf;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

const nlohmann::json& array_at(const nlohmann::json& report, const char* key) {
  static const nlohmann::json empty = nlohmann::json::array();
  const auto it = report.find(key);
  return it != report.end() && it->is_array() ? *it : empty;
}

void compare_scenarios(const nlohmann::json& baseline, const nlohmann::json& current,
                       std::vector<BaselineDifference>& out) {
  const nlohmann::json none;
  const nlohmann::json& b = baseline.contains("scenario") ? baseline["scenario"] : none;
  const nlohmann::json& c = current.contains("scenario") ? current["scenario"] : none;
  if (!b.is_object() || !c.is_object()) return;
  std::set<std::string> keys;
  for (const auto& [k, v] : b.items()) keys.insert(k);
  for (const auto& [k, v] : c.items()) keys.insert(k);
  // A key the baseline lacks is a field added since it was written: that run
  // had the field's default (tests/cli/baseline-fp64.json predates --ep).
  const nlohmann::json defaults = to_json(RunConfig{});
  auto value_of = [&](const nlohmann::json& scenario, const std::string& k) {
    if (scenario.contains(k)) return scenario[k];
    return defaults.contains(k) ? defaults[k] : nlohmann::json("missing");
  };
  for (const std::string& k : keys) {
    if (output_keys().count(k)) continue;
    const nlohmann::json bv = value_of(b, k);
    const nlohmann::json cv = value_of(c, k);
    if (bv != cv)
      out.push_back({"scenario " + k, text_of(bv), text_of(cv),
                     "a different scenario: the comparison needs the baseline's"});
  }
}

void compare_properties(const nlohmann::json& baseline, const nlohmann::json& current,
                        std::vector<BaselineDifference>& out) {
  std::map<std::string, const nlohmann::json*> now;
  for (const nlohmann::json& p : array_at(current, "properties")) now[p.value("name", "")] = &p;
  std::set<std::string> seen;
  for (const nlohmann::json& p : array_at(baseline, "properties")) {
    const std::string name = p.value("name", "");
    seen.insert(name);
    const std::string was = p.value("status", "?");
    const auto it = now.find(name);
    if (it == now.end()) {
      out.push_back({"property " + name, was, "missing", "not evaluated now"});
      continue;
    }
    const std::string is = it->second->value("status", "?");
    if (was != is)
      out.push_back({"property " + name, was, is,
                     "status changed: " + it->second->value("reason", std::string())});
  }
  // A property added to parity since the baseline was stored is a difference
  // only when it FAILs: an upgrade must not break every stored baseline, and a
  // new PASS or SKIP regresses nothing the baseline held.
  for (const auto& [name, p] : now)
    if (!seen.count(name) && p->value("status", "?") == "FAIL")
      out.push_back({"property " + name, "missing", "FAIL",
                     "not in the baseline, and FAILs now: " + p->value("reason", std::string())});
}

void compare_metrics(const nlohmann::json& baseline, const nlohmann::json& current,
                     const Tolerances& tol, std::vector<BaselineDifference>& out) {
  using Key = std::pair<std::string, std::string>;
  auto key_of = [](const nlohmann::json& m) {
    return Key(m.value("metric", ""), m.value("label", ""));
  };
  std::map<Key, const nlohmann::json*> now;
  for (const nlohmann::json& m : array_at(current, "metrics")) now[key_of(m)] = &m;
  std::set<Key> seen;
  for (const nlohmann::json& m : array_at(baseline, "metrics")) {
    const Key key = key_of(m);
    seen.insert(key);
    const std::string what = "metric " + key.first + " " + key.second;
    const auto it = now.find(key);
    if (it == now.end()) {
      out.push_back(
          {what, text_of(m.value("value", nlohmann::json())), "missing", "not compared now"});
      continue;
    }
    // The value, then the single-rank reference it was compared with.
    for (const char* field : {"value", "reference"}) {
      const nlohmann::json was = m.value(field, nlohmann::json());
      const nlohmann::json is = it->second->value(field, nlohmann::json());
      double rel = 0;
      if (within(number_of(is), number_of(was), tol.metric, nullptr, &rel)) continue;
      out.push_back({what + (std::string(field) == "value" ? "" : " (reference)"), text_of(was),
                     text_of(is),
                     "rel " + short_number(rel) + " > " + tol.basis + " tolerance " +
                         short_number(tol.metric)});
    }
  }
  for (const auto& [key, m] : now)
    if (!seen.count(key))
      out.push_back({"metric " + key.first + " " + key.second, "missing",
                     text_of(m->value("value", nlohmann::json())), "not in the baseline"});
}

}  // namespace

std::vector<BaselineDifference> compare_with_baseline(const nlohmann::json& baseline_report,
                                                      const nlohmann::json& current_report) {
  std::vector<BaselineDifference> out;
  if (array_at(baseline_report, "properties").empty()) {
    out.push_back({"baseline", "no properties",
                   std::to_string(array_at(current_report, "properties").size()) + " properties",
                   "the baseline report compares nothing"});
    return out;
  }
  // The tolerance sharded_reduction applied to the current run (tolerance.h).
  Tolerances tol;
  try {
    tol = tolerances_for(run_config_from_json(current_report.at("scenario")));
  } catch (const std::exception& e) {
    out.push_back(
        {"scenario", "-", "unreadable", std::string("cannot tell the tolerance: ") + e.what()});
    return out;
  }
  compare_scenarios(baseline_report, current_report, out);
  compare_properties(baseline_report, current_report, out);
  compare_metrics(baseline_report, current_report, tol, out);
  return out;
}

std::vector<BaselineDifference> baseline_scenario_differences(const nlohmann::json& baseline_report,
                                                              const nlohmann::json& scenario) {
  std::vector<BaselineDifference> out;
  compare_scenarios(baseline_report, nlohmann::json{{"scenario", scenario}}, out);
  return out;
}

std::string format_difference(const BaselineDifference& d) {
  return d.what + ": baseline " + d.baseline + " now " + d.current + " (" + d.reason + ")";
}

nlohmann::json read_baseline_report(const std::string& path) {
  std::string why;
  const std::optional<std::string> text = files::read_file(path, &why);
  if (!text) throw BaselineError(path + ": " + why + " (expected a parity check --report JSON)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string kind = files::describe_content(*text);
    if (kind != "a JSON object")
      throw BaselineError(path + ": " + kind + ", expected a parity check --report JSON");
    throw BaselineError(path + ": invalid JSON at byte " + std::to_string(e.byte));
  }
  if (!j.is_object() || j.value("schema", "") != "parity-check-report")
    throw BaselineError(path +
                        ": not a parity check report (\"schema\" is not \"parity-check-report\")");
  if (!j.contains("properties") || !j["properties"].is_array())
    throw BaselineError(path + ": \"properties\": expected an array");
  if (!j.contains("metrics") || !j["metrics"].is_array())
    throw BaselineError(path + ": \"metrics\": expected an array");
  if (!j.contains("scenario") || !j["scenario"].is_object())
    throw BaselineError(path + ": \"scenario\": expected an object");
  return j;
}

}  // namespace parity::checks
