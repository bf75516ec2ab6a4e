#pragma once
// Partial per-layer graphs (Megatron's cuda_graph_scope, megatron-reference 6.1-6.2):
// which stages of a transformer layer a per-layer graph captures. The one home of
// the rule "is this stage (and so this observation site) captured": the model
// runs the captured stages through the graph runner and the rest eagerly, the
// checks read the same answer for the sites they expect to stay silent on replay.
// Torch-free.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/observation/source_kind.h"

namespace parity {

// The stages of a layer, in execution order. A dense layer has attention,
// mlp_input, mlp and post; an MoE layer has attention, mlp_input, router,
// preprocess, experts and post.
enum class LayerStage : std::int8_t {
  attention,   // input norm, self-attention, bias-dropout-add
  mlp_input,   // the pre-MLP norm
  mlp,         // the dense MLP
  router,      // the MoE router (gating, scores, top-k, aux loss; the router sites)
  preprocess,  // the token dispatcher's preprocess (the SP gather of tokens, probs, map)
  experts,     // dispatch over EP, the experts, the combine, the TP reduce-scatter
  post,        // shared expert, aux-loss attach, bias-dropout-add
};
std::string_view to_string(LayerStage s);

// The captured modules: an empty scope captures the whole layer.
struct GraphScope {
  bool attn = false;
  bool mlp = false;             // dense layers' MLP half (pre-MLP norm, MLP, bias-dropout-add)
  bool moe = false;             // MoE layers' whole MoE half (Megatron: drop-and-pad only)
  bool moe_router = false;      // MoE layers: pre-MLP norm + router, and the post-process
  bool moe_preprocess = false;  // with moe_router: the dispatcher's preprocess too

  bool whole_layer() const { return !attn && !mlp && !moe && !moe_router && !moe_preprocess; }
  // Whether a per-layer graph of an (MoE or dense) layer captures `stage`.
  bool captures(LayerStage stage, bool moe_layer) const;
  // Whether an MoE layer's router runs inside a graph (its sites silent on replay).
  bool captures_router() const { return captures(LayerStage::router, true); }
  friend bool operator==(const GraphScope& a, const GraphScope& b) {
    return a.attn == b.attn && a.mlp == b.mlp && a.moe == b.moe && a.moe_router == b.moe_router &&
           a.moe_preprocess == b.moe_preprocess;
  }
};

// "attn,mlp,moe,moe_router,moe_preprocess" (the set in that order; "" = whole layer).
std::string to_string(const GraphScope& s);
// Parses a comma-separated module list ("" = whole layer). On an unknown or
// repeated module returns nullopt and says why in *why.
std::optional<GraphScope> parse_graph_scope(std::string_view list, std::string* why);

// The stage an observation site of a layer belongs to, from its owner module:
// input_layernorm / self_attention -> attention, pre_mlp_layernorm -> mlp_input,
// mlp.router -> router, the dense mlp -> mlp. nullopt for sites outside any
// layer stage (the residual stream, the logits).
std::optional<LayerStage> layer_stage_of_site(std::string_view site);
// The stages of a dense or an MoE layer whose sites report `kind` (the
// owner-to-stage rule of layer_stage_of_site, by kind): attention_context ->
// attention; layernorm_output -> attention and mlp_input; mlp_output -> mlp
// (dense layers); the router kinds -> router (MoE layers). Empty for kinds no
// layer stage reports (the residual stream, the logits).
std::vector<LayerStage> layer_stages_of_kind(SourceKind kind, bool moe_layer);
// The layer index of a site "decoder.layers.<i>.<...>"; nullopt outside a layer.
std::optional<std::int64_t> layer_index_of_site(std::string_view site);

}  // namespace parity
