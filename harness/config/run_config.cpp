#include "harness/config/run_config.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/check.h"
#include "harness/config/run_config_fields.h"

namespace parity {

bool RecomputeSpec::has(std::string_view module) const {
  for (const std::string& m : modules)
    if (m == module) return true;
  return false;
}

namespace {
std::string known_recompute_modules() {
  std::string s;
  for (std::string_view m : kRecomputeModules) s += (s.empty() ? "" : ", ") + std::string(m);
  return s;
}
}  // namespace

std::optional<RecomputeSpec> parse_recompute(std::string_view spec, std::string* why) {
  auto fail = [&](std::string rule) -> std::optional<RecomputeSpec> {
    if (why) *why = std::move(rule);
    return std::nullopt;
  };
  RecomputeSpec out;
  constexpr std::string_view kSelective = "selective:";
  if (spec.substr(0, kSelective.size()) != kSelective) {
    const std::optional<RecomputeKind> kind = parse_option<RecomputeKind>(spec);
    if (!kind || *kind == RecomputeKind::selective)
      return fail(
          "unknown recompute mode (known: none, full-uniform, full-block, "
          "selective:<modules> with modules " +
          known_recompute_modules() + ")");
    out.kind = *kind;
    return out;
  }
  out.kind = RecomputeKind::selective;
  std::string_view rest = spec.substr(kSelective.size());
  if (rest.empty())
    return fail("selective recompute needs at least one module (" + known_recompute_modules() +
                ")");
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string module(rest.substr(0, comma));
    bool known = false;
    for (std::string_view k : kRecomputeModules) known = known || k == module;
    if (!known)
      return fail("unknown recompute module \"" + module +
                  "\" (known: " + known_recompute_modules() + ")");
    if (out.has(module)) return fail("recompute module \"" + module + "\" is listed twice");
    out.modules.push_back(module);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

void RunConfig::clear_pipeline() {
  pp = vpp = 1;
  pp_first_layers = pp_last_layers = 0;
  pp_account_embedding = pp_account_loss = false;
  pp_layout.clear();
}

RecomputeSpec RunConfig::recompute_spec() const {
  std::string why;
  std::optional<RecomputeSpec> spec = parse_recompute(recompute, &why);
  PARITY_CHECK(spec, "--recompute " + recompute + ": " + why);
  return *spec;
}

bool operator==(const RunConfig& a, const RunConfig& b) {
  for (const RunConfigField& f : run_config_fields())
    if (f.get(a) != f.get(b)) return false;
  return true;
}

// ---------------------------------------------------------------- messages

namespace {
std::string cli_flag(const ConfigViolation& v) {
  switch (v.kind) {
    case ConfigViolation::Kind::flag:
      return "--" + v.field;
    case ConfigViolation::Kind::env:
      return v.value.empty() ? v.field : v.field + "=" + v.value;
    default:
      return "--" + v.field + " " + v.value;
  }
}
}  // namespace

std::string format_for_cli(const ConfigViolation& v) { return cli_flag(v) + ": " + v.rule; }

std::string format_for_file(const ConfigViolation& v, std::string_view source) {
  std::string value = v.value;
  if (v.kind == ConfigViolation::Kind::text) value = nlohmann::json(v.value).dump();
  if (v.kind == ConfigViolation::Kind::env)
    return std::string(source) + ": " + cli_flag(v) + ": " + v.rule;
  return std::string(source) + ": \"" + v.field + "\" = " + value + ": " + v.rule;
}

namespace {
std::string join_cli(const std::vector<ConfigViolation>& v) {
  std::string out;
  for (const ConfigViolation& x : v) {
    if (!out.empty()) out += "\n";
    out += format_for_cli(x);
  }
  return out;
}
}  // namespace

ConfigError::ConfigError(std::vector<ConfigViolation> violations)
    : std::runtime_error(join_cli(violations)), violations_(std::move(violations)) {}

// ---------------------------------------------------------------- JSON

nlohmann::json to_json(const RunConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const RunConfigField& f : run_config_fields()) j[std::string(f.key)] = f.get(c);
  return j;
}

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const RunConfigField& f : run_config_fields()) k.emplace_back(f.key);
    return k;
  }();
  return keys;
}

RunConfig run_config_from_json(const nlohmann::json& j) {
  if (!j.is_object())
    throw ConfigParseError("expected a JSON object of run options, got " + j.dump());
  RunConfig c;
  for (const auto& [key, v] : j.items()) {
    const RunConfigField* f = find_run_config_field(key);
    if (!f) throw ConfigParseError(unknown_run_config_key(key));
    f->set(c, v);
  }
  return c;
}

}  // namespace parity
