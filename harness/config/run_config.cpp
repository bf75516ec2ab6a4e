#include "harness/config/run_config.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/metrics/metric_names.h"
#include "harness/config/launch_mapping.h"

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
constexpr EnumNames<GraphOption, 3> kGraphs{{{GraphOption::none, "none"},
                                           {GraphOption::per_layer, "per-layer"},
                                           {GraphOption::full_iteration, "full-iteration"}}};
constexpr EnumNames<RecomputeOption, 4> kRecompute{{{RecomputeOption::none, "none"},
                                                  {RecomputeOption::full_uniform, "full-uniform"},
                                                  {RecomputeOption::full_block, "full-block"},
                                                  {RecomputeOption::selective, "selective"}}};

constexpr EnumNames<RuntimeGatherOption, 3> kRuntimeGather{{{RuntimeGatherOption::unset, "unset"},
                                                           {RuntimeGatherOption::on, "on"},
                                                           {RuntimeGatherOption::off, "off"}}};

std::string str(long long v) { return std::to_string(v); }
std::string str(int v) { return std::to_string(v); }

std::string str(double v) {
  std::ostringstream os;
  os.precision(std::numeric_limits<double>::max_digits10);
  os << v;
  // Prefer the short spelling when it round-trips.
  std::ostringstream shorter;
  shorter << v;
  return std::stod(shorter.str()) == v ? shorter.str() : os.str();
}

}  // namespace

std::string_view to_string(LaunchMode v) { return kLaunch.name(v); }
std::string_view to_string(DType v) { return kDType.name(v); }
std::string_view to_string(NormOption v) { return kNorm.name(v); }
std::string_view to_string(ActivationOption v) { return kActivation.name(v); }
std::string_view to_string(GraphOption v) { return kGraphs.name(v); }
std::string_view to_string(RecomputeOption v) { return kRecompute.name(v); }
std::string_view to_string(RuntimeGatherOption v) { return kRuntimeGather.name(v); }
std::optional<LaunchMode> parse_launch_mode(std::string_view s) { return kLaunch.parse(s); }
std::optional<DType> parse_dtype(std::string_view s) { return kDType.parse(s); }
std::optional<NormOption> parse_norm(std::string_view s) { return kNorm.parse(s); }
std::optional<ActivationOption> parse_activation(std::string_view s) { return kActivation.parse(s); }
std::optional<GraphOption> parse_graph_mode(std::string_view s) { return kGraphs.parse(s); }
std::optional<RuntimeGatherOption> parse_runtime_gather(std::string_view s) {
  return kRuntimeGather.parse(s);
}
std::string known_launch_modes() { return kLaunch.known(); }
std::string known_dtypes() { return kDType.known(); }
std::string known_norms() { return kNorm.known(); }
std::string known_activations() { return kActivation.known(); }
std::string known_graph_modes() { return kGraphs.known(); }
std::string known_runtime_gathers() { return kRuntimeGather.known(); }

bool RecomputeSpec::has(std::string_view module) const {
  for (const std::string& m : modules)
    if (m == module) return true;
  return false;
}

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
      return fail("unknown recompute mode (known: none, full-uniform, full-block, "
                  "selective:<modules> with modules core_attn, layernorm, mlp)");
    out.kind = *kind;
    return out;
  }
  out.kind = RecomputeOption::selective;
  std::string_view rest = spec.substr(kSelective.size());
  if (rest.empty()) return fail("selective recompute needs at least one module (core_attn, layernorm, mlp)");
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string module(rest.substr(0, comma));
    bool known = false;
    for (std::string_view k : kRecomputeModules) known = known || k == module;
    if (!known)
      return fail("unknown recompute module \"" + module + "\" (known: core_attn, layernorm, mlp)");
    if (out.has(module)) return fail("recompute module \"" + module + "\" is listed twice");
    out.modules.push_back(module);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

RecomputeSpec RunConfig::recompute_spec() const {
  std::string why;
  std::optional<RecomputeSpec> spec = parse_recompute(recompute, &why);
  if (!spec) throw std::invalid_argument("--recompute " + recompute + ": " + why);
  return *spec;
}

bool operator==(const RunConfig& a, const RunConfig& b) {
  return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && a.sp == b.sp && a.launch == b.launch &&
         a.seed == b.seed && a.timeout == b.timeout && a.report == b.report &&
         a.inject == b.inject && a.check_collectives == b.check_collectives &&
         a.hidden == b.hidden && a.heads == b.heads && a.ffn_hidden == b.ffn_hidden &&
         a.layers == b.layers && a.seq == b.seq && a.micro_batch == b.micro_batch &&
         a.microbatches == b.microbatches && a.steps == b.steps && a.vocab == b.vocab &&
         a.dtype == b.dtype && a.fp32_residual == b.fp32_residual && a.dropout == b.dropout &&
         a.norm == b.norm && a.activation == b.activation && a.recompute == b.recompute &&
         a.recompute_layers == b.recompute_layers && a.graphs == b.graphs &&
         a.graph_warmup == b.graph_warmup && a.trace == b.trace &&
         a.gather_output == b.gather_output &&
         a.runtime_gather_output == b.runtime_gather_output && a.lr == b.lr && a.metrics == b.metrics;
}

// ---------------------------------------------------------------- validation

inline constexpr int kMaxWorldSize = 64;

std::vector<ConfigViolation> validate_run_config(const RunConfig& c) {
  using K = ConfigViolation::Kind;
  std::vector<ConfigViolation> out;
  auto add = [&](std::string field, std::string value, std::string rule, K kind = K::number) {
    out.push_back({std::move(field), std::move(value), std::move(rule), kind});
  };
  auto at_least = [&](const char* field, long long v, long long min) {
    if (v < min) {
      add(field, str(v), "must be >= " + str(min));
      return false;
    }
    return true;
  };

  // Parallel sizes.
  bool sizes_ok = true;
  sizes_ok &= at_least("tp", c.tp, 1);
  sizes_ok &= at_least("cp", c.cp, 1);
  sizes_ok &= at_least("dp", c.dp, 1);
  const long long world = sizes_ok ? static_cast<long long>(c.tp) * c.cp * c.dp : 0;
  if (sizes_ok && world > kMaxWorldSize)
    add("dp", str(c.dp),
        "world size tp*cp*dp = " + str(c.tp) + "*" + str(c.cp) + "*" + str(c.dp) + " = " +
            str(world) + " exceeds the maximum of " + str(kMaxWorldSize));

  // Model sizes.
  bool model_ok = true;
  model_ok &= at_least("hidden", c.hidden, 1);
  model_ok &= at_least("heads", c.heads, 1);
  model_ok &= at_least("ffn-hidden", c.ffn_hidden, 1);
  model_ok &= at_least("layers", c.layers, 1);
  model_ok &= at_least("seq", c.seq, 1);
  at_least("micro-batch", c.micro_batch, 1);
  at_least("microbatches", c.microbatches, 1);
  at_least("steps", c.steps, 1);
  model_ok &= at_least("vocab", c.vocab, 1);

  if (c.hidden >= 1 && c.heads >= 1 && c.hidden % c.heads != 0)
    add("heads", str(c.heads),
        "hidden size " + str(c.hidden) + " is not divisible by the number of heads " +
            str(c.heads));

  // Tensor parallelism splits heads, the ffn, the vocab and the hidden size.
  if (c.tp > 1) {
    auto divisible = [&](const char* what, int v) {
      if (v >= 1 && v % c.tp != 0)
        add("tp", str(c.tp), std::string(what) + " " + str(v) + " is not divisible by " + str(c.tp));
    };
    divisible("hidden size", c.hidden);
    divisible("number of heads", c.heads);
    divisible("ffn hidden size", c.ffn_hidden);
    divisible("vocab size", c.vocab);
  }

  if (c.sp && c.tp == 1)
    add("sp", "true", "sequence parallelism requires tp > 1 (tp = 1)", K::flag);

  // Sequence layout: CP holds 2 of 2*cp load-balanced chunks; SP splits the
  // sequence over TP; with both, every chunk is split over TP.
  if (c.seq >= 1 && sizes_ok) {
    const bool cp_split = c.cp > 1;
    const bool sp_split = c.sp && c.tp > 1;
    if (cp_split && sp_split) {
      const long long d = 2LL * c.cp * c.tp;
      if (c.seq % d != 0)
        add("seq", str(c.seq),
            "sequence length " + str(c.seq) + " is not divisible by 2*cp*tp = " + str(d) +
                " (context-parallel load-balanced chunks, each split over tp by sequence "
                "parallelism)");
    } else if (cp_split) {
      const long long d = 2LL * c.cp;
      if (c.seq % d != 0)
        add("seq", str(c.seq),
            "sequence length " + str(c.seq) + " is not divisible by 2*cp = " + str(d) +
                " (context-parallel load-balanced layout)");
    } else if (sp_split && c.seq % c.tp != 0) {
      add("seq", str(c.seq),
          "sequence length " + str(c.seq) + " is not divisible by tp = " + str(c.tp) +
              " (sequence parallelism)");
    }
  }
  // Global batch = micro-batch * microbatches * dp: microbatches counts per DP
  // rank, so it is divisible by dp by construction (sizes >= 1 checked above).

  // Numerics.
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    add("dropout", str(c.dropout), "must be in [0, 1)");
  if (!(c.lr >= 0.0) || !std::isfinite(c.lr))
    add("lr", str(c.lr), "must be a finite number >= 0");
  if (!(c.timeout > 0.0) || !std::isfinite(c.timeout))
    add("timeout", str(c.timeout), "must be > 0 seconds");
  else if (c.timeout > 24 * 3600.0)
    add("timeout", str(c.timeout), "must be at most 86400 seconds");

  // Recompute.
  std::string why;
  const std::optional<RecomputeSpec> rc = parse_recompute(c.recompute, &why);
  if (!rc) {
    add("recompute", c.recompute, why, K::text);
  } else if ((rc->kind == RecomputeOption::full_uniform || rc->kind == RecomputeOption::full_block) &&
             model_ok && (c.recompute_layers < 1 || c.recompute_layers > c.layers)) {
    add("recompute-layers", str(c.recompute_layers),
        "must be in [1, " + str(c.layers) + "] (the number of layers) with --recompute " +
            c.recompute);
  } else if (rc->kind == RecomputeOption::full_uniform && model_ok &&
             c.layers % c.recompute_layers != 0) {
    add("recompute-layers", str(c.recompute_layers),
        "must divide the number of layers " + str(c.layers) +
            " with --recompute full-uniform (chunks of equal size)");
  }

  if (c.graph_warmup < 0) add("graph-warmup", str(c.graph_warmup), "must be >= 0");
  if (rc && (rc->kind == RecomputeOption::full_uniform || rc->kind == RecomputeOption::full_block) &&
      c.graphs == GraphOption::per_layer)
    add("recompute", c.recompute,
        "full recompute cannot be combined with per-layer graphs (as in Megatron: "
        "\"recompute_granularity must not be full when CUDA Graphs are enabled\"); use selective",
        K::text);

  // Metrics: known names; no forward metric under full-iteration graphs
  // (contract.md section 3: replays observe nothing).
  if (!c.metrics.empty()) {
    std::string joined;
    for (const std::string& m : c.metrics) joined += (joined.empty() ? "" : ",") + m;
    try {
      parse_metric_names(c.metrics);
      if (c.graphs == GraphOption::full_iteration)
        add("metrics", joined,
            "forward metrics cannot be collected under full-iteration graphs (replays observe "
            "nothing; contract.md section 3): use --graphs none or per-layer",
            K::text);
    } catch (const std::invalid_argument& e) {
      std::string why = e.what();
      const std::string prefix = "--metrics: ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      add("metrics", joined, why, K::text);
    }
  }

  // Faults: known names, ranks inside the world.
  if (sizes_ok) {
    for (ConfigViolation& v : validate_faults(c.inject, static_cast<int>(world)))
      out.push_back(std::move(v));
  }
  return out;
}

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
  nlohmann::json j;
  j["tp"] = c.tp;
  j["cp"] = c.cp;
  j["dp"] = c.dp;
  j["sp"] = c.sp;
  j["launch"] = to_string(c.launch);
  j["seed"] = c.seed;
  j["timeout"] = c.timeout;
  j["report"] = c.report;
  j["inject"] = c.inject;
  j["check-collectives"] = c.check_collectives;
  j["hidden"] = c.hidden;
  j["heads"] = c.heads;
  j["ffn-hidden"] = c.ffn_hidden;
  j["layers"] = c.layers;
  j["seq"] = c.seq;
  j["micro-batch"] = c.micro_batch;
  j["microbatches"] = c.microbatches;
  j["steps"] = c.steps;
  j["vocab"] = c.vocab;
  j["dtype"] = to_string(c.dtype);
  j["fp32-residual"] = c.fp32_residual;
  j["dropout"] = c.dropout;
  j["norm"] = to_string(c.norm);
  j["activation"] = to_string(c.activation);
  j["recompute"] = c.recompute;
  j["recompute-layers"] = c.recompute_layers;
  j["graphs"] = to_string(c.graphs);
  j["graph-warmup"] = c.graph_warmup;
  j["trace"] = c.trace;
  j["gather-output"] = c.gather_output;
  j["runtime-gather-output"] = to_string(c.runtime_gather_output);
  j["lr"] = c.lr;
  j["metrics"] = c.metrics;
  return j;
}

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = {
      "tp", "cp", "dp", "sp", "launch", "seed", "timeout", "report", "inject",
      "check-collectives", "hidden", "heads", "ffn-hidden", "layers", "seq", "micro-batch",
      "microbatches", "steps", "vocab", "dtype", "fp32-residual", "dropout", "norm",
      "activation", "recompute", "recompute-layers", "graphs", "graph-warmup", "trace",
      "gather-output", "runtime-gather-output", "lr", "metrics"};
  return keys;
}

namespace {

[[noreturn]] void type_error(const std::string& key, const nlohmann::json& v, const char* expected) {
  throw ConfigParseError("\"" + key + "\" = " + v.dump() + ": expected " + expected);
}

int get_int(const std::string& key, const nlohmann::json& v) {
  if (!v.is_number_integer()) type_error(key, v, "an integer");
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
      type_error(key, v, "an integer that fits in 32 bits");
    return static_cast<int>(u);
  }
  const auto i = v.get<std::int64_t>();
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
    type_error(key, v, "an integer that fits in 32 bits");
  return static_cast<int>(i);
}

bool get_bool(const std::string& key, const nlohmann::json& v) {
  if (!v.is_boolean()) type_error(key, v, "true or false");
  return v.get<bool>();
}

double get_double(const std::string& key, const nlohmann::json& v) {
  if (!v.is_number()) type_error(key, v, "a number");
  return v.get<double>();
}

std::string get_string(const std::string& key, const nlohmann::json& v) {
  if (!v.is_string()) type_error(key, v, "a string");
  return v.get<std::string>();
}

template <typename E>
E get_enum(const std::string& key, const nlohmann::json& v, std::optional<E> (*parse)(std::string_view),
           const std::string& known) {
  if (!v.is_string()) type_error(key, v, ("one of " + known).c_str());
  const std::optional<E> e = parse(v.get<std::string>());
  if (!e) throw ConfigParseError("\"" + key + "\" = " + v.dump() + ": expected one of " + known);
  return *e;
}

}  // namespace

RunConfig run_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigParseError("expected a JSON object of run options, got " + j.dump());
  RunConfig c;
  for (const auto& [key, v] : j.items()) {
    if (key == "tp") c.tp = get_int(key, v);
    else if (key == "cp") c.cp = get_int(key, v);
    else if (key == "dp") c.dp = get_int(key, v);
    else if (key == "sp") c.sp = get_bool(key, v);
    else if (key == "launch") c.launch = get_enum<LaunchMode>(key, v, parse_launch_mode, known_launch_modes());
    else if (key == "seed") {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
        type_error(key, v, "a non-negative integer");
      c.seed = v.get<std::uint64_t>();
    } else if (key == "timeout") c.timeout = get_double(key, v);
    else if (key == "report") c.report = get_string(key, v);
    else if (key == "inject") {
      if (!v.is_array()) type_error(key, v, "an array of strings");
      c.inject.clear();
      for (const auto& e : v) {
        if (!e.is_string()) type_error(key, v, "an array of strings");
        c.inject.push_back(e.get<std::string>());
      }
    } else if (key == "check-collectives") c.check_collectives = get_bool(key, v);
    else if (key == "hidden") c.hidden = get_int(key, v);
    else if (key == "heads") c.heads = get_int(key, v);
    else if (key == "ffn-hidden") c.ffn_hidden = get_int(key, v);
    else if (key == "layers") c.layers = get_int(key, v);
    else if (key == "seq") c.seq = get_int(key, v);
    else if (key == "micro-batch") c.micro_batch = get_int(key, v);
    else if (key == "microbatches") c.microbatches = get_int(key, v);
    else if (key == "steps") c.steps = get_int(key, v);
    else if (key == "vocab") c.vocab = get_int(key, v);
    else if (key == "dtype") c.dtype = get_enum<DType>(key, v, parse_dtype, known_dtypes());
    else if (key == "fp32-residual") c.fp32_residual = get_bool(key, v);
    else if (key == "dropout") c.dropout = get_double(key, v);
    else if (key == "norm") c.norm = get_enum<NormOption>(key, v, parse_norm, known_norms());
    else if (key == "activation")
      c.activation = get_enum<ActivationOption>(key, v, parse_activation, known_activations());
    else if (key == "recompute") c.recompute = get_string(key, v);
    else if (key == "recompute-layers") c.recompute_layers = get_int(key, v);
    else if (key == "graphs") c.graphs = get_enum<GraphOption>(key, v, parse_graph_mode, known_graph_modes());
    else if (key == "graph-warmup") c.graph_warmup = get_int(key, v);
    else if (key == "trace") c.trace = get_string(key, v);
    else if (key == "gather-output") c.gather_output = get_bool(key, v);
    else if (key == "runtime-gather-output")
      c.runtime_gather_output = get_enum<RuntimeGatherOption>(key, v, parse_runtime_gather,
                                                             known_runtime_gathers());
    else if (key == "lr") c.lr = get_double(key, v);
    else if (key == "metrics") {
      if (!v.is_array()) type_error(key, v, "an array of metric names");
      c.metrics.clear();
      for (const auto& e : v) {
        if (!e.is_string()) type_error(key, v, "an array of metric names");
        c.metrics.push_back(e.get<std::string>());
      }
    }
    else {
      std::string known;
      for (const std::string& k : run_config_keys()) known += (known.empty() ? "" : ", ") + k;
      throw ConfigParseError("unknown key \"" + key + "\" (known: " + known + ")");
    }
  }
  return c;
}

}  // namespace parity
