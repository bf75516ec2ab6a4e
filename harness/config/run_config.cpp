#include "harness/config/run_config.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/config/run_config_fields.h"

namespace parity {
namespace {

template <typename E, std::size_t N>
struct EnumNames {
  std::pair<E, std::string_view> entries[N];
  std::string_view name(E v) const {
    for (const auto& [e, s] : entries)
      if (e == v) return s;
    return "?";
  }
  std::optional<E> parse(std::string_view s) const {
    for (const auto& [e, n] : entries)
      if (n == s) return e;
    return std::nullopt;
  }
  std::string known() const {
    std::string out;
    for (const auto& [e, n] : entries) {
      if (!out.empty()) out += ", ";
      out += n;
    }
    return out;
  }
};

constexpr EnumNames<LaunchMode, 3> kLaunch{{{LaunchMode::threads, "threads"},
                                            {LaunchMode::processes, "processes"},
                                            {LaunchMode::env, "env"}}};
constexpr EnumNames<DType, 3> kDType{
    {{DType::fp32, "fp32"}, {DType::fp64, "fp64"}, {DType::bf16, "bf16"}}};
constexpr EnumNames<NormOption, 2> kNorm{
    {{NormOption::layernorm, "layernorm"}, {NormOption::rmsnorm, "rmsnorm"}}};
constexpr EnumNames<ActivationOption, 2> kActivation{
    {{ActivationOption::gelu, "gelu"}, {ActivationOption::swiglu, "swiglu"}}};
constexpr EnumNames<PositionEmbeddingOption, 2> kPositionEmbedding{
    {{PositionEmbeddingOption::learned, "learned"}, {PositionEmbeddingOption::rope, "rope"}}};
constexpr EnumNames<GraphOption, 3> kGraphs{{{GraphOption::none, "none"},
                                           {GraphOption::per_layer, "per-layer"},
                                           {GraphOption::full_iteration, "full-iteration"}}};
constexpr EnumNames<RecomputeOption, 4> kRecompute{{{RecomputeOption::none, "none"},
                                                  {RecomputeOption::full_uniform, "full-uniform"},
                                                  {RecomputeOption::full_block, "full-block"},
                                                  {RecomputeOption::selective, "selective"}}};

constexpr EnumNames<RouterScoreOption, 3> kRouterScore{
    {{RouterScoreOption::softmax, "softmax"},
     {RouterScoreOption::sigmoid, "sigmoid"},
     {RouterScoreOption::sqrt_softplus, "sqrt-softplus"}}};
constexpr EnumNames<ForceRoutingOption, 3> kForceRouting{{{ForceRoutingOption::none, "none"},
                                                          {ForceRoutingOption::random, "random"},
                                                          {ForceRoutingOption::biased, "biased"}}};
constexpr EnumNames<OptimizerOption, 2> kOptimizer{
    {{OptimizerOption::sgd, "sgd"}, {OptimizerOption::adam, "adam"}}};
constexpr EnumNames<RuntimeGatherOption, 3> kRuntimeGather{{{RuntimeGatherOption::unset, "unset"},
                                                           {RuntimeGatherOption::on, "on"},
                                                           {RuntimeGatherOption::off, "off"}}};

}  // namespace

std::string_view to_string(LaunchMode v) { return kLaunch.name(v); }
std::string_view to_string(DType v) { return kDType.name(v); }
std::string_view to_string(NormOption v) { return kNorm.name(v); }
std::string_view to_string(ActivationOption v) { return kActivation.name(v); }
std::string_view to_string(PositionEmbeddingOption v) { return kPositionEmbedding.name(v); }
std::string_view to_string(GraphOption v) { return kGraphs.name(v); }
std::string_view to_string(RecomputeOption v) { return kRecompute.name(v); }
std::string_view to_string(RuntimeGatherOption v) { return kRuntimeGather.name(v); }
std::string_view to_string(RouterScoreOption v) { return kRouterScore.name(v); }
std::string_view to_string(ForceRoutingOption v) { return kForceRouting.name(v); }
std::string_view to_string(OptimizerOption v) { return kOptimizer.name(v); }
std::optional<OptimizerOption> parse_optimizer(std::string_view s) { return kOptimizer.parse(s); }
std::string known_optimizers() { return kOptimizer.known(); }
std::optional<RouterScoreOption> parse_router_score(std::string_view s) {
  return kRouterScore.parse(s);
}
std::optional<ForceRoutingOption> parse_force_routing(std::string_view s) {
  return kForceRouting.parse(s);
}
std::string known_router_scores() { return kRouterScore.known(); }
std::string known_force_routings() { return kForceRouting.known(); }
std::optional<LaunchMode> parse_launch_mode(std::string_view s) { return kLaunch.parse(s); }
std::optional<DType> parse_dtype(std::string_view s) { return kDType.parse(s); }
std::optional<NormOption> parse_norm(std::string_view s) { return kNorm.parse(s); }
std::optional<ActivationOption> parse_activation(std::string_view s) { return kActivation.parse(s); }
std::optional<PositionEmbeddingOption> parse_position_embedding(std::string_view s) {
  return kPositionEmbedding.parse(s);
}
std::optional<GraphOption> parse_graph_mode(std::string_view s) { return kGraphs.parse(s); }
std::optional<RuntimeGatherOption> parse_runtime_gather(std::string_view s) {
  return kRuntimeGather.parse(s);
}
std::string known_launch_modes() { return kLaunch.known(); }
std::string known_dtypes() { return kDType.known(); }
std::string known_norms() { return kNorm.known(); }
std::string known_activations() { return kActivation.known(); }
std::string known_position_embeddings() { return kPositionEmbedding.known(); }
std::string known_graph_modes() { return kGraphs.known(); }
std::string known_runtime_gathers() { return kRuntimeGather.known(); }

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
    const std::optional<RecomputeOption> kind = kRecompute.parse(spec);
    if (!kind || *kind == RecomputeOption::selective)
      return fail(
          "unknown recompute mode (known: none, full-uniform, full-block, "
          "selective:<modules> with modules " +
          known_recompute_modules() + ")");
    out.kind = *kind;
    return out;
  }
  out.kind = RecomputeOption::selective;
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
  if (!spec) throw std::invalid_argument("--recompute " + recompute + ": " + why);
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
    case ConfigViolation::Kind::flag: return "--" + v.field;
    case ConfigViolation::Kind::env: return v.value.empty() ? v.field : v.field + "=" + v.value;
    default: return "--" + v.field + " " + v.value;
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
  if (!j.is_object()) throw ConfigParseError("expected a JSON object of run options, got " + j.dump());
  RunConfig c;
  for (const auto& [key, v] : j.items()) {
    const RunConfigField* f = find_run_config_field(key);
    if (!f) throw ConfigParseError(unknown_run_config_key(key));
    f->set(c, v);
  }
  return c;
}

}  // namespace parity
