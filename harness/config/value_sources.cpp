#include "harness/config/value_sources.h"

#include <nlohmann/json.hpp>

#include "harness/config/run_config_fields.h"

namespace parity {

ValueSource ValueSources::of(const std::string& key) const {
  const auto it = by_key_.find(key);
  return it == by_key_.end() ? ValueSource{} : it->second;
}

void ValueSources::set_differing(const RunConfig& config, const ValueSource& source) {
  const RunConfig defaults;
  for (const RunConfigField& f : run_config_fields())
    if (f.get(config) != f.get(defaults)) set(std::string(f.key), source);
}

void ValueSources::set_present(const nlohmann::json& scenario, const ValueSource& source) {
  for (const auto& [key, value] : scenario.items()) set(key, source);
}

namespace {

std::string origin_name(const ValueSource& s) {
  switch (s.origin) {
    case ValueOrigin::built_in_default:
      return "the built-in default";
    case ValueOrigin::embedded_default:
      return "the embedded default";
    case ValueOrigin::scenario_file:
      return s.file;
    case ValueOrigin::command_line:
      return "the command line";
  }
  return "?";
}

bool same(const ValueSource& a, const ValueSource& b) {
  return a.origin == b.origin && a.file == b.file;
}

// "--sp", "--no-sp", "--graphs per-layer".
std::string setting(const RunConfigField& f, const nlohmann::json& value) {
  const std::string key(f.key);
  if (f.type == FieldType::flag) return value.get<bool>() ? "--" + key : "--no-" + key;
  return "--" + key + " " + field_value_text(value);
}

// "pass --no-sp", "pass --graphs to override it".
std::string override_hint(const RunConfigField& f, const nlohmann::json& value) {
  const std::string key(f.key);
  if (f.type == FieldType::flag) return value.get<bool>() ? "pass --no-" + key : "pass --" + key;
  return "pass --" + key + " to override it";
}

}  // namespace

std::string describe_violation(const ConfigViolation& v, const ValueSources& sources,
                               const RunConfig& config) {
  const RunConfigField* field = find_run_config_field(v.field);
  const ValueSource primary = sources.of(v.field);
  if (!field || v.kind == ConfigViolation::Kind::env) return format_for_cli(v);
  const nlohmann::json values = to_json(config);
  std::string line = primary.origin == ValueOrigin::scenario_file ? format_for_file(v, primary.file)
                                                                  : format_for_cli(v);
  std::string notes;
  auto note = [&](const std::string& text) { notes += (notes.empty() ? "" : "; ") + text; };
  const std::string key(field->key);
  if (primary.origin == ValueOrigin::embedded_default) {
    note("the embedded default sets " + setting(*field, values[key]) + "; " +
         override_hint(*field, values[key]));
  } else if (primary.origin == ValueOrigin::built_in_default) {
    note("the built-in default sets " + setting(*field, values[key]) + "; " +
         override_hint(*field, values[key]));
  }
  // The other values the rule reads, when a scenario set them: a built-in
  // default there is already spelled out by the rule ("(tp = 1)").
  for (const std::string& other : v.involves) {
    const RunConfigField* f = find_run_config_field(other);
    const ValueSource s = sources.of(other);
    if (!f || same(s, primary)) continue;
    if (s.origin != ValueOrigin::embedded_default && s.origin != ValueOrigin::scenario_file)
      continue;
    note(origin_name(s) + " sets " + setting(*f, values[other]) + "; " +
         override_hint(*f, values[other]));
  }
  return notes.empty() ? line : line + " (" + notes + ")";
}

}  // namespace parity
