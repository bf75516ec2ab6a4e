#pragma once
// The driver room (above model and metrics): the step driver, `steps` training steps of a GPTModel
// over this rank's microbatches, with gradient accumulation, finalize_grads and an SGD update, and
// the rank program "model" that `parity run` launches (threads, processes or env mode). See
// docs/cli.md ("parity run") and docs/trace-format.md.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "harness/observation/source_kind.h"

namespace parity {

class GPTModel;
class LoadedBatch;
class TraceRecorder;
class MetricCollector;
class MetricExecutor;
class Optimizer;
struct RankContext;

struct TrainingOptions {
  // The run's steps are [first_step, steps): a resumed run starts where its
  // checkpoint was saved (the data and the step numbers continue).
  std::int64_t first_step = 0;
  std::int64_t steps = 2;
  std::int64_t microbatches = 2;  // per DP rank
  // After every eval_every-th step (0 = never): an evaluation forward (no
  // grad, training off, observations suspended) over `microbatches` eval
  // microbatches per DP rank of their own (global indices from 1 << 30):
  // StepResult::eval_loss.
  std::int64_t eval_every = 0;
  double lr = 0.1;  // SGD; 0 = no update
  // Megatron's distributed optimizer (flat_shard_layout.h): the update split
  // flat over DP, the optimizer's norms counted per flat range.
  bool distributed_optimizer = false;
  // When set, the update is its step (it must outlive run_training; a resumed
  // run's holds the checkpoint's state); else SGD with `lr` and
  // `distributed_optimizer`.
  Optimizer* optimizer = nullptr;
  // The optimizer's norms to report per step (parameter_norms.h), by --metrics
  // name: global-wgrad-l2 (after finalize_grads), global-param-l2 and
  // layer-param-l2 (after the update).
  std::vector<std::string> parameter_metrics;
  // When set, capture_tensor_observations(recorder, kinds) is active around the
  // steps; the recorder must outlive run_training.
  TraceRecorder* recorder = nullptr;
  KindSet kinds;  // empty = first_wave_kinds()
  // When set (with `executor`), the collector observes in the same scope as the
  // recorder (kinds: the union) and is committed after every step (after
  // end_step, before after_step): StepResult::metrics.
  MetricCollector* collector = nullptr;
  MetricExecutor* executor = nullptr;
  // When set, the inputs come from it (--load-batch) instead of the seeded
  // microbatch_data; it must outlive run_training.
  const LoadedBatch* batch = nullptr;
  // Added (mod vocab) to the token ids at the model's padding positions
  // (MoeConfig::padding_fraction): parity check's run (h).
  std::int64_t padding_token_shift = 0;
  // --dump (run_dump.h): called after each step's forward/backward with this
  // rank's logits and per-token losses of every microbatch, and after
  // finalize_grads before the update. Every rank must call them (gathers).
  std::function<void(std::int64_t step, const std::vector<at::Tensor>& logits,
                     const std::vector<at::Tensor>& token_losses)>
      after_backward;
  std::function<void(std::int64_t step)> after_finalize_grads;
  // Called on the rank thread after every step (fault points, cancellation).
  std::function<void(std::int64_t step)> after_step;
};

struct StepMetric {
  std::string metric;
  std::string label;
  double value = 0;
};

struct StepResult {
  std::int64_t step = 0;
  // The mean next-token loss over every token of the step's global batch
  // (all-reduced over CP and DP): the same value on every rank, and equal to
  // the single-rank run's (up to summation order).
  double loss = 0;
  // FNV-1a 64 chained over this rank's logits of every microbatch, in order.
  std::uint64_t logits_digest = 0;
  // FNV-1a 64 chained over every gradient after finalize_grads, in parameter
  // order, and each parameter's own digest (this rank's shard).
  std::uint64_t grad_digest = 0;
  std::vector<std::pair<std::string, std::uint64_t>> grad_digests;
  // Each gradient's L2 norm in fp64 (compared within tolerance where digests differ).
  std::vector<std::pair<std::string, double>> grad_norms;
  // The L2 norm (fp64) of the gradient each decoder layer of the rank received
  // at its input, per microbatch, read at the end of the step
  // (GPTModel::layer_input_gradient_norms; graph_replay compares them).
  std::vector<std::pair<std::string, double>> input_grad_norms;
  // After the update, the digest of each parameter two pipeline stages hold
  // (the word embeddings' copies, Parameter::shared_embedding): the copies
  // must stay equal (replica_consistency).
  std::vector<std::pair<std::string, std::uint64_t>> shared_value_digests;
  // The collector's results of the step and, with --moe-per-layer-logging,
  // the MoE tracker's (GPTModel::logged_moe_statistics), sorted by (metric, label).
  std::vector<StepMetric> metrics;
  // The evaluation loss after this step (the mean over the eval batch's
  // tokens, all-reduced over CP and DP); NaN when no evaluation ran.
  double eval_loss = std::numeric_limits<double>::quiet_NaN();
  std::int64_t observations = 0;  // notifications recorded during the step
  double seconds = 0;             // wall time of the step on this rank
  // CPU time of the rank's thread in the step (its compute; collectives run
  // on the transport's threads): a load-independent measure of the work.
  double cpu_seconds = 0;
};

struct TrainingResult {
  std::vector<StepResult> steps;
};

// For each step s and local microbatch m: inputs of global microbatch
// s * (dp * microbatches) + model.global_microbatch(m, microbatches), this CP
// rank's tokens/labels/positions; forward; loss = sum of token losses / tokens
// of the global batch; backward (gradients accumulate); then finalize_grads and
// p -= lr * grad under no-grad (gradients are reset at the next step's start);
// the microbatch loop runs inside model.run_iteration, end_step() follows.
// ExecutionPointScope{s, m, phase} around each microbatch's forward and
// backward (the phase the graph runner set; eager otherwise), {s, -1, eager}
// around the rest of the step. Each finished step's row (loss, observations,
// seconds) goes to the rank's status (publish_step_row) before after_step, so
// that `parity run` prints it while the run goes on.
TrainingResult run_training(GPTModel& model, const TrainingOptions& options);

// Packed sequences: tells `collector` which of the model's local rows (and,
// under sequence parallelism, of its TP shard) hold tokens, so that padding is
// in no metric's population. Nothing without packing.
void set_valid_tokens(MetricCollector& collector, const GPTModel& model);

inline constexpr const char* kModelProgram = "model";

// The rank program: builds the model from ctx.config (model_config_from, the
// configured backend from the registry), runs the driver (with a TraceRecorder when
// config.trace is set) and returns
//   {"rank", "coordinates": {tp, cp, dp}, "steps": [{"step", "loss",
//    "logits_digest", "grad_digest", "grads": {name: digest}, "grad_norms": {name: l2},
//    "metrics": [{"metric", "label", "value"}] (with config.metrics), "observations",
//    "seconds", "cpu_seconds"}], "collectives": {axis: {"ranks", "calls", "hash"}},
//    "counts": {kind: n}, "trace": [record...] (only with a trace or a dump),
//    "dump": {file: {"holds", "tensors"}} (only with a dump: what this rank wrote, run_dump.h)}.
// With config.resume the model, the optimizer, the routers' expert biases and
// (at the saving layout) the RNG streams come from the checkpoint and the run
// starts at its step; with config.save_checkpoint it saves after the last step
// (and every config.save_every steps). The fault point is after the run's
// first step: inside the save when one follows that step (after the rank
// wrote its file, before the checkpoint is published), else after the step.
nlohmann::json run_model_program(RankContext& ctx);
// Registers run_model_program as "model" unless a program of that name is
// registered already (idempotent; also done at start-up).
void register_model_program();

}  // namespace parity
