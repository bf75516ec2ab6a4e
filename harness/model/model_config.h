#pragma once
// The model's own configuration (a RunConfig in harness/config/ maps onto it).
// Torch-free.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/backend/backend.h"  // GraphMode (the graph interface's modes)
#include "harness/graphs/graph_scope.h"
#include "harness/model/model_options.h"
#include "harness/model/pipeline_layout.h"

namespace parity {

// The enum options (dtype, norm, activation, positions, recompute, router
// score, forced routing): model_options.h. Graphs: GraphMode (backend.h;
// docs/graph-phases.md): none, one graph per transformer layer (Megatron's
// "local" impl, whole-layer capture), or the whole forward/backward.

struct MoeConfig {
  std::int64_t experts = 0;  // 0: every layer has the dense MLP
  // The routed experts' TP size (Megatron's expert_tensor_parallel_size); 0 =
  // the model's tp. expert_tp_size(tp) is the effective one.
  std::int64_t expert_tp = 0;
  std::int64_t topk = 2;
  RouterScore score = RouterScore::softmax;
  std::int64_t ffn_hidden = 0;  // per expert; 0 = the model's ffn_hidden
  // Which layers are MoE: "all", "every:N" (layer i when i % N == 0, Megatron's
  // moe_layer_freq) or a comma list of layer indices.
  std::string layers = "all";
  double aux_loss_coef = 0.0;  // switch load-balancing loss; 0 = none
  bool seq_aux_loss = false;   // per sequence, averaged (Megatron's seq_aux_loss)
  double z_loss_coef = 0.0;    // router z-loss (Megatron's moe_z_loss_coeff); 0 = none
  // Megatron's MoE metrics tracker with moe_per_layer_logging: each step logs
  // every MoE layer's load-balancing loss, z-loss and expert load
  // (GPTModel::logged_moe_statistics).
  bool per_layer_logging = false;
  double expert_bias_rate = 0.0;       // aux-loss-free balancing bias update rate; 0 = no bias
  double capacity_factor = 0.0;        // 0 = dropless; else drop tokens over capacity (by prob)
  std::int64_t shared_expert_ffn = 0;  // 0 = no shared expert
  ForcedRouting force_routing = ForcedRouting::none;
  // The last round(padding_fraction * seq) positions of every sequence are
  // padding: excluded from router observations, diagnostics and the aux loss.
  double padding_fraction = 0.0;

  bool enabled() const { return experts > 0; }
  std::int64_t expert_tp_size(std::int64_t tp) const { return expert_tp > 0 ? expert_tp : tp; }
  std::int64_t padding_tokens(std::int64_t seq) const;
  // Whether layer `index` (0-based) of `layers_total` is an MoE layer; throws
  // ModelConfigError naming moe_layers for a bad pattern.
  bool is_moe_layer(std::int64_t index, std::int64_t layers_total) const;
};

// The selective-recompute module set.
struct RecomputeModules {
  bool core_attn = false;
  bool layernorm = false;
  bool mlp = false;
  bool moe = false;  // the whole MoE block (router, dispatch, experts), Megatron's "moe"
  bool empty() const { return !core_attn && !layernorm && !mlp && !moe; }
  friend bool operator==(RecomputeModules a, RecomputeModules b) {
    return a.core_attn == b.core_attn && a.layernorm == b.layernorm && a.mlp == b.mlp &&
           a.moe == b.moe;
  }
};

// "core_attn,layernorm,mlp,moe" (the set in that order; "" when empty).
std::string to_string(RecomputeModules m);
// Parses a comma-separated module list; throws ModelConfigError naming
// `recompute_modules` and the unknown module.
RecomputeModules parse_recompute_modules(std::string_view list);

// One-line, user-facing: "model config: heads = 6: must be divisible by tp (4)".
class ModelConfigError : public std::invalid_argument {
 public:
  ModelConfigError(const std::string& field, const std::string& value, const std::string& rule);
  const std::string& field() const { return field_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string field_;
  std::string rule_;
};

// One broken rule: the field (ModelConfig's name, or tp/cp/dp), its value, the
// rule, and the other fields the rule reads (so a caller can say where they came from).
struct ModelConfigViolation {
  std::string field;
  std::string value;
  std::string rule;
  std::vector<std::string> involves;
};

struct ModelConfig {
  std::int64_t hidden = 64;
  std::int64_t heads = 4;
  // Grouped-query attention (Megatron's num_query_groups): the key/value heads,
  // each shared by heads / groups query heads; 0 = heads (no grouping), 1 =
  // multi-query. query_groups() is the effective count.
  std::int64_t num_query_groups = 0;
  // Megatron's kv_channels: the channels of each attention head (query, key,
  // value); 0 = hidden / heads. linear_proj maps heads * head_dim() to hidden.
  std::int64_t kv_channels = 0;
  // Megatron's qk_layernorm: each query and key head normalized over its
  // channels (the model's norm kind, weights of head_dim()) after the QKV split.
  bool qk_layernorm = false;
  std::int64_t ffn_hidden = 256;  // per activation half for swiglu (fc1 is 2*ffn wide)
  std::int64_t layers = 2;
  std::int64_t seq = 16;  // global sequence length
  std::int64_t micro_batch = 2;
  std::int64_t vocab = 128;
  ModelDType dtype = ModelDType::fp32;
  bool fp32_residual = false;
  double dropout = 0.0;  // hidden dropout (embedding and both bias-dropout-adds)
  NormKind norm = NormKind::layer_norm;
  ActivationKind activation = ActivationKind::gelu;
  PositionEmbeddingKind position_embedding = PositionEmbeddingKind::learned;
  // Rope only: Megatron's rotary_base, rotary_percent (RotaryEmbedding's dim
  // is int(head_dim * rotary_percent) below 1.0) and rotary_interleaved.
  double rotary_base = 10000.0;
  double rotary_percent = 1.0;
  bool rotary_interleaved = false;
  // false: the output layer reuses the word embeddings (Megatron's
  // share_embeddings_and_output_weights; no output_layer.weight).
  bool untie_embeddings = true;
  bool bias_linear = true;  // biases on QKV, proj, fc1, fc2 (Megatron's add_bias_linear)
  std::uint64_t seed = 1234;
  bool sequence_parallel = false;
  bool gather_output = false;  // the output layer's constructor flag
  // What the training loop passes as forward(runtime_gather_output); wins.
  std::optional<bool> runtime_gather_output;
  double norm_eps = 1e-5;
  double init_std = 0.02;
  // Activation recompute (harness/recompute/, docs/model.md "Recompute").
  RecomputeKind recompute = RecomputeKind::none;
  RecomputeModules recompute_modules;  // selective only
  std::int64_t recompute_layers = 1;   // N for full_uniform / full_block
  // Graph phases (harness/graphs/, docs/graph-phases.md).
  GraphMode graphs = GraphMode::none;
  std::int64_t graph_warmup = 1;  // K: per-layer warmup runs / eager iterations before capture
  GraphScope graph_scope;         // per-layer: the captured stages (empty = whole layer)
  MoeConfig moe;                  // MoE layers (off by default)
  // Multi-token prediction (docs/model.md "Multi-token prediction"): depths
  // after the decoder, depth k predicting the token k+1 positions ahead
  // (Megatron's mtp_num_layers); with mtp_repeated_layer every depth runs one
  // shared MTP layer (Megatron's mtp_use_repeated_layer).
  std::int64_t mtp_layers = 0;
  bool mtp_repeated_layer = false;
  double mtp_loss_scale = 0.1;  // Megatron's mtp_loss_scaling_factor (its default)
  // A weight_gradient observation site per parameter (harness/model/weight_gradient_sites.h).
  bool observe_wgrad = false;
  // Packed sequences (sequence_packing.h): the lengths of the documents each
  // microbatch sequence holds (Megatron's THD batches); empty: one document
  // filling the sequence.
  std::vector<std::int64_t> packed_seq_lengths;
  // Pipeline parallelism (docs/model.md "Pipeline layer placement"): stages,
  // chunks per stage and Megatron's placement options. Its num_layers and
  // mtp_layers are not read: pipeline_layout() takes them from layers and
  // mtp_layers.
  PipelineLayoutConfig pipeline;

  std::int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
  // Megatron's RotaryEmbedding dim: head_dim, or int(head_dim * rotary_percent)
  // below 1.0. Its frequencies are base^(-arange(0, dim, 2) / dim); the first
  // rotary_channels() = 2 * ceil(dim / 2) channels of each head rotate.
  std::int64_t rotary_dim() const {
    return rotary_percent < 1.0
               ? static_cast<std::int64_t>(static_cast<double>(head_dim()) * rotary_percent)
               : head_dim();
  }
  std::int64_t rotary_channels() const { return 2 * ((rotary_dim() + 1) / 2); }
  bool packed() const { return !packed_seq_lengths.empty(); }
  // The tokens of one sequence the loss counts: the documents' without their
  // padding when packed, else seq.
  std::int64_t tokens_per_sequence() const;
  std::int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : heads; }
  // linear_qkv's output width: per group its heads / groups queries, its key
  // and its value (Megatron's layout), (heads + 2 * groups) * head_dim.
  std::int64_t qkv_width() const { return (heads + 2 * query_groups()) * head_dim(); }
  // `pipeline` with the model's layer and MTP counts: what pipeline_layout.h's
  // functions take.
  PipelineLayoutConfig pipeline_layout() const;
  bool pipelined() const { return pipeline.pp > 1; }
  std::int64_t fc1_width() const {
    return activation == ActivationKind::swiglu ? 2 * ffn_hidden : ffn_hidden;
  }

  // Every rule the model needs, for a run with the given parallel sizes (the one
  // home of these rules: RunConfig's validator maps them onto its keys). Sizes
  // below 1 are reported alone (the divisibility rules need them).
  // `ep`: the expert-parallel size (MoE only).
  std::vector<ModelConfigViolation> violations(int tp, int cp, int dp, int ep = 1) const;
  // Throws ModelConfigError for the first of violations().
  void validate(int tp, int cp, int dp, int ep = 1) const;
  std::int64_t expert_ffn_hidden() const {
    return moe.ffn_hidden > 0 ? moe.ffn_hidden : ffn_hidden;
  }
};

}  // namespace parity
