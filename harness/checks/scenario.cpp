#include "harness/checks/scenario.h"

#include "harness/base/file_kind.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "harness/base/nearest_names.h"
#include "harness/checks/property.h"
#include "harness/metrics/metric_names.h"

namespace parity::checks {

std::vector<std::string> default_check_metrics() {
  std::vector<std::string> out;
  for (const MetricSpec& s : known_metrics())
    if (s.name.rfind("layer-residual-", 0) == 0 || s.name.rfind("global-output-logits-", 0) == 0)
      out.push_back(s.name);
  return out;
}

RunConfig default_check_scenario() {
  RunConfig c;
  c.tp = 2;
  c.cp = 2;
  c.dp = 2;
  c.sp = true;
  c.launch = LaunchMode::threads;
  c.layers = 2;
  c.steps = 2;
  c.recompute = "selective:core_attn,layernorm,mlp";
  c.graphs = GraphMode::per_layer;
  c.graph_warmup = 1;
  c.metrics = default_check_metrics();
  return c;
}

const std::vector<std::string>& check_property_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Property* p : registered_properties()) out.emplace_back(p->name());
    return out;
  }();
  return names;
}

namespace {

ScenarioMeta take_meta(const std::string& path, nlohmann::json& j) {
  ScenarioMeta meta;
  if (auto it = j.find("about"); it != j.end()) {
    meta.about = *it;
    j.erase(it);
  }
  auto it = j.find("expect");
  if (it == j.end()) return meta;
  if (!it->is_object())
    throw ScenarioError(path + ": \"expect\" = " + it->dump() +
                        ": expected an object of property -> \"PASS\" | \"FAIL\" | \"SKIP\"");
  const std::vector<std::string>& known = check_property_names();
  for (const auto& [name, value] : it->items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      const std::string nearest = did_you_mean(name, known);
      throw ScenarioError(path + ": \"expect\".\"" + name + "\": unknown property" +
                          (nearest.empty() ? "" : ": " + nearest) + " (known: " + list + ")");
    }
    const std::string v = value.is_string() ? value.get<std::string>() : "";
    if (v != "PASS" && v != "FAIL" && v != "SKIP")
      throw ScenarioError(path + ": \"expect\".\"" + name + "\" = " + value.dump() +
                          ": expected \"PASS\", \"FAIL\" or \"SKIP\"");
    meta.expect[name] = v;
  }
  j.erase(it);
  return meta;
}

}  // namespace

nlohmann::json scenario_file_json(const RunConfig& config, const ScenarioMeta& meta) {
  nlohmann::json j = to_json(config);
  if (!meta.about.is_null()) j["about"] = meta.about;
  if (!meta.expect.empty()) j["expect"] = meta.expect;
  return j;
}

nlohmann::json read_scenario_file(const std::string& path, ScenarioMeta* meta) {
  std::string why;
  const std::optional<std::string> text = files::read_file(path, &why);
  if (!text) throw ScenarioError(path + ": " + why + " (expected a JSON scenario file)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string kind = files::describe_content(*text);
    if (kind != "a JSON object" && kind.rfind("JSON", 0) != 0)
      throw ScenarioError(path + ": " + kind + ", expected a JSON scenario file");
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> after the id.
    const std::size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
    throw ScenarioError(path + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + what);
  }
  if (!j.is_object())
    throw ScenarioError(path + ": expected a JSON object of run options, got " +
                        std::string(j.type_name()));
  ScenarioMeta m = take_meta(path, j);
  if (meta) *meta = std::move(m);
  return j;
}

}  // namespace parity::checks
