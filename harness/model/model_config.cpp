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
std::string_view to_string(PositionEmbeddingKind p) {
  return p == PositionEmbeddingKind::learned ? "learned" : "rope";
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
}  // namespace

std::vector<ModelConfigViolation> ModelConfig::violations(int tp, int cp, int dp) const {
  std::vector<ModelConfigViolation> out;
  auto add = [&](std::string field, std::string value, std::string rule,
                 std::vector<std::string> involves = {}) {
    out.push_back({std::move(field), std::move(value), std::move(rule), std::move(involves)});
  };
  auto at_least_one = [&](const char* field, long long v) {
    if (v < 1) add(field, str(v), "must be >= 1");
  };
  at_least_one("tp", tp);
  at_least_one("cp", cp);
  at_least_one("dp", dp);
  at_least_one("hidden", hidden);
  at_least_one("heads", heads);
  at_least_one("ffn_hidden", ffn_hidden);
  at_least_one("layers", layers);
  at_least_one("seq", seq);
  at_least_one("micro_batch", micro_batch);
  at_least_one("vocab", vocab);
  if (!out.empty()) return out;  // the rules below divide by these

  if (hidden % heads != 0)
    add("hidden", str(hidden), "must be divisible by heads (" + str(heads) + ")", {"heads"});
  // Tensor parallelism splits the heads (so the hidden size), the ffn and the vocab.
  auto divisible_by_tp = [&](const char* field, std::int64_t v) {
    if (v % tp != 0) add(field, str(v), "must be divisible by tp (" + str(tp) + ")", {"tp"});
  };
  divisible_by_tp("heads", heads);
  divisible_by_tp("ffn_hidden", ffn_hidden);
  divisible_by_tp("vocab", vocab);

  if (sequence_parallel && tp == 1)
    add("sequence_parallel", "true", "sequence parallelism requires tp > 1 (tp = 1)", {"tp"});
  // Sequence layout: CP holds 2 of 2*cp load-balanced chunks; SP splits each
  // CP rank's share of the sequence over TP.
  const std::vector<std::string> layout = {"cp", "tp", "sequence_parallel"};
  if (cp > 1 && seq % (2LL * cp) != 0) {
    add("seq", str(seq),
        "sequence length " + str(seq) + " is not divisible by 2*cp = " + str(2 * cp) +
            " (context-parallel load-balanced layout)",
        layout);
  } else if (sequence_parallel && tp > 1 && (seq / cp) % tp != 0) {
    add("seq", str(seq),
        "sequence length " + str(seq) + " is not divisible by " +
            (cp > 1 ? "cp*tp = " + str(cp * tp) : "tp = " + str(tp)) + " (sequence parallelism)",
        layout);
  }

  // Rotate-half pairs element i with element i + head_dim/2.
  if (position_embedding == PositionEmbeddingKind::rope && head_dim() % 2 != 0)
    add("position_embedding", "rope",
        "rotary embeddings need an even head dimension (hidden / heads = " + str(head_dim()) + ")",
        {"hidden", "heads"});
  if (position_embedding == PositionEmbeddingKind::rope &&
      (!(rotary_base > 0.0) || !std::isfinite(rotary_base)))
    add("rotary_base", str(rotary_base), "must be > 0");

  if (!(dropout >= 0.0 && dropout < 1.0)) add("dropout", str(dropout), "must be in [0, 1)");
  if (!(norm_eps > 0.0) || !std::isfinite(norm_eps)) add("norm_eps", str(norm_eps), "must be > 0");
  if (!(init_std > 0.0) || !std::isfinite(init_std)) add("init_std", str(init_std), "must be > 0");

  const bool full = recompute == RecomputeKind::full_uniform || recompute == RecomputeKind::full_block;
  const std::string mode(to_string(recompute));
  if (full && (recompute_layers < 1 || recompute_layers > layers)) {
    add("recompute_layers", str(recompute_layers),
        "must be in [1, " + str(layers) + "] (the number of layers) with recompute " + mode,
        {"layers", "recompute"});
  } else if (recompute == RecomputeKind::full_uniform && layers % recompute_layers != 0) {
    add("recompute_layers", str(recompute_layers),
        "must divide the number of layers " + str(layers) +
            " with recompute full-uniform (chunks of equal size)",
        {"layers", "recompute"});
  }
  if (recompute == RecomputeKind::selective && recompute_modules.empty())
    add("recompute_modules", "(empty)",
        "selective recompute needs at least one of core_attn, layernorm, mlp");
  if (graph_warmup < 0) add("graph_warmup", str(graph_warmup), "must be >= 0");
  // Megatron: "recompute_granularity must not be full when CUDA Graphs are enabled"
  // (per-layer graphs; the checkpoint would wrap the graphed layers).
  if (full && graphs == GraphMode::per_layer)
    add("recompute", mode,
        "full recompute cannot be combined with per-layer graphs (as in Megatron: "
        "\"recompute_granularity must not be full when CUDA Graphs are enabled\"); use selective",
        {"graphs"});
  return out;
}

void ModelConfig::validate(int tp, int cp, int dp) const {
  const std::vector<ModelConfigViolation> v = violations(tp, cp, dp);
  if (!v.empty()) throw ModelConfigError(v.front().field, v.front().value, v.front().rule);
}

}  // namespace parity
