#include "harness/model/model_config.h"

#include <cmath>
#include <sstream>

namespace parity {

std::string_view to_string(ModelDType d) {
  switch (d) {
    case ModelDType::fp32: return "fp32";
    case ModelDType::fp64: return "fp64";
    case ModelDType::bf16: return "bf16";
  }
  return "?";
}
std::string_view to_string(NormKind n) {
  return n == NormKind::layer_norm ? "layernorm" : "rmsnorm";
}
std::string_view to_string(ActivationKind a) {
  return a == ActivationKind::gelu ? "gelu" : "swiglu";
}

std::string_view to_string(RecomputeKind r) {
  switch (r) {
    case RecomputeKind::none: return "none";
    case RecomputeKind::full_uniform: return "full-uniform";
    case RecomputeKind::full_block: return "full-block";
    case RecomputeKind::selective: return "selective";
  }
  return "?";
}
std::string_view to_string(GraphMode g) {
  switch (g) {
    case GraphMode::none: return "none";
    case GraphMode::per_layer: return "per-layer";
    case GraphMode::full_iteration: return "full-iteration";
  }
  return "?";
}
std::string to_string(RecomputeModules m) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ",";
    out += name;
  };
  add(m.core_attn, "core_attn");
  add(m.layernorm, "layernorm");
  add(m.mlp, "mlp");
  return out;
}
RecomputeModules parse_recompute_modules(std::string_view list) {
  RecomputeModules m;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item == "core_attn") {
      m.core_attn = true;
    } else if (item == "layernorm") {
      m.layernorm = true;
    } else if (item == "mlp") {
      m.mlp = true;
    } else {
      throw ModelConfigError("recompute_modules", std::string(item),
                             "unknown module (known: core_attn, layernorm, mlp)");
    }
  }
  return m;
}

ModelConfigError::ModelConfigError(const std::string& field, const std::string& value,
                                   const std::string& rule)
    : std::invalid_argument("model config: " + field + " = " + value + ": " + rule),
      field_(field) {}

namespace {
template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
void require(bool ok, const char* field, const std::string& value, const std::string& rule) {
  if (!ok) throw ModelConfigError(field, value, rule);
}
}  // namespace

void ModelConfig::validate(int tp, int cp, int dp) const {
  require(tp >= 1, "tp", str(tp), "must be >= 1");
  require(cp >= 1, "cp", str(cp), "must be >= 1");
  require(dp >= 1, "dp", str(dp), "must be >= 1");
  require(hidden >= 1, "hidden", str(hidden), "must be >= 1");
  require(heads >= 1, "heads", str(heads), "must be >= 1");
  require(hidden % heads == 0, "hidden", str(hidden),
          "must be divisible by heads (" + str(heads) + ")");
  require(heads % tp == 0, "heads", str(heads), "must be divisible by tp (" + str(tp) + ")");
  require(ffn_hidden >= 1, "ffn_hidden", str(ffn_hidden), "must be >= 1");
  require(ffn_hidden % tp == 0, "ffn_hidden", str(ffn_hidden),
          "must be divisible by tp (" + str(tp) + ")");
  require(layers >= 1, "layers", str(layers), "must be >= 1");
  require(vocab >= 1, "vocab", str(vocab), "must be >= 1");
  require(vocab % tp == 0, "vocab", str(vocab), "must be divisible by tp (" + str(tp) + ")");
  require(micro_batch >= 1, "micro_batch", str(micro_batch), "must be >= 1");
  require(seq >= 1, "seq", str(seq), "must be >= 1");
  require(seq % (2 * cp) == 0 || cp == 1, "seq", str(seq),
          "must be divisible by 2*cp (" + str(2 * cp) + ")");
  require(!sequence_parallel || tp > 1, "sequence_parallel", "true", "needs tp > 1 (tp = 1)");
  if (sequence_parallel) {
    require((seq / cp) % tp == 0, "seq", str(seq),
            "must be divisible by cp*tp (" + str(cp * tp) + ") under sequence parallel");
  }
  require(dropout >= 0.0 && dropout < 1.0, "dropout", str(dropout), "must be in [0, 1)");
  require(norm_eps > 0.0, "norm_eps", str(norm_eps), "must be > 0");
  require(init_std > 0.0 && std::isfinite(init_std), "init_std", str(init_std), "must be > 0");
  const bool full = recompute == RecomputeKind::full_uniform || recompute == RecomputeKind::full_block;
  if (full) {
    require(recompute_layers >= 1, "recompute_layers", str(recompute_layers),
            "must be >= 1 under recompute " + std::string(to_string(recompute)));
    require(recompute_layers <= layers, "recompute_layers", str(recompute_layers),
            "must be <= layers (" + str(layers) + ")");
  }
  if (recompute == RecomputeKind::full_uniform) {
    require(layers % recompute_layers == 0, "recompute_layers", str(recompute_layers),
            "must divide layers (" + str(layers) + ") under full-uniform recompute");
  }
  if (recompute == RecomputeKind::selective) {
    require(!recompute_modules.empty(), "recompute_modules", "(empty)",
            "selective recompute needs at least one of core_attn, layernorm, mlp");
  }
  require(graph_warmup >= 0, "graph_warmup", str(graph_warmup), "must be >= 0");
  // Megatron: "recompute_granularity must not be full when CUDA Graphs are enabled"
  // (per-layer graphs; the checkpoint would wrap the graphed layers).
  require(!(full && graphs == GraphMode::per_layer), "recompute", std::string(to_string(recompute)),
          "full recompute cannot be combined with per-layer graphs (use selective)");
}

}  // namespace parity
