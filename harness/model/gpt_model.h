#pragma once
// A Megatron-style GPT stack written once against the Backend interface:
// embedding -> N transformer layers -> final norm -> vocab-parallel output layer.
// Activations are [s, b, h]; under sequence parallel the residual stream is
// [s/tp, b, h]. See docs/model.md.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/backend/backend.h"
#include "harness/model/init.h"
#include "harness/model/model_config.h"
#include "harness/model/parallel_context.h"
#include "harness/model/parameter_source.h"
#include "harness/model/sequence_packing.h"
#include "harness/observation/tensor_observation.h"

namespace parity {

struct Parameter {
  std::string name;  // canonical, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  at::Tensor value;  // this rank's shard (a leaf that requires grad)
  ShardSpec shard;   // how the full tensor is split over TP (an expert's: over ETP)
  // True when each TP rank sees only part of the sequence in the forward (norm
  // weights and row-parallel biases under SP) or only its own heads (the q/k
  // norms), so its gradient is a partial sum that finalize_grads all-reduces over TP.
  bool sequence_parallel = false;
  // A routed expert's weight: the GLOBAL expert index (ep_rank * E/ep + local).
  // Its gradient is summed over the ranks holding the same expert only.
  std::int64_t expert = -1;
  // The global number of the layer it belongs to (a decoder layer's index; an
  // MTP depth's transformer layer's, after the decoder's: Megatron's
  // layer_number - 1); -1 outside the layers. Per-layer labels come from it.
  std::int64_t layer = -1;
  // The word embeddings held by the first and the last pipeline stage (tied
  // embeddings or MTP with pp > 1): the embedding group sums their gradients
  // (Megatron's shared_embedding). `shared`: this is the last stage's copy,
  // which the optimizer's norms skip (Megatron's param.shared).
  bool shared_embedding = false;
  bool shared = false;
};

// What every module needs at forward time.
struct ModelRuntime {
  const Backend* backend = nullptr;
  ParallelContext parallel;
  RngTracker* rng = nullptr;
  bool training = true;
  // Packed sequences: the documents, positions and padding of every packed
  // position (the model's tables); null without packing.
  const PackedPositionTables* packing = nullptr;
  // The main loss's backward scale, given to every MoE aux loss (the driver
  // sets 1 / (microbatches * dp): each microbatch's aux loss is its share of
  // the step's mean, as each token's LM loss is).
  double aux_loss_scale = 1.0;
};

// A model object with a canonical dotted name (an observation owner).
class Module : public ObservationOwner {
 public:
  Module(std::string name, const ModelConfig* config) : name_(std::move(name)), config_(config) {}
  const std::string& canonical_name() const override { return name_; }
  std::optional<bool> config_sequence_parallel() const override {
    return config_->sequence_parallel;
  }

 protected:
  std::string name_;
  const ModelConfig* config_;
};

// Builds (full deterministic tensor -> this rank's shard) parameters.
class ParameterFactory {
 public:
  // Values are made on the CPU and copied to `device` (the backend's); from
  // `source` when given (it must outlive the factory's constructor calls), else
  // the seeded init.
  ParameterFactory(const ModelConfig& config, int tp_rank, int tp_size,
                   at::Device device = at::Device(at::kCPU), ParameterSource* source = nullptr)
      : config_(config),
        tp_rank_(tp_rank),
        tp_size_(tp_size),
        etp_rank_(tp_rank),
        etp_size_(tp_size),
        device_(device),
        source_(source) {}
  at::Tensor make(const std::string& name, std::vector<std::int64_t> full_shape, InitKind kind,
                  double std, ShardSpec shard, bool sequence_parallel = false);
  // The routed experts' TP group (Megatron's expert tensor parallel group;
  // the model's TP group unless set).
  void set_expert_tp(int rank, int size) {
    etp_rank_ = rank;
    etp_size_ = size;
  }
  // A routed expert's weight, global expert index `expert`: `shard` splits it
  // over the expert TP group.
  at::Tensor make_expert(const std::string& name, std::vector<std::int64_t> full_shape,
                         InitKind kind, double std, ShardSpec shard, std::int64_t expert);
  std::vector<Parameter>& parameters() { return parameters_; }
  // A parameter another rank makes (a routed expert of another EP rank): tells
  // the source, so that an unsharded file's entry for it is expected.
  void held_elsewhere(const std::string& name) {
    if (source_) source_->held_elsewhere(name);
  }

 private:
  at::Tensor make_over(const std::string& name, std::vector<std::int64_t> full_shape, InitKind kind,
                       double std, ShardSpec shard, bool sequence_parallel, int rank, int size);

  const ModelConfig& config_;
  int tp_rank_, tp_size_;
  int etp_rank_, etp_size_;
  at::Device device_;
  ParameterSource* source_;
  std::vector<Parameter> parameters_;
};

// Weight [out/tp, in]: split on the output dim. Under SP the input [s/tp, b, in]
// is all-gathered on dim 0 first (backward: reduce-scatter); otherwise it is
// copied into the TP region (backward: all-reduce). Output [s, b, out/tp], or
// gathered to [s, b, out] when resolve_gather_output(constructor, runtime) says so.
class ColumnParallelLinear : public Module {
 public:
  ColumnParallelLinear(std::string name, const ModelConfig* config, ParameterFactory& params,
                       std::int64_t in, std::int64_t out, bool bias, bool gather_output,
                       double init_std, std::int64_t stacked_parts = 1);
  // No parameters of its own: `shared_weight` (the word embeddings' shard, for
  // tied embeddings) is the weight; no bias.
  ColumnParallelLinear(std::string name, const ModelConfig* config, at::Tensor shared_weight,
                       bool gather_output);
  at::Tensor forward(const ModelRuntime& rt, const at::Tensor& x,
                     std::optional<bool> runtime_gather_output = std::nullopt) const;
  bool gather_output() const { return gather_output_; }
  const at::Tensor& weight() const { return weight_; }

 private:
  at::Tensor weight_, bias_;
  bool gather_output_;
};

// Weight [out, in/tp]: the input is already split on its last dim. The partial
// outputs are reduce-scattered on dim 0 under SP, else all-reduced. The bias is
// NOT added (Megatron's skip_bias_add): forward returns (output, bias) for the
// bias-dropout-add.
class RowParallelLinear : public Module {
 public:
  RowParallelLinear(std::string name, const ModelConfig* config, ParameterFactory& params,
                    std::int64_t in, std::int64_t out, bool bias, double init_std);
  std::pair<at::Tensor, at::Tensor> forward(const ModelRuntime& rt, const at::Tensor& x) const;
  const at::Tensor& bias() const { return bias_; }  // undefined without bias-linear

 private:
  at::Tensor weight_, bias_;
};

class Norm : public Module {
 public:
  // Over the hidden size; under SP its gradients are partial per TP rank.
  Norm(std::string name, const ModelConfig* config, ParameterFactory& params);
  // Over `width` channels (the last dim). `tp_partial`: each TP rank normalizes
  // only part of what the weights see (sequence shards, or its own heads for
  // the q/k norms), so finalize_grads sums the gradients over TP.
  Norm(std::string name, const ModelConfig* config, ParameterFactory& params, std::int64_t width,
       bool tp_partial);
  at::Tensor forward(const ModelRuntime& rt, const at::Tensor& x) const;
  // x [s, b, n, width]: one normalization over all n * width channels, the
  // weights applied to each head's channels (the fault qk-norm-over-whole-hidden).
  at::Tensor forward_over_heads(const ModelRuntime& rt, const at::Tensor& x) const;

 private:
  at::Tensor weight_, bias_;  // bias undefined for RMSNorm
};

// QKV column-parallel (query groups split over TP, Megatron's per-group
// [queries, key, value] layout), optional q/k norms, causal core attention,
// projection row-parallel. Owns the attention_context probe.
class SelfAttention : public Module {
 public:
  SelfAttention(const std::string& name, const ModelConfig* config, ParameterFactory& params);
  // x [s(/tp), b, h]; positions [s] global (int64). Returns (output, bias).
  std::pair<at::Tensor, at::Tensor> forward(const ModelRuntime& rt, const at::Tensor& x,
                                            const at::Tensor& positions) const;

 private:
  ColumnParallelLinear linear_qkv_;
  RowParallelLinear linear_proj_;
  std::optional<Norm> q_layernorm_, k_layernorm_;  // with qk_layernorm
};

// fc1 column-parallel, activation, fc2 row-parallel. Owns the mlp_output probe.
// Under selective recompute "core_attn" the core attention and its probe run in
// one checkpoint; under "mlp" the whole MLP and its probe do.
class Mlp : public Module {
 public:
  Mlp(const std::string& name, const ModelConfig* config, ParameterFactory& params);
  std::pair<at::Tensor, at::Tensor> forward(const ModelRuntime& rt, const at::Tensor& x) const;

 private:
  ColumnParallelLinear linear_fc1_;
  RowParallelLinear linear_fc2_;
};

class MoELayer;  // moe_layer.h

// Runs one captured stage group of a layer as the per-layer graph region
// `region` (GraphRunner::run_region) under partial graphs (graph_scope.h).
using LayerRegionRunner = std::function<std::vector<at::Tensor>(
    const std::string& region, const RegionFn& fn, const std::vector<at::Tensor>& inputs)>;

// input norm -> attention -> bias-dropout-add -> pre-MLP norm -> MLP (or the
// MoE block on the layers MoeConfig::layers selects) -> bias-dropout-add.
// Under selective recompute "layernorm" both norms run through
// CheckpointWithoutOutput (output freed once consumed, recomputed before the
// consumer's backward).
class TransformerLayer : public Module {
 public:
  // `index`: the layer's global index (MoeConfig::layers reads it; -1: not a
  // decoder layer, always dense); `parallel` places an MoE layer's experts (its ep rank).
  TransformerLayer(const std::string& name, const ModelConfig* config, ParameterFactory& params,
                   std::int64_t index = 0, const ParallelContext& parallel = {});
  TransformerLayer(TransformerLayer&&) noexcept;
  ~TransformerLayer() override;
  // Without `graphs`: every stage eagerly. With it (partial per-layer graphs):
  // the stage groups config->graph_scope captures run through it as regions
  // "<layer>.attn", ".mlp", ".moe", ".moe_router" and ".moe_post"; the rest
  // eagerly. The recorded region functions keep `rt` and `positions`: both
  // must outlive the graphs (the model's runtime and its rank's positions).
  at::Tensor forward(const ModelRuntime& rt, const at::Tensor& x, const at::Tensor& positions,
                     const LayerRegionRunner* graphs = nullptr) const;
  const SelfAttention& self_attention() const { return self_attention_; }
  // The global layer number (0-based; -1: not a decoder layer).
  std::int64_t index() const { return index_; }
  // The dense MLP (null on an MoE layer) and the MoE block (null on a dense one).
  const Mlp* mlp() const { return mlp_.get(); }
  MoELayer* moe() const { return moe_.get(); }

 private:
  // input norm -> attention -> bias-dropout-add.
  at::Tensor attention_half(const ModelRuntime& rt, const at::Tensor& x,
                            const at::Tensor& positions) const;
  // pre-MLP norm -> MLP or MoE block -> bias-dropout-add.
  at::Tensor mlp_half(const ModelRuntime& rt, const at::Tensor& h,
                      const at::Tensor& positions) const;
  // The MoE half in three stage groups (graph_scope moe_router): router graph,
  // eager experts, post-process graph.
  at::Tensor moe_half_split(const ModelRuntime& rt, const at::Tensor& h,
                            const at::Tensor& positions, const LayerRegionRunner& graphs) const;
  at::Tensor norm_output(const ModelRuntime& rt, const Norm& norm, const at::Tensor& x) const;

  std::int64_t index_;
  Norm input_layernorm_;
  SelfAttention self_attention_;
  Norm pre_mlp_layernorm_;
  std::unique_ptr<Mlp> mlp_;
  std::unique_ptr<MoELayer> moe_;
};

// Vocab-parallel word embeddings (rows split over TP, masked lookup, all-reduce)
// plus learned absolute position embeddings (replicated; none under rope); fp32 cast under
// fp32_residual; scattered to the SP region; embedding dropout.
class Embedding : public Module {
 public:
  // `position_embeddings` false: the word embeddings only (the last pipeline
  // stage's copy, which the embedding group syncs).
  Embedding(std::string name, const ModelConfig* config, ParameterFactory& params,
            bool position_embeddings = true);
  at::Tensor forward(const ModelRuntime& rt, const at::Tensor& tokens,
                     const at::Tensor& positions) const;
  const at::Tensor& word_embeddings() const { return word_; }

 private:
  at::Tensor word_, position_;  // position_ undefined under rope
};

// One value of Megatron's MoE metrics tracker or MTP loss tracker for a step
// (GPTModel::logged_moe_statistics, logged_mtp_losses).
struct LoggedStatistic {
  std::string metric;  // "moe-load-balancing-loss", "moe-z-loss", "moe-expert-load", "mtp-loss"
  std::string label;   // "decoder.layers.1", or "decoder.layers.1/expert-3" for the load
  double value = 0;
};

// One model chunk of a rank (Megatron's model chunk, a virtual pipeline
// stage): a run of consecutive global decoder layers, with the embedding on
// the first stage's first chunk and the head (final norm, output layer, MTP
// depths, loss) on the last stage's last chunk. Without PP a rank has one
// chunk holding everything.
struct ModelChunk {
  int vp_stage = 0;
  std::int64_t first_layer = 0;  // global number of its first decoder layer
  std::int64_t layer_count = 0;
  std::int64_t first_slot = 0;  // index of its first layer in GPTModel::layers()
  bool embeds = true;           // its input is tokens (else the previous chunk's hidden state)
  bool has_head = true;         // its output is logits (else a hidden state for the next chunk)
  // Where the chunk sits in the pipeline's order of chunks (stage 0 chunk 0 ...
  // stage P-1 chunk V-1): no activation arrives before the first, none leaves the last.
  bool first_virtual_stage = true;
  bool last_virtual_stage = true;
  // Its parameters: GPTModel::parameters()[first_parameter, + parameter_count).
  std::size_t first_parameter = 0, parameter_count = 0;
};

struct MtpBatch;                  // multi_token_prediction.h
class MultiTokenPredictionLayer;  // multi_token_prediction.h
class WeightGradientSites;        // weight_gradient_sites.h
class LayerInputGradients;        // layer_input_gradients.h

class GPTModel {
 public:
  // The backend must outlive the model. The model owns its RNG tracker, seeded
  // from (config.seed, tp rank). Parameters come from `weights` when given
  // (used during construction only; its finish() is called at the end), else
  // from the seeded init.
  GPTModel(const ModelConfig& config, const Backend& backend, ParallelContext parallel,
           ParameterSource* weights = nullptr);
  ~GPTModel();

  // tokens [s_local, b] int64 (this CP rank's part of the sequence), positions
  // [s_local] their global positions. Observes residuals after every layer and
  // output_logits. Returns logits [s_local, b, V/tp] or [s_local, b, V].
  // With MTP depths (config mtp_layers) and `mtp` (this microbatch's
  // mtp_batch), a training forward runs the depths after the decoder, observes
  // their logits (mtp_logits.<k-1>) and attaches their loss to the decoder's
  // output (Megatron's MTPLossAutoScaler): the backward of the returned logits'
  // loss includes it; the logits and the returned loss do not.
  // The whole model; a pipeline stage runs its chunks with forward_chunk.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions,
                     std::optional<bool> runtime_gather_output = std::nullopt,
                     const MtpBatch* mtp = nullptr);
  // One chunk: `input` is the tokens on a chunk that embeds, else the previous
  // chunk's hidden state [s_local(/tp), b, h]; returns the logits on the chunk
  // with the head (observed as forward() does), else its hidden state.
  at::Tensor forward_chunk(int chunk, const at::Tensor& input, const at::Tensor& positions,
                           std::optional<bool> runtime_gather_output = std::nullopt,
                           const MtpBatch* mtp = nullptr);
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  const ModelChunk& chunk(int index) const;  // throws std::out_of_range
  // The MTP inputs of a microbatch from its whole-sequence tokens and labels
  // ([seq, b]): each depth's shifted tokens, positions, labels and loss mask,
  // this rank's part (multi_token_prediction.h).
  MtpBatch mtp_batch(const at::Tensor& tokens, const at::Tensor& labels) const;
  // --observe-wgrad: call around each microbatch's backward (on the rank
  // thread): the weight_gradient sites are notified once per parameter after
  // it (weight_gradient_sites.h). No-ops without the option.
  // Under PP a backward step runs one chunk: `chunk` delivers that chunk's
  // sites only (-1: every parameter's).
  void backward_starts();
  void backward_finished(int chunk = -1);
  // Per-token next-token cross entropy [s_local, b] (fp32 or fp64), from
  // vocab-parallel or gathered logits (see docs/model.md).
  at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& labels) const;
  // Mean over this rank's tokens.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels) const;
  // After backward: all-reduce over TP the gradients of sequence-parallel
  // parameters, then every gradient over CP and DP (sums: a rank's loss is its
  // share of the global mean, see global_batch_loss), then the word
  // embeddings' over the embedding group where two stages hold them.
  // Megatron's finalize_model_grads.
  void finalize_grads();
  // Pipelined with tied embeddings or MTP depths: the first and the last stage
  // each hold the word embeddings (Parameter::shared_embedding), as Megatron's
  // embedding group does. The same on every rank of the run.
  bool word_embeddings_on_two_stages() const;

  // Context parallel (Megatron's load-balanced layout): the sequence is cut into
  // 2*cp chunks and CP rank r holds chunks r and 2*cp-1-r (with packed
  // sequences, of every document). Returns the global positions of this rank's
  // tokens, int64 [seq / cp] (all of [0, seq) without CP).
  at::Tensor local_positions() const;
  // Packed sequences: the layout at this run's CP size (null without packing).
  const SequencePacking* packing() const { return packing_ ? &*packing_ : nullptr; }
  // The microbatch of global index `index` (the seeded tokens and labels
  // [seq, micro_batch], packed documents when the config packs them).
  MicrobatchData microbatch(std::int64_t index) const;
  // Packed sequences, files (--load-batch, --dump) hold the single rank's
  // layout (no padding between documents): a loaded microbatch in this run's
  // layout, and a whole-sequence [seq, ...] tensor of this run's layout in the
  // single rank's (padding rows zero). Both return their input without packing.
  MicrobatchData from_single_rank_layout(const MicrobatchData& data) const;
  at::Tensor to_single_rank_layout(const at::Tensor& full) const;
  // Which of this rank's tokens (local_positions order) are no padding, bool
  // [seq / cp]; undefined without packing.
  at::Tensor local_valid_tokens() const;
  // This rank's rows (dim 0) of a full-sequence [seq, ...] tensor, on the
  // backend's device (inputs are made on the CPU from (seed, microbatch)).
  at::Tensor slice_sequence(const at::Tensor& full) const;
  // The backend's device.
  at::Device device() const { return runtime_.backend->device(); }
  // The global microbatch index of this rank's microbatch m: DP rank d of D
  // processes m * D + d, the samples Megatron's MegatronPretrainingSampler
  // gives it (each micro step takes micro_batch * D consecutive samples, DP
  // rank d the d-th micro_batch of them). `microbatches` is unused: the index
  // does not depend on it.
  std::int64_t global_microbatch(std::int64_t m, std::int64_t microbatches) const;

  const ModelConfig& config() const { return config_; }
  std::vector<Parameter>& parameters() { return params_.parameters(); }
  // This rank's decoder layers, its chunks' in chunk order (all of them without PP).
  const std::vector<TransformerLayer>& layers() const { return layers_; }
  // Null on a pipeline stage without the head.
  const ColumnParallelLinear* output_layer() const { return output_layer_.get(); }
  RngTracker& rng_tracker() { return *rng_; }
  // The backend's graph runner (backend.h's GraphRunner interface).
  GraphRunner& graph_runner() { return *graph_runner_; }

  // Call after each training step (after its backward passes and the update):
  // MoE routers move their expert bias (--moe-expert-bias). Then, per-layer
  // graphs: the first call after a recorded step builds the graphs (Megatron's
  // create_cudagraphs: K warmup runs and one capture per layer); later calls do
  // nothing. A no-op in the other modes.
  void end_step();
  // Before each training step: MoE routers zero their step counters
  // (TopKRouter::begin_step).
  void begin_step();
  // After a training step's backward passes: ("decoder.layers.<i>/microbatch-<m>",
  // fp64 L2 norm) of the gradient each decoder layer of this rank received at
  // its input in each microbatch, read at the end of the step
  // (layer_input_gradients.h says why).
  std::vector<std::pair<std::string, double>> layer_input_gradient_norms();
  // Megatron's MoE metrics tracker with moe_per_layer_logging (track_moe_metrics),
  // after a step's forward and backward passes of `microbatches` microbatches
  // and before end_step; every rank must call it (collectives over pp, tp, cp
  // and dp, a pipeline stage without MoE layers too), and every rank returns the
  // same values. Per MoE layer of the whole model, in global layer order:
  //   moe-load-balancing-loss  (with --moe-aux-loss) and moe-z-loss (with
  //       --moe-z-loss): the microbatch's loss (the ranks' shares summed over
  //       the ranks that split the sequence), averaged over the step's
  //       microbatches and the DP ranks: the single-rank run's mean over the
  //       same microbatches
  //   moe-expert-load  per expert: the step's valid dispatched tokens of the
  //       global batch (summed over microbatches, sequence splits and DP)
  // Empty without --moe-per-layer-logging.
  std::vector<LoggedStatistic> logged_moe_statistics(std::int64_t microbatches);
  // Megatron's MTP loss tracker (MTPLossLoggingHelper), logged in training with
  // MTP depths: per depth k, metric "mtp-loss" label "mtp_<k>", the depth's
  // mean loss over its valid positions (before the scaling factor), averaged
  // over the step's microbatches and the DP ranks (the ranks' shares summed
  // over CP): the single-rank run's mean. Every rank must call it after the
  // step's backward passes (collectives over cp and dp); empty without MTP.
  std::vector<LoggedStatistic> logged_mtp_losses(std::int64_t microbatches);
  // Full-iteration graphs: wraps one iteration's forward/backward (Megatron's
  // FullCudaGraphWrapper around forward_backward_func) on the iteration's
  // batch `inputs`: iterations < K eager, iteration K captured then replayed,
  // later iterations replayed (GraphRunner::run_iteration says what `body` may
  // do). Returns body's outputs. Other modes: body(inputs).
  std::vector<at::Tensor> run_iteration(const RegionFn& body,
                                        const std::vector<at::Tensor>& inputs);
  const ParallelContext& parallel() const { return runtime_.parallel; }
  ModelRuntime& runtime() { return runtime_; }
  void set_training(bool training) { runtime_.training = training; }

 private:
  ModelConfig config_;
  ParameterFactory params_;
  std::unique_ptr<RngTracker> rng_;
  ModelRuntime runtime_;
  std::vector<ModelChunk> chunks_;
  std::unique_ptr<Embedding> embedding_;  // null on a chunk set without the embedding
  std::vector<TransformerLayer> layers_;
  std::unique_ptr<Norm> final_layernorm_;
  std::unique_ptr<ColumnParallelLinear> output_layer_;
  // One per depth, or one for every depth with mtp_repeated_layer.
  std::vector<std::unique_ptr<MultiTokenPredictionLayer>> mtp_layers_;
  std::unique_ptr<WeightGradientSites> wgrad_sites_;
  std::shared_ptr<LayerInputGradients> layer_input_gradients_;
  // fp64 [mtp_layers]: each depth's loss shares of the step so far, added on the
  // device; begin_step zeroes it in place.
  at::Tensor mtp_tracked_losses_;
  std::unique_ptr<GraphRunner> graph_runner_;
  // Packed sequences: the layout at this run's CP size and its tables on the device.
  std::optional<SequencePacking> packing_, single_rank_packing_;
  PackedPositionTables packed_tables_;

  // The MTP depths after the decoder (final-norm output `h`): returns `h` with
  // their loss attached.
  at::Tensor multi_token_prediction(const at::Tensor& h, const MtpBatch& mtp,
                                    const at::Tensor& positions,
                                    std::optional<bool> runtime_gather_output);

  // The final norm, output layer and MTP depths (`chunk`, the chunk with the
  // loss), and the word embeddings' copy where the stage has none.
  void build_head(const ParallelContext& parallel, const ModelChunk& chunk);
  // The shared word embeddings' gradient summed over the embedding group.
  void sum_over_embedding_group();
  // A chunk's decoder layers with recompute and per-layer graphs wrapped
  // around the one layer structure.
  at::Tensor decoder_forward(const ModelChunk& chunk, const at::Tensor& h,
                             const at::Tensor& positions);
  // Layer slots [begin, end) of layers_ with the residual observation after
  // each (the chunk function full recompute checkpoints).
  at::Tensor run_layers(std::int64_t begin, std::int64_t end, const at::Tensor& h,
                        const at::Tensor& positions);
  // One layer, through the per-layer graph runner when graphs are per_layer.
  at::Tensor run_layer(std::int64_t slot, const at::Tensor& h, const at::Tensor& positions,
                       bool last_of_chunk);
};

at::ScalarType to_scalar_type(ModelDType dtype);

// Positions of CP rank `cp_rank`'s tokens in Megatron's load-balanced layout.
at::Tensor context_parallel_positions(std::int64_t seq, int cp, int cp_rank);

}  // namespace parity
