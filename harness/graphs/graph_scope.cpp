#include "harness/graphs/graph_scope.h"

#include <cstdlib>

namespace parity {

std::string_view to_string(LayerStage s) {
  switch (s) {
    case LayerStage::attention:
      return "attention";
    case LayerStage::mlp_input:
      return "mlp_input";
    case LayerStage::mlp:
      return "mlp";
    case LayerStage::router:
      return "router";
    case LayerStage::preprocess:
      return "preprocess";
    case LayerStage::experts:
      return "experts";
    case LayerStage::post:
      return "post";
  }
  return "?";
}

bool GraphScope::captures(LayerStage stage, bool moe_layer) const {
  if (whole_layer()) return true;
  if (stage == LayerStage::attention) return attn;
  if (!moe_layer) return mlp;  // the dense MLP half is one stage group
  if (moe) return true;        // the whole MoE half
  switch (stage) {
    case LayerStage::mlp_input:
    case LayerStage::router:
    case LayerStage::post:
      // Megatron's router graph (pre-MLP norm + routing) and post-process graph
      // (combine, shared experts, bias-dropout-add) around the eager experts.
      return moe_router;
    case LayerStage::preprocess:
      return moe_router && moe_preprocess;
    default:
      return false;  // experts: eager between the two graphs
  }
}

std::string to_string(const GraphScope& s) {
  std::string out;
  auto put = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : ",") + std::string(name);
  };
  put(s.attn, "attn");
  put(s.mlp, "mlp");
  put(s.moe, "moe");
  put(s.moe_router, "moe_router");
  put(s.moe_preprocess, "moe_preprocess");
  return out;
}

std::optional<GraphScope> parse_graph_scope(std::string_view list, std::string* why) {
  GraphScope s;
  std::size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const std::size_t comma = list.find(',', start);
    const std::string_view item = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    bool* slot = item == "attn"             ? &s.attn
                 : item == "mlp"            ? &s.mlp
                 : item == "moe"            ? &s.moe
                 : item == "moe_router"     ? &s.moe_router
                 : item == "moe_preprocess" ? &s.moe_preprocess
                                            : nullptr;
    if (slot == nullptr) {
      if (why)
        *why = "unknown module \"" + std::string(item) +
               "\" (known: attn, mlp, moe, moe_router, moe_preprocess; empty = whole layer)";
      return std::nullopt;
    }
    if (*slot) {
      if (why) *why = "module " + std::string(item) + " is listed twice";
      return std::nullopt;
    }
    *slot = true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return s;
}

std::optional<LayerStage> layer_stage_of_site(std::string_view site) {
  if (!layer_index_of_site(site)) return std::nullopt;
  auto has = [&](std::string_view part) { return site.find(part) != std::string_view::npos; };
  if (has(".input_layernorm.") || has(".self_attention.")) return LayerStage::attention;
  if (has(".pre_mlp_layernorm.")) return LayerStage::mlp_input;
  if (has(".mlp.router.")) return LayerStage::router;
  if (has(".mlp.")) return LayerStage::mlp;
  return std::nullopt;  // the layer's residual sites: eager, outside every stage
}

std::vector<LayerStage> layer_stages_of_kind(SourceKind kind, bool moe_layer) {
  switch (kind) {
    case SourceKind::attention_context:
      return {LayerStage::attention};
    case SourceKind::layernorm_output:
      return {LayerStage::attention, LayerStage::mlp_input};
    case SourceKind::mlp_output:
      return moe_layer ? std::vector<LayerStage>{} : std::vector<LayerStage>{LayerStage::mlp};
    case SourceKind::router_logits:
    case SourceKind::router_scores:
    case SourceKind::router_diagnostics:
      return moe_layer ? std::vector<LayerStage>{LayerStage::router} : std::vector<LayerStage>{};
    default:
      return {};
  }
}

std::optional<std::int64_t> layer_index_of_site(std::string_view site) {
  constexpr std::string_view prefix = "decoder.layers.";
  if (site.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::size_t i = prefix.size();
  std::int64_t index = 0;
  bool digits = false;
  for (; i < site.size() && site[i] >= '0' && site[i] <= '9'; ++i) {
    index = index * 10 + (site[i] - '0');
    digits = true;
  }
  if (!digits || i >= site.size() || site[i] != '.') return std::nullopt;
  return index;
}

}  // namespace parity
