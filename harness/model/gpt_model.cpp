#include "harness/model/gpt_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "harness/backend/tp_mappings.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gather_output.h"
#include "harness/model/moe_layer.h"
#include "harness/model/multi_token_prediction.h"  // the members mtp_layers_ hold
#include "harness/model/weight_gradient_sites.h"
#include "harness/parallel/rank_status.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(collective_skipped_when_zero);
PARITY_USES_FAULT(sp_grad_not_reduced);

namespace parity {

at::ScalarType to_scalar_type(ModelDType dtype) {
  switch (dtype) {
    case ModelDType::fp32: return at::kFloat;
    case ModelDType::fp64: return at::kDouble;
    case ModelDType::bf16: return at::kBFloat16;
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
  const at::ScalarType dtype = to_scalar_type(config_.dtype);
  // Made on the CPU (identical for every backend), then placed on the backend's device.
  at::Tensor local =
      source_
          ? source_->local_value({name, std::move(full_shape), shard, tp_rank_, tp_size_, dtype})
          : shard_of(full_parameter(config_.seed, name, std::move(full_shape), kind, std, dtype),
                     shard, tp_rank_, tp_size_);
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
  weight_ = params.make(name_ + ".weight", {out, in}, InitKind::normal, init_std,
                        ShardSpec::along(1));
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
    : Module(std::move(name), config) {
  const bool sp = config->sequence_parallel;
  weight_ = params.make(name_ + ".weight", {config->hidden}, InitKind::ones_plus_noise,
                        config->init_std, ShardSpec::replicate(), sp);
  if (config->norm == NormKind::layer_norm) {
    bias_ = params.make(name_ + ".bias", {config->hidden}, InitKind::normal, config->init_std,
                        ShardSpec::replicate(), sp);
  }
}

at::Tensor Norm::forward(const ModelRuntime& rt, const at::Tensor& x) const {
  if (config_->norm == NormKind::layer_norm) {
    return rt.backend->layer_norm(x, weight_, bias_, config_->norm_eps);
  }
  return rt.backend->rms_norm(x, weight_, config_->norm_eps);
}

// ---------------------------------------------------------------- attention
SelfAttention::SelfAttention(std::string name, const ModelConfig* config, ParameterFactory& params)
    : Module(name, config),
      linear_qkv_(name + ".linear_qkv", config, params, config->hidden, 3 * config->hidden,
                  config->bias_linear, /*gather_output=*/false, config->init_std),
      linear_proj_(name + ".linear_proj", config, params, config->hidden, config->hidden,
                   config->bias_linear, scaled_std(*config)) {}

std::pair<at::Tensor, at::Tensor> SelfAttention::forward(const ModelRuntime& rt,
                                                         const at::Tensor& x,
                                                         const at::Tensor& positions) const {
  const std::int64_t hn = config_->head_dim();
  at::Tensor mixed = linear_qkv_.forward(rt, x);  // [s, b, np_local * 3 * hn]
  // Megatron's layout: per head [q k v], heads contiguous -> heads split over TP.
  std::vector<at::Tensor> qkv = rt.backend->split_qkv(mixed, hn);
  if (config_->position_embedding == PositionEmbeddingKind::rope) {
    // Before the CP gather, with this rank's global positions (Megatron's
    // rotary_pos_emb for this CP rank's chunks).
    qkv[0] = rt.backend->rotary_embedding(qkv[0], positions, config_->rotary_base);
    qkv[1] = rt.backend->rotary_embedding(qkv[1], positions, config_->rotary_base);
  }
  at::Tensor k = qkv[1], v = qkv[2], k_positions = positions;
  if (rt.parallel.cp_size() > 1) {
    // Every CP rank's queries see the keys/values of the whole sequence: all-gather
    // them (backward: reduce-scatter the gradients), with their global positions.
    Communicator* cp = rt.parallel.cp;
    const std::vector<at::Tensor> kv = rt.backend->gather_context_parallel_kv(k, v, *cp);
    k = kv[0];
    v = kv[1];
    k_positions = cp->all_gather(positions.contiguous(), 0);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hn));
  // The core attention and its probe: the selective "core_attn" recompute region.
  const SelfAttention* self = this;
  CheckpointFn core = [self, rt, positions, k_positions,
                       scale](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    at::Tensor context =
        rt.backend->causal_attention(in[0], in[1], in[2], positions, k_positions, scale);
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
Mlp::Mlp(std::string name, const ModelConfig* config, ParameterFactory& params)
    : Module(name, config),
      linear_fc1_(name + ".linear_fc1", config, params, config->hidden, config->fc1_width(),
                  config->bias_linear, /*gather_output=*/false, config->init_std,
                  /*stacked_parts=*/config->activation == ActivationKind::swiglu ? 2 : 1),
      linear_fc2_(name + ".linear_fc2", config, params, config->ffn_hidden, config->hidden,
                  config->bias_linear, scaled_std(*config)) {}

std::pair<at::Tensor, at::Tensor> Mlp::forward(const ModelRuntime& rt,
                                               const at::Tensor& x) const {
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
  at::Tensor out = recompute_mlp(*config_, rt) ? checkpoint(body, {x}, rt.rng, name_)[0]
                                                : body({x})[0];
  return {out, linear_fc2_.bias()};
}

// ---------------------------------------------------------------- layer
TransformerLayer::TransformerLayer(std::string name, const ModelConfig* config,
                                   ParameterFactory& params, std::int64_t index,
                                   const ParallelContext& parallel)
    : Module(name, config),
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
  auto group = [&](LayerStage stage, const char* suffix, RegionFn fn, const at::Tensor& in) {
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
Embedding::Embedding(std::string name, const ModelConfig* config, ParameterFactory& params)
    : Module(std::move(name), config) {
  word_ = params.make(name_ + ".word_embeddings.weight", {config->vocab, config->hidden},
                      InitKind::normal, config->init_std, ShardSpec::along(0));
  if (config->position_embedding == PositionEmbeddingKind::learned) {
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
    h = h + rt.backend->embedding(positions, position_).unsqueeze(1);  // [s, 1, h]
  }
  if (config_->fp32_residual) h = h.to(at::kFloat);
  if (config_->sequence_parallel) h = scatter_to_sequence_parallel_region(h, tp);
  at::Generator gen = rt.rng->generator(hidden_dropout_stream(*config_));
  return rt.backend->dropout(h, config_->dropout, rt.training, gen);
}

// ---------------------------------------------------------------- model
GPTModel::GPTModel(const ModelConfig& config, const Backend& backend, ParallelContext parallel,
                   ParameterSource* weights)
    : config_(config),
      params_(config_, parallel.tp_rank(), parallel.tp_size(), backend.device(), weights) {
  config_.validate(parallel.tp_size(), parallel.cp_size(), parallel.dp_size(), parallel.ep_size());
  rng_ = backend.make_rng_tracker();
  rng_->seed(config_.seed, parallel.tp_rank());
  runtime_ = ModelRuntime{&backend, parallel, rng_.get(), true};

  embedding_ = std::make_unique<Embedding>("embedding", &config_, params_);
  layers_.reserve(static_cast<size_t>(config_.layers));
  for (std::int64_t i = 0; i < config_.layers; ++i) {
    layers_.emplace_back("decoder.layers." + std::to_string(i), &config_, params_, i, parallel);
  }
  final_layernorm_ = std::make_unique<Norm>("decoder.final_layernorm", &config_, params_);
  // Tied: the word embeddings' [V/tp, h] shard is the output layer's weight (the
  // same leaf, so its gradient sums both uses).
  output_layer_ =
      config_.untie_embeddings
          ? std::make_unique<ColumnParallelLinear>(
                "output_layer", &config_, params_, config_.hidden, config_.vocab,
                /*bias=*/false, config_.gather_output, config_.init_std)
          : std::make_unique<ColumnParallelLinear>(
                "output_layer", &config_, embedding_->word_embeddings(), config_.gather_output);
  const std::int64_t mtp_modules = config_.mtp_repeated_layer ? 1 : config_.mtp_layers;
  for (std::int64_t k = 0; k < mtp_modules; ++k)
    mtp_layers_.push_back(std::make_unique<MultiTokenPredictionLayer>(
        "mtp.layers." + std::to_string(k), &config_, params_, parallel));
  if (config_.mtp_layers > 0)
    mtp_tracked_losses_ = at::zeros(
        {config_.mtp_layers}, at::TensorOptions().dtype(at::kDouble).device(backend.device()));
  if (weights) weights->finish();
  if (config_.observe_wgrad)
    wgrad_sites_ = std::make_unique<WeightGradientSites>(params_.parameters());

  graph_runner_ = backend.make_graph_runner();
  if (!graph_runner_->supports(config_.graphs)) {
    throw ModelConfigError(
        "graphs", std::string(to_string(config_.graphs)),
        "backend " + std::string(backend.name()) + " has no phased graph runner");
  }
  graph_runner_->configure(GraphSettings{config_.graphs, config_.graph_warmup, rng_.get()});
  std::vector<at::Tensor> values;
  for (const Parameter& p : params_.parameters()) values.push_back(p.value);
  for (const TransformerLayer& layer : layers_)
    if (layer.moe())
      for (const at::Tensor& b : layer.moe()->router().persistent_buffers()) values.push_back(b);
  graph_runner_->set_static_parameters(values);
}

GPTModel::~GPTModel() = default;

at::Tensor GPTModel::forward(const at::Tensor& tokens, const at::Tensor& positions,
                             std::optional<bool> runtime_gather_output, const MtpBatch* mtp) {
  const ModelRuntime& rt = runtime_;
  at::Tensor h = embedding_->forward(rt, tokens, positions);
  // Full-iteration capture: the first activation is where "kernels have not
  // run" starts (the reference poisons it; everything after is NaN).
  graph_runner_->poison_if_capturing(h);
  h = decoder_forward(h, positions);
  h = final_layernorm_->forward(rt, h);
  const bool gathered = resolve_gather_output(output_layer_->gather_output(), runtime_gather_output);
  // Megatron computes the MTP loss in training only (evaluation logs the LM loss).
  if (mtp != nullptr && !mtp_layers_.empty() && rt.training)
    h = multi_token_prediction(h, *mtp, positions, runtime_gather_output);
  at::Tensor logits = output_layer_->forward(rt, h, gathered);
  observe_tensor(*output_layer_, "output_logits", SourceKind::output_logits, logits,
                 logits_tp_shard_dim(output_layer_->gather_output(), runtime_gather_output), 0, 1);
  return logits;
}

void GPTModel::backward_starts() {
  if (wgrad_sites_) wgrad_sites_->backward_starts();
}

void GPTModel::backward_finished() {
  if (wgrad_sites_) wgrad_sites_->deliver();
}

at::Tensor GPTModel::decoder_forward(const at::Tensor& h, const at::Tensor& positions) {
  const std::int64_t L = config_.layers;
  const std::int64_t n = config_.recompute_layers;
  const bool full = runtime_.training && (config_.recompute == RecomputeKind::full_uniform ||
                                          config_.recompute == RecomputeKind::full_block);
  if (!full) return run_layers(0, L, h, positions);
  // The chunk function: layers [begin, end) with their residual observations
  // inside, so the chunk's no-grad forward observes each layer once and the
  // suspended recomputation does not.
  auto chunk = [this, positions](std::int64_t begin, std::int64_t end) -> CheckpointFn {
    return [this, positions, begin, end](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{run_layers(begin, end, in[0], positions)};
    };
  };
  auto label = [](std::int64_t begin, std::int64_t end) {
    return "decoder.layers[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
  };
  at::Tensor x = h;
  if (config_.recompute == RecomputeKind::full_uniform) {
    for (std::int64_t b = 0; b < L; b += n) {
      const std::int64_t e = std::min(L, b + n);
      x = checkpoint(chunk(b, e), {x}, rng_.get(), label(b, e))[0];
    }
  } else {  // full_block: the first n layers each checkpointed, the rest plain
    for (std::int64_t i = 0; i < L; ++i) {
      x = i < n ? checkpoint(chunk(i, i + 1), {x}, rng_.get(), label(i, i + 1))[0]
                : run_layers(i, i + 1, x, positions);
    }
  }
  return x;
}

at::Tensor GPTModel::run_layers(std::int64_t begin, std::int64_t end, const at::Tensor& h,
                                const at::Tensor& positions) {
  at::Tensor x = h;
  for (std::int64_t i = begin; i < end; ++i) {
    // The step loop's heartbeat (rank_status.h): each layer's forward, and its
    // backward when the gradient of its output arrives, is progress.
    step_heartbeat(StepPass::forward, i);
    at::Tensor accumulator = x;
    x = run_layer(i, x, positions);
    if (x.requires_grad())
      x.register_hook([i](const at::Tensor&) { step_heartbeat(StepPass::backward, i); });
    // Eager, outside any graphed layer: with per-layer graphs the contribution is
    // rebuilt here as output - accumulator every step.
    observe_layer_residuals(layers_[static_cast<size_t>(i)], accumulator, x);
  }
  return x;
}

at::Tensor GPTModel::run_layer(std::int64_t index, const at::Tensor& h,
                               const at::Tensor& positions) {
  const TransformerLayer* layer = &layers_[static_cast<size_t>(index)];
  // Graphs are a training feature (Megatron captures training layers only):
  // evaluation forwards run the layer eagerly.
  if (config_.graphs != GraphMode::per_layer || !runtime_.training) {
    return layer->forward(runtime_, h, positions);
  }
  if (!config_.graph_scope.whole_layer()) {
    // Partial graphs: the captured stage groups are regions; their outputs
    // feed eager code that keeps them for its backward, so they are clones (a
    // later microbatch's replay rewrites the static buffers).
    GraphRunner* runner = graph_runner_.get();
    const LayerRegionRunner regions = [runner](const std::string& name, const RegionFn& fn,
                                               const std::vector<at::Tensor>& inputs) {
      return runner->run_region(name, fn, inputs, /*clone_outputs=*/true);
    };
    return layer->forward(runtime_, h, positions, &regions);
  }
  const ModelRuntime* rt = &runtime_;
  RegionFn fn = [layer, rt, positions](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{layer->forward(*rt, in[0], positions)};
  };
  const bool last = index + 1 == config_.layers;  // Megatron hands out a clone of the last layer's buffer
  return graph_runner_->run_region(layer->canonical_name(), fn, {h}, last)[0];
}

void GPTModel::begin_step() {
  if (wgrad_sites_) wgrad_sites_->clear();
  if (mtp_tracked_losses_.defined()) mtp_tracked_losses_.zero_();
  for (TransformerLayer& layer : layers_)
    if (layer.moe()) layer.moe()->router().begin_step();
}

std::vector<LoggedStatistic> GPTModel::logged_moe_statistics(std::int64_t microbatches) {
  const MoeConfig& m = config_.moe;
  if (!m.per_layer_logging) return {};
  // One fp64 vector of every layer's [losses (2), load (E)], reduced at once.
  std::vector<at::Tensor> parts;
  std::vector<const TransformerLayer*> moe_layers;
  for (const TransformerLayer& layer : layers_) {
    if (!layer.moe()) continue;
    const TopKRouter& router = layer.moe()->router();
    parts.push_back(router.step_tracked_losses().to(at::kDouble));
    parts.push_back(router.step_tokens_per_expert().to(at::kDouble));
    moe_layers.push_back(&layer);
  }
  if (parts.empty()) return {};
  at::NoGradGuard no_grad;
  const ParallelContext& par = runtime_.parallel;
  at::Tensor all = at::cat(parts);
  // Fault collective-skipped-when-zero: a rank whose share is all zeros (its
  // tokens all padding) skips the sum its peers wait in.
  const bool skip_zero = fault_active(fault_collective_skipped_when_zero);
  const auto sum = [skip_zero](Communicator* group, const at::Tensor& t) {
    return skip_zero && !t.ne(0).any().item<bool>() ? t : sum_over(group, t);
  };
  // The sequence's ranks hold shares (tp under SP, cp); DP ranks hold other data.
  if (config_.sequence_parallel) all = sum(par.tp, all);
  all = sum(par.dp, sum(par.cp, all)).cpu();
  const double* v = all.data_ptr<double>();
  const double per_microbatch = 1.0 / (double(microbatches) * double(par.dp_size()));
  std::vector<LoggedStatistic> out;
  const std::int64_t stride = 2 + m.experts;
  for (std::size_t l = 0; l < moe_layers.size(); ++l) {
    const std::string layer = moe_layers[l]->canonical_name();
    const double* row = v + static_cast<std::int64_t>(l) * stride;
    if (m.aux_loss_coef > 0)
      out.push_back({"moe-load-balancing-loss", layer, row[0] * per_microbatch});
    if (m.z_loss_coef > 0) out.push_back({"moe-z-loss", layer, row[1] * per_microbatch});
    for (std::int64_t e = 0; e < m.experts; ++e)
      out.push_back({"moe-expert-load", layer + "/expert-" + std::to_string(e), row[2 + e]});
  }
  return out;
}

void GPTModel::end_step() {
  for (TransformerLayer& layer : layers_)
    if (layer.moe()) layer.moe()->router().update_expert_bias(runtime_);
  graph_runner_->end_step();
}

std::vector<at::Tensor> GPTModel::run_iteration(const RegionFn& body,
                                                const std::vector<at::Tensor>& inputs) {
  return graph_runner_->run_iteration(body, inputs);
}

at::Tensor GPTModel::loss(const at::Tensor& logits, const at::Tensor& labels) const {
  return token_losses(logits, labels).mean();
}

at::Tensor GPTModel::token_losses(const at::Tensor& logits, const at::Tensor& labels) const {
  // Vocab-parallel cross entropy (Megatron's; the backend's op). Gathered
  // logits hold the full vocabulary: the same formula, no collectives.
  const bool sharded = logits.size(-1) != config_.vocab;
  Communicator* tp = sharded ? runtime_.parallel.tp : nullptr;
  const std::int64_t start = sharded ? runtime_.parallel.tp_rank() * logits.size(-1) : 0;
  return runtime_.backend->vocab_parallel_cross_entropy(logits, labels, start, tp);
}

void GPTModel::finalize_grads() {
  const ParallelContext& par = runtime_.parallel;
  for (Parameter& p : params_.parameters()) {
    if (!p.value.grad().defined()) p.value.mutable_grad() = at::zeros_like(p.value);
    at::Tensor g = p.value.grad();
    // Fault sp-grad-not-reduced (EleutherAI/gpt-neox PR 1259): partial sums stay.
    if (p.sequence_parallel && par.tp_size() > 1 && !fault_active(fault_sp_grad_not_reduced)) {
      g.copy_(par.tp->all_reduce(g.contiguous(), ReduceOp::sum));
    }
    if (p.expert >= 0 && par.ep_size() > 1) {
      // Only the cp x dp ranks of this ep rank hold expert p.expert: every rank
      // sums a [E, ...] stack holding its own experts' gradients in their
      // global slots (zeros elsewhere; the same shape on every rank), then
      // keeps its slot.
      std::vector<std::int64_t> shape{config_.moe.experts};
      shape.insert(shape.end(), g.sizes().begin(), g.sizes().end());
      at::Tensor stack = at::zeros(shape, g.options());
      stack.select(0, p.expert).copy_(g);
      if (par.cp_size() > 1) stack = par.cp->all_reduce(stack, ReduceOp::sum);
      if (par.dp_size() > 1) stack = par.dp->all_reduce(stack, ReduceOp::sum);
      g.copy_(stack.select(0, p.expert));
      continue;
    }
    if (par.cp_size() > 1) g.copy_(par.cp->all_reduce(g.contiguous(), ReduceOp::sum));
    if (par.dp_size() > 1) g.copy_(par.dp->all_reduce(g.contiguous(), ReduceOp::sum));
  }
}

at::Tensor context_parallel_positions(std::int64_t seq, int cp, int cp_rank) {
  if (cp == 1) return at::arange(seq, at::kLong);
  const std::int64_t chunk = seq / (2 * cp);
  const std::int64_t first = cp_rank * chunk, second = (2 * cp - 1 - cp_rank) * chunk;
  return at::cat({at::arange(first, first + chunk, at::kLong),
                  at::arange(second, second + chunk, at::kLong)});
}

at::Tensor GPTModel::local_positions() const {
  return context_parallel_positions(config_.seq, runtime_.parallel.cp_size(),
                                    runtime_.parallel.cp_rank())
      .to(device());
}

at::Tensor GPTModel::slice_sequence(const at::Tensor& full) const {
  if (runtime_.parallel.cp_size() == 1) return full.to(device());
  return full.to(device()).index_select(0, local_positions());
}

std::int64_t GPTModel::global_microbatch(std::int64_t m, std::int64_t microbatches) const {
  return runtime_.parallel.dp_rank() * microbatches + m;
}

}  // namespace parity
