// The modules of the GPT stack (gpt_model.h): parameters, the tensor-parallel
// linears, norm, attention, MLP, the transformer layer and the embedding; the
// GPTModel that strings them together is gpt_model.cpp.
#include "harness/model/gpt_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "harness/backend/tp_mappings.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gather_output.h"
#include "harness/model/moe_layer.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(gqa_kv_heads_split_wrong);
PARITY_USES_FAULT(qk_norm_over_whole_hidden);

namespace parity {

at::ScalarType to_scalar_type(ModelDType dtype) {
  switch (dtype) {
    case ModelDType::fp32:
      return at::kFloat;
    case ModelDType::fp64:
      return at::kDouble;
    case ModelDType::bf16:
      return at::kBFloat16;
  }
  return at::kFloat;
}

namespace {
// Megatron's TransformerBlock runs its layers inside the tracker's fork under
// SP (the stream differs per TP rank, as the tensors do); without SP the
// residual stream is replicated and so must its dropout masks be.
RngStream hidden_dropout_stream(const ModelConfig& c) {
  return c.sequence_parallel ? RngStream::model_parallel : RngStream::data_parallel;
}
// Selective recompute of one module: training forwards only (Megatron checks
// self.training); grad mode is not consulted.
bool recompute_core_attn(const ModelConfig& c, const ModelRuntime& rt) {
  return rt.training && c.recompute == RecomputeKind::selective && c.recompute_modules.core_attn;
}
bool recompute_mlp(const ModelConfig& c, const ModelRuntime& rt) {
  return rt.training && c.recompute == RecomputeKind::selective && c.recompute_modules.mlp;
}
bool recompute_layernorm(const ModelConfig& c, const ModelRuntime& rt) {
  return rt.training && c.recompute == RecomputeKind::selective && c.recompute_modules.layernorm;
}
// Output-side weights (fc2, proj) use Megatron's scaled init std / sqrt(2 L).
double scaled_std(const ModelConfig& c) {
  return c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers));
}
}  // namespace

// ---------------------------------------------------------------- parameters
at::Tensor ParameterFactory::make(const std::string& name, std::vector<std::int64_t> full_shape,
                                  InitKind kind, double std, ShardSpec shard,
                                  bool sequence_parallel) {
  return make_over(name, std::move(full_shape), kind, std, shard, sequence_parallel, tp_rank_,
                   tp_size_);
}

at::Tensor ParameterFactory::make_expert(const std::string& name,
                                         std::vector<std::int64_t> full_shape, InitKind kind,
                                         double std, ShardSpec shard, std::int64_t expert) {
  at::Tensor t =
      make_over(name, std::move(full_shape), kind, std, shard, false, etp_rank_, etp_size_);
  parameters_.back().expert = expert;
  return t;
}

at::Tensor ParameterFactory::make_over(const std::string& name,
                                       std::vector<std::int64_t> full_shape, InitKind kind,
                                       double std, ShardSpec shard, bool sequence_parallel,
                                       int rank, int size) {
  const at::ScalarType dtype = to_scalar_type(config_.dtype);
  // Made on the CPU (identical for every backend), then placed on the backend's device.
  at::Tensor local =
      source_
          ? source_->local_value({name, std::move(full_shape), shard, rank, size, dtype})
          : shard_of(full_parameter(config_.seed, name, std::move(full_shape), kind, std, dtype),
                     shard, rank, size);
  local = local.to(device_);
  local.requires_grad_(true);
  parameters_.push_back(Parameter{name, local, shard, sequence_parallel});
  return local;
}

// ---------------------------------------------------------------- linears
ColumnParallelLinear::ColumnParallelLinear(std::string name, const ModelConfig* config,
                                           ParameterFactory& params, std::int64_t in,
                                           std::int64_t out, bool bias, bool gather_output,
                                           double init_std, std::int64_t stacked_parts)
    : Module(std::move(name), config), gather_output_(gather_output) {
  weight_ = params.make(name_ + ".weight", {out, in}, InitKind::normal, init_std,
                        ShardSpec::along(0, stacked_parts));
  if (bias) {
    bias_ = params.make(name_ + ".bias", {out}, InitKind::normal, init_std,
                        ShardSpec::along(0, stacked_parts));
  }
}

ColumnParallelLinear::ColumnParallelLinear(std::string name, const ModelConfig* config,
                                           at::Tensor shared_weight, bool gather_output)
    : Module(std::move(name), config),
      weight_(std::move(shared_weight)),
      gather_output_(gather_output) {}

at::Tensor ColumnParallelLinear::forward(const ModelRuntime& rt, const at::Tensor& x,
                                         std::optional<bool> runtime_gather_output) const {
  Communicator* tp = rt.parallel.tp;
  at::Tensor input = config_->sequence_parallel ? gather_from_sequence_parallel_region(x, tp)
                                                : copy_to_tensor_parallel_region(x, tp);
  at::Tensor out = rt.backend->linear(input, weight_, bias_);
  if (resolve_gather_output(gather_output_, runtime_gather_output)) {
    out = gather_from_tensor_parallel_region(out, tp);
  }
  return out;
}

RowParallelLinear::RowParallelLinear(std::string name, const ModelConfig* config,
                                     ParameterFactory& params, std::int64_t in, std::int64_t out,
                                     bool bias, double init_std)
    : Module(std::move(name), config) {
  weight_ =
      params.make(name_ + ".weight", {out, in}, InitKind::normal, init_std, ShardSpec::along(1));
  // Added after the reduce (in the bias-dropout-add): under SP on a sequence
  // shard, so its gradient is partial per TP rank.
  if (bias) {
    bias_ = params.make(name_ + ".bias", {out}, InitKind::normal, init_std, ShardSpec::replicate(),
                        config->sequence_parallel);
  }
}

std::pair<at::Tensor, at::Tensor> RowParallelLinear::forward(const ModelRuntime& rt,
                                                             const at::Tensor& x) const {
  Communicator* tp = rt.parallel.tp;
  at::Tensor partial = rt.backend->linear(x, weight_, at::Tensor());
  at::Tensor out = config_->sequence_parallel
                       ? reduce_scatter_to_sequence_parallel_region(partial, tp)
                       : reduce_from_tensor_parallel_region(partial, tp);
  return {out, bias_};
}

// ---------------------------------------------------------------- norm
Norm::Norm(std::string name, const ModelConfig* config, ParameterFactory& params)
    : Norm(std::move(name), config, params, config->hidden, config->sequence_parallel) {}

Norm::Norm(std::string name, const ModelConfig* config, ParameterFactory& params,
           std::int64_t width, bool tp_partial)
    : Module(std::move(name), config) {
  weight_ = params.make(name_ + ".weight", {width}, InitKind::ones_plus_noise, config->init_std,
                        ShardSpec::replicate(), tp_partial);
  if (config->norm == NormKind::layer_norm) {
    bias_ = params.make(name_ + ".bias", {width}, InitKind::normal, config->init_std,
                        ShardSpec::replicate(), tp_partial);
  }
}

at::Tensor Norm::forward(const ModelRuntime& rt, const at::Tensor& x) const {
  if (config_->norm == NormKind::layer_norm) {
    return rt.backend->layer_norm(x, weight_, bias_, config_->norm_eps);
  }
  return rt.backend->rms_norm(x, weight_, config_->norm_eps);
}

at::Tensor Norm::forward_over_heads(const ModelRuntime& rt, const at::Tensor& x) const {
  const std::int64_t heads = x.size(2);
  const at::Tensor flat = x.flatten(2);
  const at::Tensor weight = weight_.repeat({heads});
  const at::Tensor out =
      config_->norm == NormKind::layer_norm
          ? rt.backend->layer_norm(flat, weight, bias_.repeat({heads}), config_->norm_eps)
          : rt.backend->rms_norm(flat, weight, config_->norm_eps);
  return out.view(x.sizes());
}

// ---------------------------------------------------------------- attention
SelfAttention::SelfAttention(const std::string& name, const ModelConfig* config,
                             ParameterFactory& params)
    : Module(name, config),
      linear_qkv_(name + ".linear_qkv", config, params, config->hidden, config->qkv_width(),
                  config->bias_linear, /*gather_output=*/false, config->init_std),
      linear_proj_(name + ".linear_proj", config, params, config->heads * config->head_dim(),
                   config->hidden, config->bias_linear, scaled_std(*config)) {
  if (config->qk_layernorm) {
    // Shared by every head, each TP rank normalizing its own: partial gradients
    // (Megatron's finalize_model_grads all-reduces q_layernorm / k_layernorm over TP).
    q_layernorm_.emplace(name + ".q_layernorm", config, params, config->head_dim(), true);
    k_layernorm_.emplace(name + ".k_layernorm", config, params, config->head_dim(), true);
  }
}

std::pair<at::Tensor, at::Tensor> SelfAttention::forward(const ModelRuntime& rt,
                                                         const at::Tensor& x,
                                                         const at::Tensor& positions) const {
  const std::int64_t hn = config_->head_dim();
  // [s, b, ng_local * (np/ng + 2) * hn]: Megatron's layout, per query group its
  // queries, key and value, groups contiguous -> groups split over TP.
  at::Tensor mixed = linear_qkv_.forward(rt, x);
  const std::int64_t groups = config_->query_groups();
  const std::int64_t tp = rt.parallel.tp_size(), tp_rank = rt.parallel.tp_rank();
  // Fewer groups than TP ranks (Megatron's get_query_key_value_tensors): each
  // rank's rows cut through the groups, so the ranks all-gather the whole
  // projection, keep the group of ranks [g * tp/ng, (g+1) * tp/ng) and, of its
  // queries, this rank's heads / tp.
  const bool groups_replicated = groups < tp;
  at::Tensor all_groups;
  const std::int64_t width = mixed.size(-1) * tp / groups;  // one group's columns
  if (groups_replicated) {
    all_groups = all_gather_last_dim_from_tensor_parallel_region(mixed, rt.parallel.tp);
    mixed = all_groups.narrow(-1, tp_rank / (tp / groups) * width, width);
  }
  std::vector<at::Tensor> qkv =
      rt.backend->split_qkv(mixed, hn, groups_replicated ? 1 : groups / tp);
  if (groups_replicated) {
    const std::int64_t heads_here = config_->heads / tp;
    qkv[0] = qkv[0].narrow(2, tp_rank % (tp / groups) * heads_here, heads_here);
    if (fault_active(fault_gqa_kv_heads_split_wrong)) {
      // Fault gqa-kv-heads-split-wrong: the key and value of group r mod G.
      const std::vector<at::Tensor> other =
          rt.backend->split_qkv(all_groups.narrow(-1, tp_rank % groups * width, width), hn, 1);
      qkv[1] = other[1];
      qkv[2] = other[2];
    }
  }
  if (q_layernorm_ && fault_active(fault_qk_norm_over_whole_hidden)) {
    // Fault qk-norm-over-whole-hidden: the statistics over every query (key)
    // head this rank holds together, not over each head's channels.
    qkv[0] = q_layernorm_->forward_over_heads(rt, qkv[0]);
    qkv[1] = k_layernorm_->forward_over_heads(rt, qkv[1]);
  } else if (q_layernorm_) {  // per head, before the rotary embedding (Megatron's order)
    qkv[0] = q_layernorm_->forward(rt, qkv[0]);
    qkv[1] = k_layernorm_->forward(rt, qkv[1]);
  }
  if (config_->position_embedding == PositionEmbeddingKind::rope) {
    // Before the CP gather, with this rank's global positions (Megatron's
    // rotary_pos_emb for this CP rank's chunks).
    const RotarySpec rotary{config_->rotary_base, config_->rotary_dim(),
                            config_->rotary_interleaved};
    // Packed sequences: each document's own positions (Megatron's --reset-position-ids).
    const at::Tensor rotated = rt.packing ? rt.packing->embedding_positions(positions) : positions;
    qkv[0] = rt.backend->rotary_embedding(qkv[0], rotated, rotary);
    qkv[1] = rt.backend->rotary_embedding(qkv[1], rotated, rotary);
  }
  at::Tensor k = qkv[1], v = qkv[2], k_positions = positions;
  if (rt.parallel.cp_size() > 1) {
    // Every CP rank's queries see the keys/values of the whole sequence: all-gather
    // them (backward: reduce-scatter the gradients), with their global positions;
    // the key/value heads only, one per local group.
    Communicator* cp = rt.parallel.cp;
    const std::vector<at::Tensor> kv = rt.backend->gather_context_parallel_kv(k, v, *cp);
    k = kv[0];
    v = kv[1];
    k_positions = cp->all_gather(positions.contiguous(), 0);
  }
  // Packed sequences: attention within each document (Megatron's cu_seqlens).
  at::Tensor q_documents, k_documents;
  if (rt.packing) {
    q_documents = rt.packing->documents_of(positions);
    k_documents = rt.packing->documents_of(k_positions);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hn));
  // The core attention and its probe: the selective "core_attn" recompute region.
  const SelfAttention* self = this;
  CheckpointFn core = [self, rt, positions, k_positions, q_documents, k_documents,
                       scale](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    // Each key/value head serves its group's query heads (Megatron's
    // DotProductAttention repeats them inside the core attention).
    const std::int64_t per_group = in[0].size(2) / in[1].size(2);
    const at::Tensor k = per_group > 1 ? in[1].repeat_interleave(per_group, 2) : in[1];
    const at::Tensor v = per_group > 1 ? in[2].repeat_interleave(per_group, 2) : in[2];
    at::Tensor context = rt.backend->causal_attention(in[0], k, v, positions, k_positions,
                                                      q_documents, k_documents, scale);
    // Parity probe: the core-attention output, heads (last dim) split over TP.
    observe_tensor(*self, "attention_context", SourceKind::attention_context, context,
                   /*tp_shard_dim=*/-1, /*sequence_dim=*/0, /*batch_dim=*/1);
    return {context};
  };
  const std::vector<at::Tensor> qkv_in{qkv[0], k, v};
  at::Tensor context = recompute_core_attn(*config_, rt)
                           ? checkpoint(core, qkv_in, rt.rng, name_ + ".core_attention")[0]
                           : core(qkv_in)[0];
  return linear_proj_.forward(rt, context);
}

// ---------------------------------------------------------------- mlp
Mlp::Mlp(const std::string& name, const ModelConfig* config, ParameterFactory& params)
    : Module(name, config),
      linear_fc1_(name + ".linear_fc1", config, params, config->hidden, config->fc1_width(),
                  config->bias_linear, /*gather_output=*/false, config->init_std,
                  /*stacked_parts=*/config->activation == ActivationKind::swiglu ? 2 : 1),
      linear_fc2_(name + ".linear_fc2", config, params, config->ffn_hidden, config->hidden,
                  config->bias_linear, scaled_std(*config)) {}

std::pair<at::Tensor, at::Tensor> Mlp::forward(const ModelRuntime& rt, const at::Tensor& x) const {
  // The whole MLP and its probe: the selective "mlp" recompute region.
  const Mlp* self = this;
  CheckpointFn body = [self, rt](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    const ModelConfig& c = *self->config_;
    at::Tensor h = self->linear_fc1_.forward(rt, in[0]);
    h = c.activation == ActivationKind::swiglu ? rt.backend->swiglu(h) : rt.backend->gelu(h);
    at::Tensor out = self->linear_fc2_.forward(rt, h).first;
    // Parity probe: fc2's output before bias-dropout-add.
    observe_tensor(*self, "mlp_output", SourceKind::mlp_output, out,
                   c.sequence_parallel ? OptionalDim(0) : std::nullopt, 0, 1);
    return {out};
  };
  at::Tensor out =
      recompute_mlp(*config_, rt) ? checkpoint(body, {x}, rt.rng, name_)[0] : body({x})[0];
  return {out, linear_fc2_.bias()};
}

// ---------------------------------------------------------------- layer
TransformerLayer::TransformerLayer(const std::string& name, const ModelConfig* config,
                                   ParameterFactory& params, std::int64_t index,
                                   const ParallelContext& parallel)
    : Module(name, config),
      index_(index),
      input_layernorm_(name + ".input_layernorm", config, params),
      self_attention_(name + ".self_attention", config, params),
      pre_mlp_layernorm_(name + ".pre_mlp_layernorm", config, params) {
  if (index >= 0 && config->moe.is_moe_layer(index, config->layers)) {
    moe_ = std::make_unique<MoELayer>(name + ".mlp", config, params, index, parallel.ep_rank(),
                                      parallel.ep_size());
  } else {
    mlp_ = std::make_unique<Mlp>(name + ".mlp", config, params);
  }
}

TransformerLayer::TransformerLayer(TransformerLayer&&) noexcept = default;
TransformerLayer::~TransformerLayer() = default;

at::Tensor TransformerLayer::norm_output(const ModelRuntime& rt, const Norm& norm,
                                         const at::Tensor& x) const {
  at::Tensor out = norm.forward(rt, x);
  // Parity probe: the norm's output, inside the "layernorm" recompute region
  // (so a recomputation that is not suspended shows as a second observation).
  observe_tensor(norm, "layernorm_output", SourceKind::layernorm_output, out,
                 norm.config_sequence_parallel().value_or(false) ? OptionalDim(0) : std::nullopt, 0,
                 1);
  return out;
}

at::Tensor TransformerLayer::attention_half(const ModelRuntime& rt, const at::Tensor& x,
                                            const at::Tensor& positions) const {
  at::Generator gen = rt.rng->generator(hidden_dropout_stream(*config_));
  // Selective "layernorm": the norm through CheckpointWithoutOutput, its output
  // freed once the consumer ran and recomputed when its gradient arrives.
  const bool ckpt_norms = recompute_layernorm(*config_, rt);
  auto norm = [this, &rt](const at::Tensor& t) { return norm_output(rt, input_layernorm_, t); };
  CheckpointWithoutOutput ln_ckpt(rt.rng, input_layernorm_.canonical_name());
  at::Tensor ln = ckpt_norms ? ln_ckpt.checkpoint(norm, x) : norm(x);
  at::Tensor residual = config_->fp32_residual ? x.to(at::kFloat) : x;
  auto [attn_out, attn_bias] = self_attention_.forward(rt, ln, positions);
  if (ckpt_norms) ln_ckpt.discard_output_and_register_recompute(attn_out);
  return rt.backend->bias_dropout_add(attn_out, attn_bias, residual, config_->dropout, rt.training,
                                      gen);
}

at::Tensor TransformerLayer::mlp_half(const ModelRuntime& rt, const at::Tensor& h,
                                      const at::Tensor& positions) const {
  at::Generator gen = rt.rng->generator(hidden_dropout_stream(*config_));
  const bool ckpt_norms = recompute_layernorm(*config_, rt);
  auto norm = [this, &rt](const at::Tensor& t) { return norm_output(rt, pre_mlp_layernorm_, t); };
  CheckpointWithoutOutput ln2_ckpt(rt.rng, pre_mlp_layernorm_.canonical_name());
  at::Tensor ln2 = ckpt_norms ? ln2_ckpt.checkpoint(norm, h) : norm(h);
  at::Tensor residual = config_->fp32_residual ? h.to(at::kFloat) : h;
  auto [mlp_out, mlp_bias] = moe_ ? moe_->forward(rt, ln2, positions) : mlp_->forward(rt, ln2);
  if (ckpt_norms) ln2_ckpt.discard_output_and_register_recompute(mlp_out);
  return rt.backend->bias_dropout_add(mlp_out, mlp_bias, residual, config_->dropout, rt.training,
                                      gen);
}

at::Tensor TransformerLayer::moe_half_split(const ModelRuntime& rt, const at::Tensor& h,
                                            const at::Tensor& positions,
                                            const LayerRegionRunner& graphs) const {
  const TransformerLayer* self = this;
  const ModelRuntime* run = &rt;
  const bool preprocess = config_->graph_scope.moe_preprocess;
  // Router graph: pre-MLP norm, routing (and the dispatcher's preprocess).
  RegionFn router = [self, run, positions, preprocess](const std::vector<at::Tensor>& in) {
    const at::Tensor ln2 = self->norm_output(*run, self->pre_mlp_layernorm_, in[0]);
    RoutedTokens r = self->moe_->route(*run, ln2, positions);
    if (preprocess) self->moe_->preprocess(*run, r);
    std::vector<at::Tensor> out = {ln2, r.tokens, r.probs, r.map};
    if (r.aux_loss.defined()) out.push_back(r.aux_loss);
    return out;
  };
  const std::vector<at::Tensor> routed = graphs(canonical_name() + ".moe_router", router, {h});
  RoutedTokens r;
  r.tokens = routed[1];
  r.probs = routed[2];
  r.map = routed[3];
  r.gathered = preprocess;
  // Eager between the graphs: dispatch, experts, combine.
  const at::Tensor experts_out = moe_->experts(rt, r);
  // Post-process graph: shared expert, aux loss, bias-dropout-add.
  RegionFn post = [self, run](const std::vector<at::Tensor>& in) {
    const ModelConfig& c = *self->config_;
    at::Generator gen = run->rng->generator(hidden_dropout_stream(c));
    const at::Tensor aux = in.size() > 3 ? in[3] : at::Tensor();
    const at::Tensor out = self->moe_->postprocess(*run, in[0], in[1], aux);
    const at::Tensor residual = c.fp32_residual ? in[2].to(at::kFloat) : in[2];
    return std::vector<at::Tensor>{
        run->backend->bias_dropout_add(out, at::Tensor(), residual, c.dropout, run->training, gen)};
  };
  std::vector<at::Tensor> post_in = {experts_out, routed[0], h};
  if (routed.size() > 4) post_in.push_back(routed[4]);
  return graphs(canonical_name() + ".moe_post", post, post_in)[0];
}

at::Tensor TransformerLayer::forward(const ModelRuntime& rt, const at::Tensor& x,
                                     const at::Tensor& positions,
                                     const LayerRegionRunner* graphs) const {
  if (graphs == nullptr) return mlp_half(rt, attention_half(rt, x, positions), positions);
  const GraphScope& scope = config_->graph_scope;
  const bool moe_layer = moe_ != nullptr;
  const TransformerLayer* self = this;
  const ModelRuntime* run = &rt;
  // A stage group runs as a region when the scope captures its first stage.
  auto group = [&](LayerStage stage, const char* suffix, const RegionFn& fn, const at::Tensor& in) {
    return scope.captures(stage, moe_layer) ? (*graphs)(canonical_name() + suffix, fn, {in})[0]
                                            : fn({in})[0];
  };
  const at::Tensor h = group(
      LayerStage::attention, ".attn",
      [self, run, positions](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{self->attention_half(*run, in[0], positions)};
      },
      x);
  if (moe_layer && scope.moe_router && !scope.moe) return moe_half_split(rt, h, positions, *graphs);
  return group(
      LayerStage::mlp_input, moe_layer ? ".moe" : ".mlp",
      [self, run, positions](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{self->mlp_half(*run, in[0], positions)};
      },
      h);
}

// ---------------------------------------------------------------- embedding
Embedding::Embedding(std::string name, const ModelConfig* config, ParameterFactory& params,
                     bool position_embeddings)
    : Module(std::move(name), config) {
  word_ = params.make(name_ + ".word_embeddings.weight", {config->vocab, config->hidden},
                      InitKind::normal, config->init_std, ShardSpec::along(0));
  if (position_embeddings && config->position_embedding == PositionEmbeddingKind::learned) {
    position_ = params.make(name_ + ".position_embeddings.weight", {config->seq, config->hidden},
                            InitKind::normal, config->init_std, ShardSpec::replicate());
  }
}

at::Tensor Embedding::forward(const ModelRuntime& rt, const at::Tensor& tokens,
                              const at::Tensor& positions) const {
  Communicator* tp = rt.parallel.tp;
  // Vocab-parallel lookup: ids outside this rank's rows look up row 0 and are
  // zeroed; the all-reduce over TP assembles the full embedding.
  const std::int64_t start = rt.parallel.tp_rank() * word_.size(0);
  at::Tensor words = rt.backend->vocab_parallel_embedding(tokens, word_, start, tp);  // [s, b, h]
  at::Tensor h = words;
  if (position_.defined()) {  // learned; rope rotates q and k in the attention instead
    // Packed sequences: each document's own positions (Megatron's --reset-position-ids).
    const at::Tensor looked_up =
        rt.packing ? rt.packing->embedding_positions(positions) : positions;
    h = h + rt.backend->embedding(looked_up, position_).unsqueeze(1);  // [s, 1, h]
  }
  if (config_->fp32_residual) h = h.to(at::kFloat);
  if (config_->sequence_parallel) h = scatter_to_sequence_parallel_region(h, tp);
  at::Generator gen = rt.rng->generator(hidden_dropout_stream(*config_));
  return rt.backend->dropout(h, config_->dropout, rt.training, gen);
}
}  // namespace parity
