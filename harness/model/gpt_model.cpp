#include "harness/model/gpt_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gather_output.h"
#include "harness/model/layer_input_gradients.h"
#include "harness/model/moe_layer.h"
#include "harness/model/multi_token_prediction.h"  // the members mtp_layers_ hold
#include "harness/model/weight_gradient_sites.h"
#include "harness/observation/execution_point.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rank_status.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(collective_skipped_when_zero);
PARITY_USES_FAULT(sp_grad_not_reduced);
PARITY_USES_FAULT(local_layer_names);
PARITY_USES_FAULT(last_stage_logits_everywhere);
PARITY_USES_FAULT(mtp_layer_number_collision);
PARITY_USES_FAULT(moe_tracker_size_per_stage);

namespace parity {

namespace {
// The parameters made since `from` belong to layer `number`.
void tag_layer(std::vector<Parameter>& params, std::size_t from, std::int64_t number) {
  for (std::size_t i = from; i < params.size(); ++i) params[i].layer = number;
}

// The embedding group's one message per step: the word embeddings' gradient,
// on a point-to-point channel of its own (the schedule's use 0 and 1).
constexpr int kEmbeddingGroupChannel = 2;
constexpr std::int64_t kEmbeddingGroupMessage = -2;
}  // namespace

// ---------------------------------------------------------------- model
GPTModel::GPTModel(const ModelConfig& config, const Backend& backend, ParallelContext parallel,
                   ParameterSource* weights)
    : config_(config),
      params_(config_, parallel.tp_rank(), parallel.tp_size(), backend.device(), weights) {
  params_.set_expert_tp(parallel.expert_tp_rank(), parallel.expert_tp_size());
  config_.validate(parallel.tp_size(), parallel.cp_size(), parallel.dp_size(), parallel.ep_size());
  const int pp_rank = parallel.pp_rank();
  if (parallel.pp_size() != config_.pipeline.pp)
    throw ModelConfigError("pp", std::to_string(config_.pipeline.pp),
                           "the model has " + std::to_string(config_.pipeline.pp) +
                               " stages but the rank's pipeline group has " +
                               std::to_string(parallel.pp_size()));
  if (config_.packed()) {
    packing_ = pack_sequences(config_.packed_seq_lengths, config_.seq, parallel.cp_size());
    single_rank_packing_ = pack_sequences(config_.packed_seq_lengths, config_.seq, 1);
    packed_tables_ = packed_position_tables(*packing_, backend.device());
  }
  rng_ = backend.make_rng_tracker();
  // Megatron seeds each stage apart (seed + 100 * pipeline rank).
  rng_->seed(config_.seed + 100 * static_cast<std::uint64_t>(pp_rank), parallel.tp_rank());
  runtime_ = ModelRuntime{&backend, parallel, rng_.get(), true};
  if (packing_) runtime_.packing = &packed_tables_;

  // This rank's chunks (pipeline_layout.h; one chunk holding everything
  // without PP), each built in layer order: embedding, decoder layers, then
  // final norm, output layer and MTP depths on the chunk that holds the loss.
  const PipelineLayoutConfig layout = config_.pipeline_layout();
  const int chunks = virtual_stages(layout);
  const ChunkId embedding_at = embedding_chunk(layout), loss_at = loss_chunk(layout);
  std::int64_t layer_count = 0;
  for (int v = 0; v < chunks; ++v) layer_count += num_layers_to_build(layout, v, pp_rank);
  layers_.reserve(static_cast<size_t>(layer_count));
  for (int v = 0; v < chunks; ++v) {
    ModelChunk chunk;
    chunk.vp_stage = v;
    chunk.first_layer = layer_offset(layout, v, pp_rank);
    chunk.layer_count = num_layers_to_build(layout, v, pp_rank);
    chunk.first_slot = static_cast<std::int64_t>(layers_.size());
    chunk.embeds = embedding_at == ChunkId{pp_rank, v};
    chunk.has_head = loss_at == ChunkId{pp_rank, v};
    chunk.first_virtual_stage = pp_rank == 0 && v == 0;
    chunk.last_virtual_stage = pp_rank == layout.pp - 1 && v == chunks - 1;
    chunk.first_parameter = params_.parameters().size();
    if (chunk.embeds) embedding_ = std::make_unique<Embedding>("embedding", &config_, params_);
    for (std::int64_t i = chunk.first_layer; i < chunk.first_layer + chunk.layer_count; ++i) {
      // Fault local-layer-names: the layer's index within its chunk names it.
      const std::int64_t named = fault_active(fault_local_layer_names) ? i - chunk.first_layer : i;
      const std::size_t before = params_.parameters().size();
      layers_.emplace_back("decoder.layers." + std::to_string(named), &config_, params_, i,
                           parallel);
      tag_layer(params_.parameters(), before, i);
    }
    if (chunk.has_head) build_head(parallel, chunk);
    chunk.parameter_count = params_.parameters().size() - chunk.first_parameter;
    chunks_.push_back(chunk);
  }
  if (word_embeddings_on_two_stages() && embedding_) {
    for (Parameter& p : params_.parameters())
      if (p.value.is_same(embedding_->word_embeddings())) {
        p.shared_embedding = true;
        p.shared = pp_rank != 0;
      }
  }
  if (config_.mtp_layers > 0 && !mtp_layers_.empty())
    mtp_tracked_losses_ = at::zeros(
        {config_.mtp_layers}, at::TensorOptions().dtype(at::kDouble).device(backend.device()));
  if (weights && layout.pp > 1) {
    // A file of the whole model: what the other stages build is theirs.
    for (int p = 0; p < layout.pp; ++p)
      for (int v = 0; v < chunks && p != pp_rank; ++v) {
        const std::int64_t first = layer_offset(layout, v, p);
        for (std::int64_t i = first; i < first + num_layers_to_build(layout, v, p); ++i)
          weights->held_elsewhere_under("decoder.layers." + std::to_string(i) + ".");
      }
    if (embedding_at.pp_rank != pp_rank) weights->held_elsewhere_under("embedding.");
    if (loss_at.pp_rank != pp_rank)
      for (const char* head : {"decoder.final_layernorm.", "output_layer.", "mtp."})
        weights->held_elsewhere_under(head);
  }
  if (weights) weights->finish();
  if (config_.observe_wgrad)
    wgrad_sites_ = std::make_unique<WeightGradientSites>(params_.parameters());

  layer_input_gradients_ = std::make_shared<LayerInputGradients>();
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

bool GPTModel::word_embeddings_on_two_stages() const {
  return config_.pipelined() && (!config_.untie_embeddings || config_.mtp_layers > 0);
}

void GPTModel::build_head(const ParallelContext& parallel, const ModelChunk& chunk) {
  // Pipelined, the head's stage keeps its own copy of the word embeddings where
  // the tied output layer or the MTP depths read them (Megatron's
  // setup_embeddings_and_output_layer): the seeded init makes the first
  // stage's values; the embedding group keeps the copies equal (finalize_grads).
  // MTP under PP needs rope (ModelConfig), so no position embeddings.
  if (!embedding_ && word_embeddings_on_two_stages())
    embedding_ = std::make_unique<Embedding>("embedding", &config_, params_,
                                             /*position_embeddings=*/false);
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
  const PipelineLayoutConfig layout = config_.pipeline_layout();
  for (std::int64_t k = 0; k < mtp_modules; ++k) {
    // Megatron numbers an MTP depth's transformer layer after the decoder's
    // (mtp_transformer_layer_number), so no per-layer label is a backbone
    // layer's. Fault mtp-layer-number-collision: the stage's layer offset plus
    // the depth, a decoder layer's number.
    const std::int64_t number =
        fault_active(fault_mtp_layer_number_collision)
            ? chunk.first_layer + k
            : mtp_transformer_layer_number(layout, chunk.vp_stage, parallel.pp_rank(),
                                           static_cast<int>(k));
    const std::size_t before = params_.parameters().size();
    mtp_layers_.push_back(std::make_unique<MultiTokenPredictionLayer>(
        "mtp.layers." + std::to_string(k), &config_, params_, parallel, number));
    tag_layer(params_.parameters(), before, number);
  }
}

GPTModel::~GPTModel() = default;

const ModelChunk& GPTModel::chunk(int index) const {
  if (index < 0 || index >= chunk_count())
    throw std::out_of_range("model chunk " + std::to_string(index) + " of " +
                            std::to_string(chunk_count()));
  return chunks_[static_cast<std::size_t>(index)];
}

at::Tensor GPTModel::forward(const at::Tensor& tokens, const at::Tensor& positions,
                             std::optional<bool> runtime_gather_output, const MtpBatch* mtp) {
  if (chunks_.size() != 1 || !chunks_[0].embeds || !chunks_[0].has_head)
    PARITY_FAIL_INTERNAL(
        "GPTModel::forward runs a whole model: a pipeline stage runs its "
        "chunks with forward_chunk");
  return forward_chunk(0, tokens, positions, runtime_gather_output, mtp);
}

at::Tensor GPTModel::forward_chunk(int chunk, const at::Tensor& input, const at::Tensor& positions,
                                   std::optional<bool> runtime_gather_output, const MtpBatch* mtp) {
  const ModelChunk& c = this->chunk(chunk);
  const ModelRuntime& rt = runtime_;
  at::Tensor h = input;
  if (c.embeds) {
    h = embedding_->forward(rt, input, positions);
    // Full-iteration capture: the first activation is where "kernels have not
    // run" starts (the reference poisons it; everything after is NaN).
    graph_runner_->poison_if_capturing(h);
  }
  h = decoder_forward(c, h, positions);
  if (!c.has_head) {
    // Fault last-stage-logits-everywhere: a stage without the output layer
    // observes its chunk's output as the logits.
    if (fault_active(fault_last_stage_logits_everywhere)) {
      static const Module logits_owner("output_layer", &config_);
      observe_tensor(logits_owner, "output_logits", SourceKind::output_logits, h, std::nullopt, 0,
                     1);
    }
    return h;
  }
  h = final_layernorm_->forward(rt, h);
  const bool gathered =
      resolve_gather_output(output_layer_->gather_output(), runtime_gather_output);
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

void GPTModel::backward_finished(int chunk) {
  if (!wgrad_sites_) return;
  if (chunk < 0) {
    wgrad_sites_->deliver(0, params_.parameters().size());
  } else {
    const ModelChunk& c = this->chunk(chunk);
    wgrad_sites_->deliver(c.first_parameter, c.parameter_count);
  }
}

at::Tensor GPTModel::decoder_forward(const ModelChunk& c, const at::Tensor& h,
                                     const at::Tensor& positions) {
  // Slots of layers_ (the chunk's layers are consecutive there); labels and
  // heartbeats use the global layer numbers.
  const std::int64_t first = c.first_slot, L = c.layer_count;
  const std::int64_t n = config_.recompute_layers;
  const bool full = runtime_.training && (config_.recompute == RecomputeKind::full_uniform ||
                                          config_.recompute == RecomputeKind::full_block);
  if (!full) return run_layers(first, first + L, h, positions);
  // The chunk function: layers [begin, end) with their residual observations
  // inside, so the chunk's no-grad forward observes each layer once and the
  // suspended recomputation does not. Megatron's TransformerBlock recomputes
  // within its own layers (one pipeline chunk).
  auto chunk = [this, positions, first](std::int64_t begin, std::int64_t end) -> CheckpointFn {
    return [this, positions, first, begin, end](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{run_layers(first + begin, first + end, in[0], positions)};
    };
  };
  auto label = [&c](std::int64_t begin, std::int64_t end) {
    return "decoder.layers[" + std::to_string(c.first_layer + begin) + ":" +
           std::to_string(c.first_layer + end) + "]";
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
                : run_layers(first + i, first + i + 1, x, positions);
    }
  }
  return x;
}

at::Tensor GPTModel::run_layers(std::int64_t begin, std::int64_t end, const at::Tensor& h,
                                const at::Tensor& positions) {
  at::Tensor x = h;
  for (std::int64_t slot = begin; slot < end; ++slot) {
    const TransformerLayer& layer = layers_[static_cast<size_t>(slot)];
    const std::int64_t number = layer.index();
    // The step loop's heartbeat (rank_status.h): each layer's forward, and its
    // backward when the gradient of its output arrives, is progress.
    step_heartbeat(StepPass::forward, number);
    at::Tensor accumulator = x;
    if (runtime_.training)
      LayerInputGradients::watch(layer_input_gradients_, accumulator, number,
                                 current_execution_point().microbatch);
    x = run_layer(slot, x, positions, slot + 1 == end);
    if (x.requires_grad())
      x.register_hook([number](const at::Tensor&) { step_heartbeat(StepPass::backward, number); });
    // Eager, outside any graphed layer: with per-layer graphs the contribution is
    // rebuilt here as output - accumulator every step.
    observe_layer_residuals(layer, accumulator, x);
  }
  return x;
}

at::Tensor GPTModel::run_layer(std::int64_t slot, const at::Tensor& h, const at::Tensor& positions,
                               bool last_of_chunk) {
  const TransformerLayer* layer = &layers_[static_cast<size_t>(slot)];
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
  // Megatron hands out a clone of the last layer's buffer (of its TransformerBlock).
  return graph_runner_->run_region(layer->canonical_name(), fn, {h}, last_of_chunk)[0];
}

void GPTModel::begin_step() {
  if (wgrad_sites_) wgrad_sites_->clear();
  layer_input_gradients_->clear();
  if (mtp_tracked_losses_.defined()) mtp_tracked_losses_.zero_();
  for (TransformerLayer& layer : layers_)
    if (layer.moe()) layer.moe()->router().begin_step();
}

std::vector<LoggedStatistic> GPTModel::logged_moe_statistics(std::int64_t microbatches) {
  const MoeConfig& m = config_.moe;
  if (!m.enabled() || !m.per_layer_logging) return {};
  // Megatron's tracker: one row per layer number of the whole model (the
  // decoder's, then the MTP depths'), [losses (2), load (E)] each, on every
  // rank, so every pipeline stage holds the same vector, with zeros in the
  // rows of the layers it does not build (or that are dense), and takes part
  // in every sum whatever it holds.
  const std::int64_t stride = 2 + m.experts;
  // Fault moe-tracker-size-per-stage (NVIDIA/Megatron-LM #3400, #3401): the
  // stage sizes the vector by the layers it builds and fills it in their order.
  const bool per_stage = fault_active(fault_moe_tracker_size_per_stage);
  const std::int64_t rows =
      per_stage ? static_cast<std::int64_t>(layers_.size()) : config_.layers + config_.mtp_layers;
  at::NoGradGuard no_grad;
  at::Tensor all =
      at::zeros({rows * stride}, at::TensorOptions().dtype(at::kDouble).device(device()));
  for (std::size_t slot = 0; slot < layers_.size(); ++slot) {
    const TransformerLayer& layer = layers_[slot];
    if (!layer.moe()) continue;
    const TopKRouter& router = layer.moe()->router();
    const std::int64_t row = per_stage ? static_cast<std::int64_t>(slot) : layer.index();
    all.narrow(0, row * stride, 2).copy_(router.step_tracked_losses());
    all.narrow(0, row * stride + 2, m.experts).copy_(router.step_tokens_per_expert());
  }
  const ParallelContext& par = runtime_.parallel;
  // Fault collective-skipped-when-zero: a rank whose share is all zeros (its
  // tokens all padding, or a pipeline stage without MoE layers) skips the sum
  // its peers wait in.
  const bool skip_zero = fault_active(fault_collective_skipped_when_zero);
  const auto sum = [skip_zero](Communicator* group, const at::Tensor& t) {
    return skip_zero && !t.ne(0).any().item<bool>() ? t : sum_over(group, t);
  };
  // Each stage adds its own layers' rows (Megatron's sum over the pipeline
  // group first); then the sequence's ranks hold shares (tp under SP, cp) and
  // DP ranks hold other data.
  all = sum(par.pp, all);
  if (config_.sequence_parallel) all = sum(par.tp, all);
  all = sum(par.dp, sum(par.cp, all)).cpu();
  const double* v = all.data_ptr<double>();
  const double per_microbatch = 1.0 / (double(microbatches) * double(par.dp_size()));
  std::vector<LoggedStatistic> out;
  // The MoE layers by their global numbers, the same list on every stage (the
  // per-stage fault's vector may hold fewer rows).
  for (std::int64_t i = 0; i < std::min(rows, config_.layers); ++i) {
    if (!m.is_moe_layer(i, config_.layers)) continue;
    const std::string layer = "decoder.layers." + std::to_string(i);
    const double* row = v + i * stride;
    if (m.aux_loss_coef > 0)
      out.push_back({"moe-load-balancing-loss", layer, row[0] * per_microbatch});
    if (m.z_loss_coef > 0) out.push_back({"moe-z-loss", layer, row[1] * per_microbatch});
    for (std::int64_t e = 0; e < m.experts; ++e)
      out.push_back({"moe-expert-load", layer + "/expert-" + std::to_string(e), row[2 + e]});
  }
  return out;
}

std::vector<std::pair<std::string, double>> GPTModel::layer_input_gradient_norms() {
  return layer_input_gradients_->take_norms();
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
  at::Tensor losses = runtime_.backend->vocab_parallel_cross_entropy(logits, labels, start, tp);
  // Packed sequences: padding is no token (its loss is 0, so is its gradient).
  if (packing_) losses = losses.masked_fill(local_valid_tokens().logical_not().unsqueeze(1), 0);
  return losses;
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
    if (p.expert >= 0 && par.edp != nullptr) {
      // Experts split over a TP size of their own: the ranks holding the same
      // piece of the same expert are the expert-data-parallel group
      // (Megatron's expert DDP reduces over it).
      if (par.edp->size() > 1) g.copy_(par.edp->all_reduce(g.contiguous(), ReduceOp::sum));
      continue;
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
  if (word_embeddings_on_two_stages()) sum_over_embedding_group();
}

void GPTModel::sum_over_embedding_group() {
  // Megatron's _allreduce_word_embedding_grads over the embedding group (the
  // first and the last stage of this rank's pipeline). A group of two: each
  // side sends its gradient and adds the other's, so both hold the sum, bitwise
  // alike (a + b == b + a). The stages between take no part.
  const ParallelContext& par = runtime_.parallel;
  const int stage = par.pp_rank(), last = par.pp_size() - 1;
  if (stage != 0 && stage != last) return;
  const int peer = stage == 0 ? last : 0;
  for (Parameter& p : params_.parameters()) {
    if (!p.shared_embedding) continue;
    at::Tensor g = p.value.grad();
    const std::string label = "the word embeddings' gradient (embedding group)";
    const std::vector<at::Tensor> got = par.pp->exchange(
        {PointToPointOp::send(peer, g.contiguous(), kEmbeddingGroupMessage, label,
                              kEmbeddingGroupChannel),
         PointToPointOp::recv(peer, g, kEmbeddingGroupMessage, label, kEmbeddingGroupChannel)});
    g.add_(got.at(0));
  }
}

at::Tensor context_parallel_positions(std::int64_t seq, int cp, int cp_rank) {
  if (cp == 1) return at::arange(seq, at::kLong);
  const std::int64_t chunk = seq / (2 * std::int64_t{cp});
  const std::int64_t first = cp_rank * chunk, second = (2 * cp - 1 - cp_rank) * chunk;
  return at::cat(
      {at::arange(first, first + chunk, at::kLong), at::arange(second, second + chunk, at::kLong)});
}

at::Tensor GPTModel::local_positions() const {
  const int cp_rank = runtime_.parallel.cp_rank();
  if (packing_) return packed_context_parallel_positions(*packing_, cp_rank).to(device());
  return context_parallel_positions(config_.seq, runtime_.parallel.cp_size(), cp_rank).to(device());
}

at::Tensor GPTModel::local_valid_tokens() const {
  if (!packing_) return at::Tensor();
  return packed_tables_.valid_of(local_positions());
}

MicrobatchData GPTModel::from_single_rank_layout(const MicrobatchData& data) const {
  if (!packing_) return data;
  return {relayout_packed(data.tokens, *single_rank_packing_, *packing_),
          relayout_packed(data.labels, *single_rank_packing_, *packing_)};
}

at::Tensor GPTModel::to_single_rank_layout(const at::Tensor& full) const {
  return packing_ ? relayout_packed(full, *packing_, *single_rank_packing_) : full;
}

MicrobatchData GPTModel::microbatch(std::int64_t index) const {
  if (packing_)
    return packed_microbatch_data(config_.seed, index, *packing_, config_.micro_batch,
                                  config_.vocab);
  return microbatch_data(config_.seed, index, config_.seq, config_.micro_batch, config_.vocab);
}

at::Tensor GPTModel::slice_sequence(const at::Tensor& full) const {
  if (runtime_.parallel.cp_size() == 1) return full.to(device());
  return full.to(device()).index_select(0, local_positions());
}

std::int64_t GPTModel::global_microbatch(std::int64_t m, std::int64_t microbatches) const {
  (void)microbatches;
  return m * runtime_.parallel.dp_size() + runtime_.parallel.dp_rank();
}

}  // namespace parity
